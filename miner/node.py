"""The miner node: join, then every round fetch, train, package, commit, serve, and collect rewards.

The node is a loop over :meth:`MinerNode.step`, which looks at the chain and takes the next action that
is due. Every action is idempotent and recorded in :class:`miner.state.MinerState` before or after the
transaction as described there, so killing the process at any point and starting it again resumes the
round (or joins the next one) without committing twice or losing error feedback.

It is given its services (:class:`MinerServices`, built by :func:`compose` over one
``miner.connections.MinerConnections``) and holds them, it does not inherit them: ``committer``
(``miner.commit``: train, record, commit), ``publisher`` (``miner.publish``: serve the round's update,
transcript and error feedback), ``rewards`` (``miner.rewards``: rewards and the account) and ``reports``
(``miner.reports``: expire the contested unanswered-audit reports that hold its pay); start, run and
stop are its runtime's (``protocol.node.start.NodeRuntime``), as for the validator; what callers read of it
and the loop around ``act`` are ``protocol.node.rolenode.RoleNode``'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Self

from attestation import report_data
from attestation.simulated import SimulatedEnclave
from miner.behaviour import Behaviour, make_behaviour
from miner.checkpoints import CheckpointSource
from miner.commit import Committer
from miner.config import MinerConfig
from miner.connections import EvidenceFn, MinerConnections, RoundMaterial
from miner.linkcheck import check_link
from miner.livepage import mount_live_page
from miner.publish import Publisher
from miner.reports import OwnReports
from miner.rewards import Rewards
from miner.state import COMMITTED, PREPARED, SERVED, MinerState
from protocol.node.rolenode import RoleNode
from protocol.node.roundreport import MinerRoundFigures
from protocol.node.statusdoc import MinerStatus, NodeStatus
from protocol.node.traffic import TrafficLedger
from protocol.p2p.discovery import Discovery
from protocol.rounds.coordinator import Coordinator, RoundState
from protocol.rounds.phases import Phase
from protocol.runspec import RunSpec

log = logging.getLogger(__name__)


def simulated_evidence(chain_id: int, seed: bytes) -> EvidenceFn:
    """Evidence from the development TDX enclave of ``attestation.simulated`` (devnet only; ``seed`` is
    the run's fresh development root, never a public constant)."""
    enclave = SimulatedEnclave.from_seed(seed)

    def make(round: int, miner: str, digest: bytes) -> bytes:
        return enclave.quote(report_data(chain_id, round, miner, digest))

    return make


@dataclass(frozen=True)
class MinerServices:
    """The services a miner's phase machine is given."""

    conn: MinerConnections
    """Configuration and connections, shared read-only (the runtime among them)."""
    material: RoundMaterial
    """The current round's material: made by ``committer``, served by ``publisher``."""
    committer: Committer
    """Train, record and commit the round's update."""
    publisher: Publisher
    """Serve what the round's validators fetch."""
    rewards: Rewards
    """Record rewards and watch the account."""
    reports: OwnReports
    """Close this miner's contested unanswered-audit reports."""


def compose(
    cfg: MinerConfig,
    spec: RunSpec,
    coord: Coordinator,
    discovery: Discovery,
    *,
    behaviour: Behaviour | None = None,
    evidence_fn: EvidenceFn | None = None,
    traffic: TrafficLedger | None = None,
) -> MinerServices:
    """A miner's services over one set of connections (``behaviour``: ``cfg.behaviour``'s by default)."""
    conn = MinerConnections.create(
        cfg, spec, coord, discovery, behaviour or make_behaviour(cfg.behaviour), traffic
    )
    material = RoundMaterial(conn.checkpoints)
    return MinerServices(
        conn,
        material,
        Committer(conn, material),
        Publisher(conn, material, evidence_fn),
        Rewards(conn),
        OwnReports(conn),
    )


class MinerNode(RoleNode[MinerConfig, MinerState]):
    """A miner: one process, one key, one run; this class is its phase machine (``act``) over the
    services it is given (:func:`compose` builds them); what callers read of it, ``start``, ``run`` and
    ``stop`` are ``protocol.node.rolenode.RoleNode``'s, over its runtime."""

    conn: MinerConnections

    def __init__(
        self,
        cfg: MinerConfig,
        spec: RunSpec,
        coord: Coordinator,
        discovery: Discovery,
        *,
        behaviour: Behaviour | None = None,
        evidence_fn: EvidenceFn | None = None,
        traffic: TrafficLedger | None = None,
        services: MinerServices | None = None,
    ) -> None:
        self.services = services or compose(
            cfg, spec, coord, discovery, behaviour=behaviour, evidence_fn=evidence_fn, traffic=traffic
        )
        s = self.services
        super().__init__(s.conn)
        self.committer, self.publisher, self.rewards, self.reports = (
            s.committer,
            s.publisher,
            s.rewards,
            s.reports,
        )

    def start(self) -> Self:
        """Check the upload link against what an audit needs (``miner.linkcheck``: a link too slow for a key
        not registered yet raises ``LinkTooSlowError`` before anything is staked), then start serving and
        register (``RoleNode.start``)."""
        check_link(self.cfg, self.conn.spec, self.coord, self.discovery, self.address)
        return super().start()

    # -- what callers read (besides RoleNode's) --------------------------------------------------------

    @property
    def behaviour(self) -> Behaviour:
        """How this miner trains and serves."""
        return self.conn.behaviour

    @property
    def checkpoints(self) -> CheckpointSource:
        """Where theta_r comes from."""
        return self.conn.checkpoints

    @property
    def rounds_done(self) -> int:
        """Rounds settled with a reward recorded."""
        return self.rewards.rounds_done

    # -- the role's parts of the runtime ---------------------------------------------------------------

    @property
    def blob_fallback(self) -> Callable[[str], bytes | None]:
        """Transcript states, made on demand (``Publisher.serve_transcript_state``)."""
        return self.publisher.serve_transcript_state

    def add_routes(self, app: Any) -> None:
        """``/rounds`` and the live page."""

        @app.get("/rounds", summary="This miner's round records")
        def rounds() -> dict[str, Any]:
            return {str(r): rec for r, rec in self._rounds_json().items()}

        mount_live_page(app, self.status, self._rounds_json)  # GET /

    def _rounds_json(self) -> dict[int, dict[str, Any]]:
        """The round records as ``state.json`` holds them, by round (``/rounds``, the live page)."""
        return {r: rec.to_json() for r, rec in self.state.rounds().items()}

    def status(self) -> dict[str, Any]:
        """The /status document (``protocol.node.statusdoc``)."""
        recs = self.state.rounds()
        last = max(recs) if recs else None
        acc = self.rewards.account
        part = MinerStatus(
            behaviour=self.behaviour.name,
            rounds_done=self.rounds_done,
            last_round=recs[last].to_json() if last is not None else None,
            unanswered_reports=OwnReports.to_json(recs),
        )
        return NodeStatus.read(
            self.conn,
            round=self.services.material.live.round,
            account=acc.to_json() if acc is not None else None,
            key_in_use=acc.conflict if acc is not None else "",
            part=part,
        ).to_json()

    def settle(self, current_round: int) -> None:
        """Record each settled round's reward and watch the account (``rewards``), then log the line of
        each round settled since (:meth:`report_settled`), also when the account check raised."""
        try:
            self.rewards.collect(current_round)
        finally:
            self.report_settled()

    def report_settled(self) -> None:
        """The round line (``protocol.node.roundreport``) of each round whose reward ``rewards`` recorded
        since the last call: committed or not, the bytes served that round, consensus and reward."""
        for r, settlement in self.rewards.take_settled():
            rec = self.state.record(r)
            status = rec.status if rec is not None else ""
            figures = MinerRoundFigures.settled(
                r,
                settlement,
                self.address,
                status=status,
                committed=status in (COMMITTED, SERVED),
                served_bytes=self.traffic.sent_bytes(r),
            )
            self.metrics.round_report.emit(figures)

    # -- the loop --------------------------------------------------------------------------------------
    def done(self) -> bool:
        """``max_rounds`` rounds are done (0: never)."""
        return bool(self.cfg.max_rounds) and self.rounds_done >= self.cfg.max_rounds

    def act(self, st: RoundState) -> None:
        """Take whatever action the chain's current state calls for."""
        self._act(st)
        self.publisher.synced = True

    def _act(self, st: RoundState) -> None:
        self.settle(st.round)
        self.reports.close(st.round, self.rewards.rounds_done)  # contested reports on this miner
        rec = self.state.record(st.round)
        if st.phase == Phase.COMMIT and st.block <= st.deadline:
            if rec is None:
                if st.checkpoint is None:
                    if not self.committer.work_ahead(st):
                        self.runtime.phase = "waiting-checkpoint"
                    return
                self.committer.work(st)
            elif rec.status == PREPARED:
                self.committer.reconcile(st, rec)
            elif rec.status in (COMMITTED, SERVED) and rec.update_digest is not None:
                digest = bytes.fromhex(rec.update_digest)
                if not self.conn.chain_has_commit(st.round, digest):
                    # the chain lost the commitment (restarted from an older state): send it again
                    log.warning(
                        "round %d: commitment missing on-chain (chain rolled back); re-sending", st.round
                    )
                    self.committer.commit(st.round, digest)
        else:
            if rec is not None and rec.status == PREPARED:
                self.committer.reconcile(st, rec)
                rec = self.state.record(st.round)
            if rec is not None and rec.status == COMMITTED:
                self.publisher.serve(st)
            elif rec is not None and rec.status == SERVED:
                self.publisher.ensure_live(st.round)
                if st.round not in self.publisher.announced:
                    # served before a restart: the old record may name a dead URL, so the
                    # update, its evidence and this process's URL are published again
                    self.publisher.publish(st.round, self.state.record(st.round) or rec)
                    log.info("round %d: serving again after a restart at %s", st.round, self.url)
                self.runtime.phase = "serving"
            else:
                self.runtime.phase = "idle (not committed this round)"
