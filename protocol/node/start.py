"""How a node process starts and stops serving, the same for both roles: :class:`NodeRuntime`, a component
``miner.node.MinerNode`` and ``validator.node.ValidatorNode`` hold (not a base class they inherit).

Start: torch's threads and deterministic settings for the node's device (``training.device``) and a
warm-up; the common HTTP API (``protocol.node.api``) with the role's own routes and the signed node
records (``protocol.p2p.recordbook``); the server; registration on chain with the role's stake, if the key is
not registered yet. Run: the node's ``step`` every ``poll_interval`` until a signal, its role's errors
retried with backoff (``protocol.node.loop``); a step (:meth:`NodeRuntime.step`) reads the chain's current
round, hands it to the role's action and advances a phase whose deadline passed. Stop: the server.
:meth:`NodeRuntime.create` builds a role's runtime, the same for both (``protocol.node.connections``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from fastapi import FastAPI

from protocol.errors import ProtocolError
from protocol.node.account import KeyInUseError
from protocol.node.api import NodeMetrics, NodeServer, create_node_app
from protocol.node.loop import PollPacer, StepLoop, failure_reporter, recovery_reporter
from protocol.node.settings import NodeConfig
from protocol.node.traffic import TrafficLedger
from protocol.p2p.blobs import BlobStore
from protocol.p2p.discovery import Discovery
from protocol.p2p.recordbook import mount_record_routes
from protocol.rounds.coordinator import Coordinator, CoordinatorError, RoundState
from protocol.rounds.phases import Phase
from protocol.runspec import compute_platform, warm_up_torch
from training.device import use_deterministic

log = logging.getLogger(__name__)


MINER_ADVANCE_LAG_BLOCKS = 2
"""Blocks a miner leaves the validators to advance a phase whose deadline passed before it does."""


@dataclass
class NodeRuntime:
    """``start``, ``run`` and ``stop`` of one node process, and what ``/status`` shows of its progress
    (``phase``, ``last_error``, ``url``). The node gives it its role's parts: the ``/status`` document, its
    own routes and blobs to ``start``, its ``step`` to ``run``."""

    role: str
    """``miner`` or ``validator``: the API's role and the role registered on chain."""
    cfg: NodeConfig
    """The node's settings (host, port, threads, device, stake, poll interval)."""
    coord: Coordinator
    """The chain's round view (registration, phase advances)."""
    discovery: Discovery
    """Signed node records (mounted on the API)."""
    public: BlobStore
    """The blobs the node serves."""
    metrics: NodeMetrics
    """The node's Prometheus metrics."""
    traffic: TrafficLedger = field(default_factory=TrafficLedger)
    """What the node sent and received, by peer and kind."""
    node_log: logging.Logger = log
    """Where ``run`` reports failures and recoveries (the role's module logger)."""
    retried: tuple[type[Exception], ...] = ()
    """The role's own errors that ``run`` retries (besides :class:`ProtocolError`)."""
    server: NodeServer | None = None
    """The HTTP server once started."""
    url: str = ""
    """The node's public URL once started."""
    phase: str = "starting"
    """What the node is doing (``/status``)."""
    last_error: str = ""
    """The last step's error, cleared when a step succeeds again (``/status``)."""

    @classmethod
    def create(
        cls,
        role: str,
        cfg: NodeConfig,
        coord: Coordinator,
        discovery: Discovery,
        public: BlobStore,
        *,
        traffic: TrafficLedger | None = None,
        retried: tuple[type[Exception], ...] = (),
    ) -> NodeRuntime:
        """A ``role`` node's runtime with fresh metrics (``NodeMetrics.create(role)``), reporting to the
        role's node logger (``{role}.node``) and retrying ``retried`` besides :class:`ProtocolError`."""
        return cls(
            role=role,
            cfg=cfg,
            coord=coord,
            discovery=discovery,
            public=public,
            metrics=NodeMetrics.create(role),
            traffic=traffic or TrafficLedger(),
            node_log=logging.getLogger(f"{role}.node"),
            retried=retried,
        )

    def start(
        self,
        status: Callable[[], dict[str, Any]],
        add_routes: Callable[[FastAPI], None],
        fallback: Callable[[str], bytes | None] | None = None,
    ) -> None:
        """Start the HTTP API (the common routes, ``add_routes``', the signed records) and register
        on-chain if needed; ``fallback`` produces blobs not in ``public`` on demand."""
        torch.set_num_threads(max(1, self.cfg.threads))
        use_deterministic(self.cfg.device)
        log.info("torch warm-up took %.2fs (%s)", warm_up_torch(), compute_platform())
        app = create_node_app(
            role=self.role,
            status=status,
            store=self.public,
            metrics=self.metrics,
            fallback=fallback,
            traffic=self.traffic,
        )
        add_routes(app)
        mount_record_routes(app, self.discovery.book)  # signed records over HTTP
        self.server = NodeServer(app, self.cfg.host, self.cfg.port).start()
        self.url = self.cfg.public_url or self.server.url
        if self.coord.ensure_registered(self.role, self.cfg.stake):
            log.info("registered %s as a %s with stake %d", self.coord.address, self.role, self.cfg.stake)
        self.phase = "ready"

    def step(self, act: Callable[[RoundState], None]) -> None:
        """One step of the node's loop: read the chain's current round, show it (the ``round`` metric,
        the traffic ledger's round), ``act`` on it, then advance a phase whose deadline has passed."""
        st = self.coord.current()
        self.metrics.round.set(st.round)
        self.traffic.round = st.round
        act(st)
        self.maybe_advance(st)

    @property
    def advance_lag(self) -> int:
        """Blocks past a phase's deadline before this node advances it: a validator at once, a miner
        :data:`MINER_ADVANCE_LAG_BLOCKS` later, only if no validator has (every node racing to
        advance every phase was a fifth of a miner's requests: the estimate, the refused transaction's
        reason, the receipts)."""
        return 0 if self.role == "validator" else MINER_ADVANCE_LAG_BLOCKS

    def maybe_advance(self, st: RoundState) -> None:
        """Advance a phase whose deadline has passed by :attr:`advance_lag` blocks (any node may; one that
        loses the race to another is refused, which is fine)."""
        if st.phase != Phase.FINALIZE and st.block > st.deadline + self.advance_lag:
            try:
                self.coord.advance()
            except CoordinatorError:
                pass

    def run(
        self,
        step: Callable[[], None],
        stop: threading.Event | None = None,
        done: Callable[[], bool] | None = None,
    ) -> None:
        """Call ``step`` until ``stop`` is set (or ``done()``), waiting what :meth:`pace` says between
        steps; errors are retried with backoff, except :class:`KeyInUseError` (another node holds this
        key), which ends the run with that one error."""
        StepLoop(
            interval=self.cfg.poll_interval,
            retry_on=(ProtocolError, *self.retried),
            on_error=failure_reporter(self, self.role, self.node_log),
            on_recovery=recovery_reporter(self, self.role, self.node_log),
            done=done,
            fatal=(KeyInUseError,),
            pace=self.pace(),
        ).run(step, stop or threading.Event())

    def pace(self) -> Callable[[], float]:
        """The wait after each step (:class:`protocol.node.loop.PollPacer`: longer while nothing changes),
        from the reading the step made (no extra request)."""
        pacer = PollPacer(self.cfg.poll_interval)

        def wait() -> float:
            st = self.coord.current(max_age=float("inf"))
            return pacer.next(st.round, int(st.phase), st.block, st.deadline + self.advance_lag, self.phase)

        return wait

    def stop(self) -> None:
        """Stop serving."""
        if self.server is not None:
            self.server.stop()
