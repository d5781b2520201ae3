"""What the parts of the miner node share: the round's in-memory material and the node's attributes,
typed once for every mixin (``miner.commit``, ``miner.publish``, ``miner.rewards``), as
``validator.parts`` does for the validator."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from torch import Tensor

from miner.behaviour import Behaviour
from miner.checkpoints import CheckpointSource
from miner.config import MinerConfig
from miner.state import MinerState
from miner.work import BuiltUpdate
from protocol.node.api import NodeMetrics
from protocol.node.traffic import TrafficLedger
from protocol.p2p.discovery import Discovery
from protocol.p2p.transfer import BlobStore, FetchPolicy
from protocol.rounds.coordinator import Coordinator, update_commitment
from protocol.runspec import RunSpec
from protocol.wire.tensorblob import split_checkpoint
from training.data import Dataset, prepare

#: Produces TEE evidence for (round, miner, update digest); None when the node runs without a TEE.
EvidenceFn = Callable[[int, str, bytes], bytes | None]


@dataclass
class LiveRound:
    """The current round's in-memory material (re-derived from disk after a restart)."""

    round: int = 0
    checkpoint: dict[str, Tensor] | None = None
    checkpoint_digest: bytes = b""
    built: BuiltUpdate | None = None
    snapshots: dict[int, dict[str, Tensor]] = field(default_factory=dict)
    parts: dict[str, tuple[int, bool]] = field(default_factory=dict)
    """Digest (0x-hex) of a transcript state's part -> (step, whether it is the parameters), for serving
    on demand."""


def part_index(
    steps: list[int], parts: list[tuple[str, str]] | list[list[str]]
) -> dict[str, tuple[int, bool]]:
    """Digest (``0x`` + hex) of each recorded state's parameters and rest -> (step, is the parameters)."""
    out: dict[str, tuple[int, bool]] = {}
    for step, (p, q) in zip(steps, parts, strict=bool(parts)):
        out["0x" + p] = (step, True)
        out["0x" + q] = (step, False)
    return out


class MinerParts:
    """The attributes :class:`miner.node.MinerNode` sets up, typed once for every mixin."""

    cfg: MinerConfig
    spec: RunSpec
    coord: Coordinator
    discovery: Discovery
    behaviour: Behaviour
    evidence_fn: EvidenceFn | None
    address: str
    state: MinerState
    public: BlobStore
    metrics: NodeMetrics
    traffic: TrafficLedger
    fetch_policy: FetchPolicy
    checkpoints: CheckpointSource
    phase: str
    last_error: str
    url: str
    rounds_done: int
    _ds: Dataset | None
    _live: LiveRound
    _lock: threading.RLock
    _announced: set[int]
    """Rounds this process has announced its update for (a restarted process announces again)."""
    _synced: bool
    """Set after the first step since start: until then a missing transcript state may only mean this
    process has not restored its round yet, so it is answered 503 (retry), not 404 (not served)."""

    @property
    def dataset(self) -> Dataset:
        """The run's prepared corpus (loaded once)."""
        if self._ds is None:
            self._ds = prepare(self.spec.load_corpus(), self.spec.model)
        return self._ds

    def _checkpoint(self, round: int, digest: bytes) -> dict[str, Tensor]:
        """theta_round's parameters (``miner.checkpoints``), kept in memory for the round."""
        if (
            self._live.round == round
            and self._live.checkpoint is not None
            and self._live.checkpoint_digest == digest
        ):
            return self._live.checkpoint
        params, _momentum = split_checkpoint(self.checkpoints.get(round, "0x" + digest.hex()))
        self._live = LiveRound(round=round, checkpoint=params, checkpoint_digest=digest)
        return params

    def _chain_has_commit(self, round: int, digest: bytes) -> bool:
        got = self.coord.update_commitments(round).get(self.address)
        return got is not None and got == update_commitment(
            self.coord.chain_id, self.coord.contract, round, self.address, digest
        )
