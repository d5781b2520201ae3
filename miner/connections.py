"""What every service of a miner node is given: its configuration and connections
(:class:`MinerConnections`: the chain, discovery, durable state, the blob store it serves, metrics, its
behaviour, where its checkpoints come from, and the runtime), and the current round's material that the
commit service makes and the publish service serves (:class:`RoundMaterial`).

The node (``miner.node``) composes its services over one :class:`MinerConnections`, as
``validator.connections`` does for the validator.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from torch import Tensor

from miner.behaviour import Behaviour
from miner.checkpoints import CheckpointSource
from miner.config import MinerConfig
from miner.errors import MinerError
from miner.state import MinerState
from miner.work import BuiltUpdate
from protocol.node.connections import NodeConnections
from protocol.node.traffic import TrafficLedger
from protocol.p2p.discovery import Discovery
from protocol.p2p.transfer import FetchPolicy
from protocol.rounds.coordinator import Coordinator
from protocol.runspec import RunSpec
from protocol.wire.commitments import update_commitment
from protocol.wire.tensorblob import split_checkpoint

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


@dataclass(frozen=True)
class MinerConnections(NodeConnections[MinerConfig, MinerState]):
    """A miner's configuration and connections, shared read-only by its services: the fields every node
    has (``protocol.node.connections.NodeConnections``: settings, run, round view, discovery, state, the
    blobs it serves, metrics, runtime), and these."""

    behaviour: Behaviour
    """How this miner trains and serves (honest, or an attack suite's mode)."""
    checkpoints: CheckpointSource
    """Where theta_r comes from: held, rebuilt or fetched."""
    commits_seen: dict[tuple[int, bytes], int] = field(default_factory=dict)
    """(round, digest) of a commitment of this miner found on chain -> the block of the reading it was
    found at: it stays there while the chain does not go back (:meth:`chain_has_commit`)."""

    @classmethod
    def create(
        cls,
        cfg: MinerConfig,
        spec: RunSpec,
        coord: Coordinator,
        discovery: Discovery,
        behaviour: Behaviour,
        traffic: TrafficLedger | None = None,
    ) -> MinerConnections:
        """A miner's connections: its state opened in ``cfg.data_dir``, its blob store beside it."""
        parts = cls.parts("miner", cfg, coord, discovery, MinerState, traffic=traffic, retried=(MinerError,))
        policy = FetchPolicy(timeout=cfg.fetch_timeout, attempts=cfg.fetch_attempts)
        checkpoints = CheckpointSource(spec, coord, discovery, parts.state, policy, parts.metrics)
        behaviour.bind(spec, coord)
        return cls(cfg, spec, coord, discovery, *parts, behaviour, checkpoints)

    def chain_has_commit(self, round: int, digest: bytes) -> bool:
        """Whether the chain holds this miner's commitment to the update ``digest`` in ``round``. Once
        found it is not read again while the chain's block (the step's reading, no request) has not gone
        back below the reading it was found at: a restarted or reorged chain is read again (the
        commit phase's log query every step after committing was a third of a miner's requests)."""
        block = self.coord.current(max_age=float("inf")).block
        seen = self.commits_seen.get((round, digest))
        if seen is not None and block >= seen:
            return True
        got = self.coord.update_commitments(round).get(self.address)
        held = got is not None and got == update_commitment(
            self.coord.chain_id, self.coord.contract, round, self.address, digest
        )
        if held:
            self.commits_seen[(round, digest)] = block
            for key in [k for k in self.commits_seen if k[0] < round - 1]:  # bounded: two rounds kept
                del self.commits_seen[key]
        else:
            self.commits_seen.pop((round, digest), None)
        return held


class RoundMaterial:
    """The current round's material in memory (:class:`LiveRound`), made by the commit service and served
    by the publish service, under one lock (requests read it while the step loop replaces it)."""

    def __init__(self, checkpoints: CheckpointSource) -> None:
        self.checkpoints = checkpoints
        self.live = LiveRound()
        """The round's checkpoint, built update and transcript snapshots."""
        self.lock = threading.RLock()
        """Held while a request reads :attr:`live`."""

    def checkpoint(self, round: int, digest: bytes) -> dict[str, Tensor]:
        """theta_round's parameters (``miner.checkpoints``), kept in memory for the round."""
        live = self.live
        if live.round == round and live.checkpoint is not None and live.checkpoint_digest == digest:
            return live.checkpoint
        params, _momentum = split_checkpoint(self.checkpoints.get(round, "0x" + digest.hex()))
        self.live = LiveRound(round=round, checkpoint=params, checkpoint_digest=digest)
        return params
