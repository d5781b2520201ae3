"""The validator node: watch the chain, verify every committed update, score, settle, merge, certify.

Per round r (see ``protocol.rounds.coordinator`` for the phases):

- COMMIT: commit a seed share (its secret stored first);
- REVEAL: reveal the share; fetch every committed update (cheap checks need no seed);
- SCORE_COMMIT: the seed is fixed; run every check (``validator.pipeline``), store each verdict, then
  store the score vector and salt and commit it; propose/vote slashing on provable failures;
- SCORE_REVEAL: reveal exactly what was committed (checked against the chain first);
- FINALIZE: settle the round on-chain (any validator may; a race is harmless);
- after settlement: merge the updates with positive consensus score (``training.merge``), store and
  announce theta_{r+1}, sign its digest and collect the other validators' signatures over HTTP; with a
  quorum, certify it on-chain.

Every step is idempotent and written to :class:`validator.state.ValidatorState`, so a restart at any point
resumes without revealing twice or losing a verdict.

This module is the phase machine. It is given its services (:class:`ValidatorServices`, built by
:func:`compose` over one ``validator.connections.Connections``) and holds them, it does not inherit
them: ``intake`` (``validator.intake``: fetching and holding updates), ``pipeline``
(``validator.pipeline``: one update in, its verdict out), ``slashing`` (``validator.slashing``: proposals
and peers' evidence), ``checkpoints`` (``validator.checkpoints``: theta_r, the merge, signatures and the
certificate), ``api`` (``validator.api``: HTTP routes) and the runtime (``protocol.node.start``: start,
run, stop).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from protocol.node.rolenode import RoleNode
from protocol.node.roundreport import ValidatorRoundFigures
from protocol.node.traffic import TrafficLedger
from protocol.p2p.discovery import Discovery
from protocol.rounds.consensus import SCORE_MAX
from protocol.rounds.coordinator import Coordinator, CoordinatorError, RoundState
from protocol.rounds.phases import Phase
from protocol.runspec import COMPUTE_LOCK, RunSpec
from validator.api import ValidatorApi
from validator.audits import round_audits
from validator.checkpoints import Checkpoints
from validator.config import ValidatorConfig
from validator.connections import Connections, Theta
from validator.context import CheckEvidence, RoundContext, Verdict
from validator.intake import Intake
from validator.pipeline import VerificationPipeline
from validator.schedule import RETRY_MARGIN_BLOCKS, STEP_SLICE_S, VerifyScheduler
from validator.slashing import Slashing
from validator.stages import UNVERIFIED_STAGES, Stage
from validator.state import ValidatorState
from validator.usefulness import heldout_loss

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ValidatorServices:
    """The services a validator's phase machine is given."""

    conn: Connections
    """Configuration and connections, shared read-only (the runtime among them)."""
    intake: Intake
    """Fetching and holding updates; the fetchers a verification reads through."""
    pipeline: VerificationPipeline
    """One update in, its verdict out."""
    slashing: Slashing
    """Proposals, and the re-check of peers' evidence."""
    checkpoints: Checkpoints
    """theta_r, the merge, signatures and the certificate."""
    api: ValidatorApi
    """The validator's HTTP routes and its ``/status`` document."""


def compose(
    cfg: ValidatorConfig,
    spec: RunSpec,
    coord: Coordinator,
    discovery: Discovery,
    *,
    check_evidence: CheckEvidence | None = None,
    traffic: TrafficLedger | None = None,
    checkpoints: type[Checkpoints] = Checkpoints,
) -> ValidatorServices:
    """A validator's services over one set of connections (``checkpoints``: the checkpoints service's
    class, which a test harness may replace)."""
    conn = Connections.create(cfg, spec, coord, discovery, traffic)
    intake = Intake(conn)
    pipeline = VerificationPipeline(cfg.verify, check_evidence)
    ckpts = checkpoints(conn, intake)
    slashing = Slashing(conn, intake, pipeline)
    return ValidatorServices(conn, intake, pipeline, slashing, ckpts, ValidatorApi(conn, intake, ckpts))


class ValidatorNode(RoleNode[ValidatorConfig, ValidatorState]):
    """A validator: one process, one key, one run; this class is its phase machine (``act``) over the
    services it is given (:func:`compose` builds the honest ones); what callers read of it, ``start``,
    ``run`` and ``stop`` are ``protocol.node.rolenode.RoleNode``'s, over its runtime."""

    conn: Connections

    def __init__(
        self,
        cfg: ValidatorConfig,
        spec: RunSpec,
        coord: Coordinator,
        discovery: Discovery,
        private_key: str,
        *,
        check_evidence: CheckEvidence | None = None,
        entropy: Callable[[str, int], bytes] | None = None,
        traffic: TrafficLedger | None = None,
        services: ValidatorServices | None = None,
    ) -> None:
        # the key signs through ``coord``; it is taken here so that every node is built the same way
        del private_key
        self.services = services or compose(
            cfg, spec, coord, discovery, check_evidence=check_evidence, traffic=traffic
        )
        s = self.services
        super().__init__(s.conn)
        self.intake, self.pipeline = s.intake, s.pipeline
        self.slashing, self.checkpoints, self.api = s.slashing, s.checkpoints, s.api
        # 32 fresh bytes per (purpose, round): seed-share secrets and score salts. A test harness may pass a
        # deterministic source so that runs it compares share their round seeds; a node never does.
        self._entropy = entropy or (lambda purpose, round: os.urandom(32))
        self._last_phase: tuple[int, int] = (0, -1)
        self.scheduler = VerifyScheduler(s.conn, s.intake, s.pipeline)
        """Runs each round's verification against the score-commit deadline."""
        self._last_state: RoundState | None = None
        """The round state :meth:`act` last acted on (what :meth:`step` verifies from while the chain is
        not readable)."""
        self._verifying: tuple[int, RoundContext, float] | None = None
        """The round being verified, its context (audit draws read once) and when its verification began."""

    # -- the role's parts of the runtime ---------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The /status document."""
        return self.api.status()

    def add_routes(self, app: Any) -> None:
        """The validator's routes (``validator.api.ValidatorApi``)."""
        self.api.add_routes(app)

    def report_settled(self) -> None:
        """The round line (``protocol.node.roundreport``) of each round whose settlement ``checkpoints``
        recorded since the last call: committed miners verified (a verdict at a stage that decided) and
        accepted, scores revealed or not, its reward."""
        for r, settlement in self.checkpoints.take_settled():
            rec = self.state.round(r)
            verdicts = rec.verdicts or {}
            decided = [v for v in verdicts.values() if v.stage and v.stage not in UNVERIFIED_STAGES]
            figures = ValidatorRoundFigures.settled(
                r,
                settlement,
                self.address,
                verified=len(decided),
                miners=len(rec.miners) if rec.miners is not None else len(verdicts),
                accepted=sum(1 for v in decided if v.accepted),
                scores_revealed=bool(rec.score_revealed),
            )
            self.metrics.round_report.emit(figures)

    # -- loop ------------------------------------------------------------------------------------------

    def step(self) -> None:
        """One step (``RoleNode.step``); while the chain cannot be read, a round whose verification has
        begun goes on from the last reading: updates and states come over HTTP and the score-commit point
        is kept by the clock (``VerifyScheduler``), so only chain writes wait for the RPC (a
        45-s RPC cut in the score-commit window made a commit one block late)."""
        try:
            super().step()
        except CoordinatorError as exc:
            if not self._verify_offline():
                raise
            log.info("chain not readable (%s); verification goes on, chain writes wait", exc)

    def _verify_offline(self) -> bool:
        """Go on verifying the round in SCORE_COMMIT that :meth:`act` last saw; False when there is none."""
        st, v = self._last_state, self._verifying
        if st is None or v is None or st.phase != Phase.SCORE_COMMIT or st.round != v[0]:
            return False
        theta = self.checkpoints.theta
        if theta is None or st.checkpoint is None or theta.digest != "0x" + st.checkpoint.hex():
            return False
        self.phase = "verify (chain not readable: verifying; chain writes wait)"
        self._verify_all(st, theta)
        return True

    def act(self, st: RoundState) -> None:
        """Take whatever action the chain's current state calls for."""
        self._last_state = st
        r = st.round
        self.scheduler.blocks.observe(st.block)
        self.api.key_use.check(r)  # a second validator on this key stops here
        self.intake.new_round(r)
        if r > 1:
            try:
                self.checkpoints.settle_previous(r - 1)
            finally:
                self.report_settled()
        if st.checkpoint is None:
            self.phase = "waiting-certificate"
            return
        theta = self.checkpoints.ensure_theta(r, st.checkpoint)
        key = (r, int(st.phase))
        if key != self._last_phase:
            until = "no deadline" if st.phase == Phase.FINALIZE else f"deadline {st.deadline}"
            log.info("round %d: phase %s (block %d, %s)", r, st.phase.name, st.block, until)
            self._last_phase = key
        if st.block > st.deadline and st.phase != Phase.FINALIZE:
            self.phase = f"{st.phase.name.lower()} closed"
        elif st.phase == Phase.COMMIT:
            self.phase = "commit"
            self._seed_commit(r)
        elif st.phase == Phase.REVEAL:
            self.phase = "reveal"
            self._seed_reveal(r)
            self.intake.prefetch(r)
        elif st.phase == Phase.SCORE_COMMIT:
            self.phase = "verify"
            # a reading the verification's own schedule just took will do (a read every step)
            late = (
                self.coord.current(max_age=self.cfg.poll_interval / 2).block
                >= st.deadline - RETRY_MARGIN_BLOCKS
            )
            complete = self._verify_all(st, theta, until_done=late) is not False
            if (complete and not self.intake.cache.pending) or late:
                # near the deadline, commit what was verified (the rest scores 0) rather than miss the phase
                self._commit_scores(r)
        elif st.phase == Phase.SCORE_REVEAL:
            self.phase = "score-reveal"
            self._reveal_scores(r)
            self.slashing.recheck_peer_slashes(st, theta)
        elif st.phase == Phase.FINALIZE:
            self.phase = "finalize"
            self.slashing.recheck_peer_slashes(st, theta)
            try:
                self.coord.finalize(r)
            except CoordinatorError as exc:
                if self.coord.current().round == r:
                    raise
                log.info("round %d was finalized by another validator first", r)
                log.debug("round %d: our finalize reverted: %s", r, exc)

    # -- seed ------------------------------------------------------------------------------------------
    def _seed_commit(self, round: int) -> None:
        committed, _ = self.coord.seed_share_status(round)
        if committed:
            return
        rec = self.state.round(round)
        if rec.seed_secret is None:
            with self.state.edit(round) as rec:
                rec.seed_secret = self._entropy("seed", round).hex()
        self.coord.commit_seed(round, bytes.fromhex(rec.seed_secret))

    def _seed_reveal(self, round: int) -> None:
        committed, revealed = self.coord.seed_share_status(round)
        secret = self.state.round(round).seed_secret
        if committed and not revealed and secret:
            self.coord.reveal_seed(round, bytes.fromhex(secret))

    # -- verification ----------------------------------------------------------------------------------

    def _verify_all(self, st: RoundState, theta: Theta, until_done: bool = False) -> bool | None:
        """Verify every committed update not judged yet, on the deadline's schedule
        (``validator.schedule.VerifyScheduler``): until each has a final verdict or the score-commit
        point has come, the unfinished then recorded as unverified. One call verifies for at
        most ``STEP_SLICE_S`` (``until_done``: to the end) and returns False while work is left; None,
        from subclasses that do not say, counts as complete."""
        r = st.round
        if self.state.round(r).scores is not None:
            return True
        if st.seed is None:
            log.warning("round %d: in SCORE_COMMIT without a seed", r)
            return False
        if self._verifying is None or self._verifying[0] != r:
            ctx = self.conn.round_context(st, theta)
            round_audits(self.coord, ctx, list(self.coord.update_commitments(r)))  # whom it audits
            self._verifying = (r, ctx, time.perf_counter())
        _, ctx, t0 = self._verifying

        def record(miner: str, v: Verdict) -> None:
            self._record_verdict(r, miner, v)

        if not self.scheduler.run(st, ctx, record, slice_s=None if until_done else STEP_SLICE_S):
            return False
        with COMPUTE_LOCK:
            before = heldout_loss(self.conn.spec, self.conn.dataset, theta.params, device=self.cfg.device)
        with self.state.edit(r) as rec:
            rec.verify_seconds = round(time.perf_counter() - t0, 4)
            rec.heldout_before = round(before, 6)
        return True

    def _record_verdict(self, round: int, miner: str, verdict: Verdict) -> None:
        """Persist a final verdict, keep the update whose bytes matched, and slash what is provable."""
        if verdict.digest and Stage(verdict.stage).bytes_matched:
            # keep every update whose bytes matched the commitment, accepted or not: the consensus may
            # accept what this validator refused, and the merge must follow the consensus (F11)
            self.intake.keep_verified(round, miner)
        self.state.put_verdict(round, miner, verdict)
        self.metrics.verifications.labels(outcome=verdict.stage).inc()
        log.info(
            "round %d: %s -> %s (%s) score %d",
            round,
            miner[:10],
            verdict.stage,
            verdict.reason,
            verdict.score,
        )
        if self.cfg.slash:  # a fraud proof, or an audit left unanswered
            self.slashing.slash(verdict)

    def _round_scores(self, round: int, miners: list[str]) -> list[int]:
        """The score vector to commit for ``miners`` (ascending address order): each one's verdict's score,
        at most ``SCORE_MAX``, 0 where this validator has no verdict."""
        scores = []
        for m in miners:
            v = self.state.verdict(round, m)
            scores.append(min(SCORE_MAX, v.score) if v else 0)
        return scores

    def _commit_scores(self, round: int) -> None:
        committed, _ = self.coord.score_status(round)
        if committed:
            return
        rec = self.state.round(round)
        if rec.scores is None or rec.salt is None:
            miners = sorted(self.coord.update_commitments(round), key=lambda a: int(a, 16))
            scores = self._round_scores(round, miners)
            with self.state.edit(round) as rec:
                rec.miners, rec.scores, rec.salt = miners, scores, self._entropy("salt", round).hex()
        self.coord.commit_scores(round, rec.scores, bytes.fromhex(rec.salt))
        with self.state.edit(round) as rec:
            rec.score_committed = True

    def _reveal_scores(self, round: int) -> None:
        committed, revealed = self.coord.score_status(round)
        rec = self.state.round(round)
        if revealed or not committed or rec.scores is None or rec.salt is None:
            if revealed and not rec.score_revealed:
                with self.state.edit(round) as rec:
                    rec.score_revealed = True
            return
        self.coord.reveal_scores(round, rec.scores, bytes.fromhex(rec.salt))
        with self.state.edit(round) as rec:
            rec.score_revealed = True
