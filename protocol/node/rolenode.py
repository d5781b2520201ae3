"""What both roles' nodes show their callers and how they run, in one place: :class:`RoleNode`, the base of
``miner.node.MinerNode`` and ``validator.node.ValidatorNode``.

A node holds its connections (``protocol.node.connections.NodeConnections``, the role's typed subclass) and
its runtime (``protocol.node.start.NodeRuntime``, a component); this base only forwards what callers read
(settings, round view, state, URL, phase, ...) to them, and hands ``start``, ``run`` and ``stop`` to the
runtime with the role's parts: its ``/status`` document, its routes, its blobs made on demand, its action
on the chain's current round (``act``, called by :meth:`NodeRuntime.step`) and when it is done.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Generic, Self

from fastapi import FastAPI

from protocol.node.api import NodeMetrics
from protocol.node.connections import CfgT, NodeConnections, StateT
from protocol.node.start import NodeRuntime
from protocol.node.traffic import TrafficLedger
from protocol.p2p.blobs import BlobStore
from protocol.p2p.discovery import Discovery
from protocol.rounds.coordinator import Coordinator, RoundState


class RoleNode(ABC, Generic[CfgT, StateT]):
    """A node of one role over its connections ``conn`` and runtime (``conn.runtime``): a role gives
    :meth:`act`, :meth:`status` and :meth:`add_routes`, and may give :attr:`blob_fallback` and
    :meth:`done`."""

    def __init__(self, conn: NodeConnections[CfgT, StateT]) -> None:
        self.conn = conn
        self.runtime: NodeRuntime = conn.runtime

    # -- what callers read -----------------------------------------------------------------------------

    @property
    def cfg(self) -> CfgT:
        """The node's settings."""
        return self.conn.cfg

    @property
    def coord(self) -> Coordinator:
        """The chain's round view."""
        return self.conn.coord

    @property
    def discovery(self) -> Discovery:
        """Signed node records."""
        return self.conn.discovery

    @property
    def state(self) -> StateT:
        """The durable per-round records."""
        return self.conn.state

    @property
    def public(self) -> BlobStore:
        """The blobs this node serves."""
        return self.conn.public

    @property
    def metrics(self) -> NodeMetrics:
        """The node's Prometheus metrics."""
        return self.conn.metrics

    @property
    def traffic(self) -> TrafficLedger:
        """What the node sent and received."""
        return self.runtime.traffic

    @property
    def address(self) -> str:
        """This node's address."""
        return self.conn.address

    @property
    def url(self) -> str:
        """This node's public URL (once started)."""
        return self.runtime.url

    @property
    def phase(self) -> str:
        """What the node is doing (``/status``)."""
        return self.runtime.phase

    @phase.setter
    def phase(self, value: str) -> None:
        self.runtime.phase = value

    @property
    def last_error(self) -> str:
        """The last step's error, if it has not recovered since (``/status``)."""
        return self.runtime.last_error

    # -- what the role gives ---------------------------------------------------------------------------

    @abstractmethod
    def act(self, st: RoundState) -> None:
        """Take whatever action the chain's current state ``st`` calls for."""

    @abstractmethod
    def status(self) -> dict[str, Any]:
        """The /status document."""

    @abstractmethod
    def add_routes(self, app: FastAPI) -> None:
        """Mount the role's own routes on the node's app."""

    @property
    def blob_fallback(self) -> Callable[[str], bytes | None] | None:
        """What produces a blob the store does not hold, on demand (None: nothing)."""
        return None

    def done(self) -> bool:
        """Whether the node has done what it was started for (``run`` returns)."""
        return False

    # -- runtime ---------------------------------------------------------------------------------------

    def start(self) -> Self:
        """Start the HTTP API and register on-chain if needed."""
        self.runtime.start(self.status, self.add_routes, self.blob_fallback)
        return self

    def step(self) -> None:
        """One step: act on the chain's current round (:meth:`NodeRuntime.step`)."""
        self.runtime.step(self.act)

    def run(self, stop: threading.Event | None = None) -> None:
        """Step until ``stop`` is set (or :meth:`done`); errors are retried with backoff."""
        self.runtime.run(self.step, stop, self.done)

    def stop(self) -> None:
        """Stop serving."""
        self.runtime.stop()
