"""A miner trains ahead of a slow certificate from its first training round too: theta_r is rebuilt from
theta_{r-1} as the chain certified it when the miner has no record of round r-1 (the join round)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from miner.checkpoints import CheckpointSource
from miner.state import MinerState
from protocol.node.api import NodeMetrics
from protocol.p2p.transfer import FetchPolicy
from protocol.rounds.coordinator import Settlement
from protocol.runspec import RunSpec
from protocol.wire.tensorblob import join_checkpoint, tensors_digest
from training.merge import next_checkpoint


class _Chain:
    """The chain after the join round: theta_1 certified (the genesis), round 1 settled with no update."""

    chain_id, contract = 31337, "0x" + "c0" * 20

    def __init__(self, genesis: str) -> None:
        self.genesis = genesis

    def checkpoint(self, round: int) -> bytes | None:
        return bytes.fromhex(self.genesis[2:]) if round == 1 else None

    def settlement(self, round: int) -> Settlement | None:
        return Settlement({}, {}, {}) if round == 1 else None

    def update_commitments(self, round: int) -> dict[str, bytes]:
        return {}


class _NoPeers:
    def find(self, round: int, want: Any = None) -> list[Any]:
        return []


def test_the_first_training_round_is_rebuilt_without_a_record_of_the_join_round(tmp_path: Path) -> None:
    spec = RunSpec()
    genesis = spec.genesis_digest()
    source = CheckpointSource(
        spec,
        _Chain(genesis),
        _NoPeers(),
        MinerState(tmp_path),
        FetchPolicy(),
        NodeMetrics.create("ta"),  # type: ignore[arg-type]
    )
    got = source.rebuild_uncertified(2)
    assert got is not None
    tensors, digest = got
    params, momentum = next_checkpoint(spec.genesis_params(), {}, [], spec.outer, spec.merge)
    assert digest == tensors_digest(join_checkpoint(params, momentum)) == tensors_digest(tensors)
    assert source.held(digest) is not None  # stored for the round's training and its commit
    assert source.rebuild_uncertified(3) is None  # round 2 neither held nor certified: nothing to rebuild
