"""What every service of a node is given, the same for both roles: :class:`NodeConnections`, the node's
configuration and connections (the chain's round view, discovery, durable state, the blob store it serves,
metrics and the runtime), typed by the role's config and state.

Each role extends it with what only it needs (``miner.connections.MinerConnections``: its behaviour and
checkpoint source; ``validator.connections.Connections``: its fetch policy and peers) and builds it with
:meth:`NodeConnections.parts`, so that a node's state, blob store, metrics and runtime are opened the same
way for both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Generic, NamedTuple, Protocol, TypeVar

from protocol.node.api import NodeMetrics
from protocol.node.settings import NodeConfig
from protocol.node.start import NodeRuntime
from protocol.node.traffic import TrafficLedger
from protocol.p2p.blobs import BlobStore, DigestFn, sha256_digest
from protocol.p2p.discovery import Discovery
from protocol.rounds.coordinator import Coordinator
from protocol.runspec import RunSpec
from training.data import Dataset, prepare


class NodeState(Protocol):
    """A role's durable state, as the shared part of a node sees it: the folder it lives in."""

    dir: Path


CfgT = TypeVar("CfgT", bound=NodeConfig)
StateT = TypeVar("StateT", bound=NodeState)


class NodeParts(NamedTuple, Generic[StateT]):
    """A node's state, blob store, metrics and runtime, opened by :meth:`NodeConnections.parts`."""

    state: StateT
    public: BlobStore
    metrics: NodeMetrics
    runtime: NodeRuntime


@dataclass(frozen=True)
class NodeConnections(Generic[CfgT, StateT]):
    """A node's configuration and connections, shared read-only by its services."""

    cfg: CfgT
    """The node's settings."""
    spec: RunSpec
    """The run: model, codec, inner and outer loop, merge policy, corpus."""
    coord: Coordinator
    """The chain's round view; its ``address`` is this node's."""
    discovery: Discovery
    """Signed node records: where this node announces what it serves, and finds its peers."""
    state: StateT
    """The durable per-round records (``state.json``) and the blobs kept with them."""
    public: BlobStore
    """The blobs this node serves."""
    metrics: NodeMetrics
    """The node's Prometheus metrics."""
    runtime: NodeRuntime
    """Start, run and stop, and what ``/status`` shows (phase, last error, URL)."""

    @staticmethod
    def parts(
        role: str,
        cfg: CfgT,
        coord: Coordinator,
        discovery: Discovery,
        open_state: Callable[[Path], StateT],
        *,
        traffic: TrafficLedger | None = None,
        retried: tuple[type[Exception], ...] = (),
        digest_fn: DigestFn = sha256_digest,
    ) -> NodeParts[StateT]:
        """Open a ``role`` node's state in ``cfg.data_dir`` (``open_state``), its blob store beside it
        (``public/``, blobs named by ``digest_fn``), fresh metrics and its runtime (retrying ``retried``,
        the role's own errors, and logging as ``{role}.node``)."""
        state = open_state(cfg.data_dir.expanduser())
        public = BlobStore(state.dir / "public", digest_fn=digest_fn)
        runtime = NodeRuntime.create(role, cfg, coord, discovery, public, traffic=traffic, retried=retried)
        return NodeParts(state, public, runtime.metrics, runtime)

    @property
    def address(self) -> str:
        """This node's address."""
        return self.coord.address

    @property
    def url(self) -> str:
        """This node's public URL (empty until the runtime started)."""
        return self.runtime.url

    @cached_property
    def dataset(self) -> Dataset:
        """The run's prepared corpus (loaded on first use)."""
        return prepare(self.spec.load_corpus(), self.spec.model)
