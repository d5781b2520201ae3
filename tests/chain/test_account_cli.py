"""``tessera account``: status, claim, unbond and withdraw against a real anvil, figures checked on-chain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from web3 import Web3

from protocol.rounds.anvil import Anvil
from tessera.cli import main
from tessera.commands.account import parse_tokens, tokens
from tests.chain.chain_support import Net, make_net, mine

pytestmark = pytest.mark.chain


@pytest.fixture(scope="module")
def net1(w3: Web3, anvil: Anvil) -> Net:
    return make_net(w3, anvil, n_miners=1, n_validators=1)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if rc == 0 and out.strip() else {}), err


def _pay_the_miner(net: Net) -> None:
    """One round in which the only miner commits and the only validator scores it."""
    (m,), (v,) = net.miners, net.validators
    r = net.fresh_round()
    m.commit_update(r, b"\x42" * 32)
    v.commit_seed(r, b"\x09" * 32)
    net.mine_past_deadline()
    v.advance()
    v.reveal_seed(r, b"\x09" * 32)
    net.mine_past_deadline()
    v.advance()
    v.commit_scores(r, [5000], b"\x07" * 32)
    net.mine_past_deadline()
    v.advance()
    v.reveal_scores(r, [5000], b"\x07" * 32)
    net.mine_past_deadline()
    v.finalize_round(r)


def test_money_commands_match_the_chain(
    net1: Net, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dep = tmp_path / "deployment.json"
    net1.deployment.save(dep)
    miner = net1.miners[0]
    monkeypatch.setenv("MINER_KEY", "0x" + bytes(miner.account.key).hex())  # type: ignore[union-attr]
    base = ["--deployment", str(dep), "--key-env", "MINER_KEY", "--json"]
    reader = net1.reader()

    rc, st, _ = _run(["account", "status", *base], capsys)
    assert rc == 0 and st["role"] == "miner" and st["owed_wei"] == 0 and st["claimed_wei"] == 0
    assert st["stake_wei"] == reader.account_info(miner.address).stake

    rc, _, err = _run(["account", "claim", *base], capsys)
    assert rc == 2 and "no rewards to claim" in err

    _pay_the_miner(net1)
    owed = reader.account_info(miner.address).owed
    assert owed > 0
    before = reader.balance_of(miner.address)
    rc, out, _ = _run(["account", "claim", *base], capsys)
    assert rc == 0 and out["claimed_wei"] == owed
    assert reader.balance_of(miner.address) == before + owed
    assert reader.account_info(miner.address).owed == 0
    rc, st, _ = _run(["account", "status", *base], capsys)
    assert rc == 0 and st["claimed_wei"] == owed and st["owed_wei"] == 0  # claimed so far, from its events

    stake = reader.account_info(miner.address).stake
    rc, out, _ = _run(["account", "unbond", *base, "--all"], capsys)
    assert rc == 0 and out["unbonded_wei"] == stake
    assert reader.account_info(miner.address).stake == 0
    rc, _, err = _run(["account", "withdraw", *base], capsys)  # the delay has not ended
    assert rc == 2 and "StillUnbonding" in err
    mine(net1.w3, net1.deployment.params.unbonding_blocks + 1)
    rc, st, _ = _run(["account", "status", *base], capsys)
    assert st["withdrawable"] is True and st["unbonding_wei"] == stake
    before = reader.balance_of(miner.address)
    rc, out, _ = _run(["account", "withdraw", *base], capsys)
    assert rc == 0 and out["withdrawn_wei"] == stake
    assert reader.balance_of(miner.address) == before + stake


def test_a_keystore_without_password_or_terminal_is_one_line(
    net1: Net, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    from eth_account import Account

    from protocol.wire.keys import write_keystore

    dep = tmp_path / "deployment.json"
    net1.deployment.save(dep)
    write_keystore(Account.create(), tmp_path / "k.json", "pw")
    monkeypatch.delenv("TESSERA_KEYSTORE_PASSWORD", raising=False)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # no terminal: getpass used to end in EOFError
    rc, _, err = _run(
        ["account", "claim", "--deployment", str(dep), "--keystore", str(tmp_path / "k.json")], capsys
    )
    assert rc == 2 and "needs its password in $TESSERA_KEYSTORE_PASSWORD (no terminal)" in err
    assert len(err.strip().splitlines()) == 1, err


def test_token_amounts() -> None:
    assert (
        tokens(1_500_000_000_000_000_000) == "1.5"
        and tokens(0) == "0"
        and tokens(7) == "0.000000000000000007"
    )
    assert parse_tokens("12.5") == 12_500_000_000_000_000_000
    from tessera.errors import TesseraError

    for bad in ["0", "-1", "abc", "1e-19", "NaN", "inf"]:
        with pytest.raises(TesseraError):
            parse_tokens(bad)
