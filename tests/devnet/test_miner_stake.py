"""The devnet's miner stake (issue 26): by default the network's minimum (350,000 tokens), where the run
file's audit section deploys q = 0.39%; ``--miner-stake 100`` gives q = 1 (every miner audited every
round) for the demos and tests that need a lazy miner caught in every round. Every miner bonds the stake
the devnet deployed with."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from miner.config import MinerConfig, load_miner_config
from protocol.rounds.deployment import NetworkParams
from tessera.commands import devnet, miner
from tessera.devnet.config import DevnetConfig, DevnetError
from tessera.devnet.procs import node_procs
from tessera.devnet.runfile import devnet_spec
from tessera.nodes import overrides_from_args


def _miner_stake(cfg: DevnetConfig) -> int:
    """The stake miner0 bonds, from the flags the devnet starts it with."""
    names = cfg.node_names()
    procs = node_procs(cfg, dict.fromkeys(names, "0x" + "11" * 32), dict.fromkeys(names, 1), [], "", {})
    parser = argparse.ArgumentParser()
    miner.register(parser.add_subparsers())
    parsed = parser.parse_args(["miner", "run", *procs["miner0"].args])
    return load_miner_config(None, overrides_from_args(parsed, MinerConfig), env={}).stake


def _deployed_q_bps(cfg: DevnetConfig) -> int:
    """The audit rate ``tessera contracts deploy --run-file`` computes for this devnet's run and stake."""
    p = NetworkParams()
    audits = devnet_spec(cfg).audits
    assert audits is not None
    q = audits.network_params(cfg.miner_stake_wei(), p.emission_per_round, p.validator_share_bps)
    return q["audit_rate_bps"]


def test_the_default_stake_audits_few_pairs_and_a_small_one_every_pair(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    devnet.register(parser.add_subparsers())
    assert parser.parse_args(["devnet"]).miner_stake is None
    default = DevnetConfig(workdir=tmp_path)
    assert default.miner_stake_wei() == NetworkParams().min_miner_stake == 350_000 * 10**18
    assert _miner_stake(default) == 350_000 * 10**18 == MinerConfig().stake
    assert _deployed_q_bps(default) == 39  # 2.67 q c = 0.0104 bits per trained parameter per step
    small = DevnetConfig(
        workdir=tmp_path, miner_stake=parser.parse_args(["devnet", "--miner-stake", "100"]).miner_stake
    )
    assert _miner_stake(small) == 100 * 10**18
    assert _deployed_q_bps(small) == 10_000


@pytest.mark.parametrize("stake", [0, -5])
def test_a_stake_below_one_token_is_refused_before_anything_starts(stake: int) -> None:
    with pytest.raises(DevnetError, match="miner stake must be a whole number of tokens >= 1"):
        DevnetConfig(miner_stake=stake).miner_stake_wei()
