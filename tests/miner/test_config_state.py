"""The miner's typed config (file < env < flags, the key from the environment or a keystore) and its
restart-safe state (moved from ``tests/network/test_config_state.py``, which keeps the tests both roles share)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from miner.config import load_miner_config, load_miner_key
from miner.errors import MinerConfigError, MinerStateError
from miner.state import ABANDONED, COMMITTED, MinerRoundRecord, MinerState


def test_precedence(tmp_path: Path) -> None:
    f = tmp_path / "m.toml"
    f.write_text('[miner]\nport = 7000\nstake = 5\ndht_peers = ["/ip4/1.2.3.4/tcp/1/p2p/x"]\n')
    env = {"TESSERA_MINER_PORT": "7001", "TESSERA_MINER_THREADS": "2"}
    cfg = load_miner_config(f, {"port": "7002"}, env=env)
    assert cfg.port == 7002 and cfg.threads == 2 and cfg.stake == 5
    assert cfg.dht_peers == ("/ip4/1.2.3.4/tcp/1/p2p/x",)
    assert load_miner_config(f, {}, env=env).port == 7001


def test_key_from_env_and_keystore(tmp_path: Path) -> None:
    from eth_account import Account

    cfg = load_miner_config(None, {}, env={})
    with pytest.raises(MinerConfigError, match="TESSERA_MINER_KEY"):
        load_miner_key(cfg, env={})
    key = "0x" + "22" * 32
    assert load_miner_key(cfg, env={"TESSERA_MINER_KEY": key}) == key
    ks = tmp_path / "ks.json"
    import json

    ks.write_text(json.dumps(Account.encrypt(key, "pw", iterations=2)))
    cfg2 = load_miner_config(None, {"keystore": str(ks)}, env={})
    assert load_miner_key(cfg2, env={"TESSERA_KEYSTORE_PASSWORD": "pw"}) == key
    with pytest.raises(MinerConfigError, match="decrypt"):
        load_miner_key(cfg2, env={"TESSERA_KEYSTORE_PASSWORD": "wrong"})


def test_miner_state_resume(tmp_path: Path) -> None:
    st = MinerState(tmp_path)
    st.prepare(1, MinerRoundRecord(update_digest="aa"), {"ef/w": torch.ones(3)})
    st.set_status(1, COMMITTED)
    st.prepare(2, MinerRoundRecord(update_digest="bb"), {"ef/w": torch.full((3,), 2.0)})
    # a restart: round 2 was prepared but not committed; round 3 starts from round 1's residual
    again = MinerState(tmp_path)
    assert again.record(2).status == "prepared"
    assert torch.equal(again.ef_residual_for(3)["ef/w"], torch.ones(3))
    again.set_status(2, COMMITTED)
    assert torch.equal(MinerState(tmp_path).ef_residual_for(3)["ef/w"], torch.full((3,), 2.0))
    with pytest.raises(MinerStateError):
        again.prepare(2, MinerRoundRecord(update_digest="cc"), {})
    again.set_status(2, ABANDONED)
    assert torch.equal(again.ef_residual_for(3)["ef/w"], torch.ones(3))


def test_corrupt_state_file(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text("{not json")
    with pytest.raises(MinerStateError):
        MinerState(tmp_path)
