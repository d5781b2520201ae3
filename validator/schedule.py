"""Verification scheduled against the score-commit deadline (docs/decisions/deadline-scheduling.md).

:class:`VerifyScheduler` is the validator's service that runs a round's verification;
``validator.roundschedule.RoundSchedule`` (pure, on an injected clock) decides *when* and *for how long*
each miner of a round is verified, never *what* is checked (that is ``validator.pipeline``'s plan):

- the order is drawn from the round's seed (``roundschedule.seeded_order``), not the addresses, so a key ground to a
  low address buys no place in the queue;
- up to ``workers`` miners are verified at once (their fetches overlap; the pipeline serializes the compute
  under ``COMPUTE_LOCK``), so one miner's I/O wait holds up nobody else's checks;
- each miner gets a budget when it starts: its share of the time left to the commit point,
  ``left / ceil(unfinished / workers)`` (what a fast miner leaves goes to the later ones), and every fetch
  it makes is bounded by what is left of it (:meth:`Slot.remaining`);
- the miners this validator audits go first, each with at least the serving window plus
  :data:`AUDIT_CHECK_S` while the commit point allows: a fetch cut short of the serving window is the
  member's own fault and goes unreported, so a budget shared down below that window let a miner that
  hangs when audited escape every report (a devnet on 2 cores: 26 s to the commit point in 2 waves gave
  12.5 s, every hang unreported). Deployments size the score-commit window to hold it
  (``tessera.devnet.sizing``);
- at the commit point the node commits with what is finished; the unfinished are scored as unverified;
- an audit the miner left unanswered in any try stays unanswered: a later try that fails too,
  on another way of not serving (a miner the transfer layer now skips as stalling, the update no longer
  served), never turns it into a verdict that cannot be reported, and the update that matched its
  commitment is kept for the retry. Only a try in which the miner answers (served and checked, or proven
  fake) replaces it. A fetch the member cut short of the serving window, or a link that reached nobody,
  is the member's own fault and is not reported (``validator.audits.own_fault``).

The clock is injected (``time.monotonic`` by default) and :class:`BlockClock` turns the chain's blocks into
that clock's seconds from the node's own readings, so nothing here reads the chain: a validator whose RPC
is down keeps its schedule.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from protocol.errors import ProtocolError
from protocol.rounds.coordinator import RoundState
from validator.audits import ServeWatch, answered, mark_audit, own_fault, unanswered
from validator.blockclock import BlockClock
from validator.connections import Connections
from validator.context import AuditRole, Incoming, RoundContext, Verdict
from validator.intake import Intake
from validator.pipeline import VerificationPipeline
from validator.roundschedule import AUDIT_CHECK_S, RoundSchedule, Slot
from validator.stages import Stage

log = logging.getLogger(__name__)


VERIFY_WORKERS = 4
"""Miners verified at once: their fetches overlap, their compute takes turns under ``COMPUTE_LOCK``."""
RETRY_MARGIN_BLOCKS = 4
"""Blocks before the SCORE_COMMIT deadline kept free of verification: the commit point."""
STEP_SLICE_S = 2.0
"""Seconds one node step spends in :meth:`VerifyScheduler.run` before it hands the loop back (the workers go
on verifying meanwhile): the node's other duties (the key-use check, metrics, a stop signal) and, in the
attack harness, every other in-process node's step wait no longer than this. A step that held the whole
phase kept a restarted miner from announcing its new URL until the validators had given up on it."""
OBSERVE_SHARE = 8
"""The chain's block is read again once the last reading is this share of the time left to the commit point
old (a read every 0.5 s of verification was most of a validator's requests in a long phase; the
estimate between readings comes from the block time, so a few readings a phase keep it)."""
OBSERVE_MAX_AGE_S = 30.0
"""Seconds: the oldest reading the commit point's estimate is kept on."""


Record = Callable[[str, Verdict], None]
"""Persists a miner's final verdict (the node's, in its main thread)."""


class VerifyScheduler:
    """Runs a round's verification on its :class:`RoundSchedule`: miners in the seed's order, up to
    :data:`VERIFY_WORKERS` at once in worker threads, each within its budget, until every one has a final
    verdict or the commit point has come. Verdicts are handed to ``record`` in the caller's thread only.

    Whose fault: a verdict is final when the miner caused it; an ``error`` (an exception
    no check anticipated: the validator's RPC or its peers) is retried within the phase, as is a miner that
    could not be reached while its budget and withholding grace last; at the commit point whatever is left
    is recorded as ``budget`` (unverified, scored 0, unprovable)."""

    def __init__(
        self, conn: Connections, intake: Intake, pipeline: VerificationPipeline, workers: int = VERIFY_WORKERS
    ) -> None:
        self.conn, self.intake, self.pipeline = conn, intake, pipeline
        self.workers = workers
        self.blocks = BlockClock()
        """Seconds per block and when a block is due, from the node's readings (fed by its steps)."""
        self.schedule: RoundSchedule | None = None
        """The current round's schedule (None before the first SCORE_COMMIT step)."""
        self._commits: dict[str, bytes] = {}
        self._observed = -math.inf
        """When (``time.monotonic``) :meth:`_observe` last read the chain."""
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="verify")

    def run(self, st: RoundState, ctx: RoundContext, record: Record, slice_s: float | None = None) -> bool:
        """Verify every committed update of ``st.round`` that has no verdict yet (see the class doc); True
        once each has a final verdict or the commit point has come, False when ``slice_s`` seconds passed
        first (call again: the schedule and its running workers carry over)."""
        sched = self._schedule(st, ctx)
        ends = math.inf if slice_s is None else sched.clock() + slice_s
        while True:
            self._collect(sched, ctx, record)
            while (slot := sched.start_next()) is not None:
                inc = self.intake.incoming(
                    sched.round, slot.miner, self._commits.get(slot.miner), len(ctx.registry),
                    slot.out_of_time, slot.remaining,
                )  # fmt: skip
                if isinstance(inc, Incoming):
                    slot.watch = ServeWatch(slot.remaining)
                    inc = slot.watch.wrap(inc)
                slot.work = self._pool.submit(self.pipeline.verify, inc, ctx)
            if sched.complete() or sched.due():
                break
            if sched.clock() >= ends:
                return False
            if sched.running:
                wait([s.work for s in sched.running.values()], timeout=0.5, return_when=FIRST_COMPLETED)
            else:  # every miner left waits for its next try
                time.sleep(0.5)
            self._observe(sched.time_left())
        for miner in sched.left_over():
            sched.finish(miner)
            log.warning(
                "round %d: %s not verified by the score-commit point; scored 0", sched.round, miner[:10]
            )
            reason = "not verified by the score-commit point (scored 0, unprovable)"
            v = Verdict(miner=miner, round=sched.round, accepted=False, stage=Stage.BUDGET, reason=reason)
            v.metrics["budget_s"] = sched.budgets.get(miner, 0.0)
            record(miner, self._final(sched, miner, v))
        return True

    @staticmethod
    def _final(sched: RoundSchedule, miner: str, v: Verdict) -> Verdict:
        """The verdict to record for ``miner`` whose last try ended in ``v``: the first try that left the
         audit unanswered (the furthest the miner let it get), unless the miner answered in ``v``
        ."""
        kept = sched.unanswered.get(miner)
        if kept is None or kept is v or answered(v):
            return v
        kept.metrics.update(v.metrics)
        kept.evidence["tries"] = sched.tries.get(miner, 1)
        kept.evidence["last_try"] = f"{v.stage}: {v.reason}"
        log.info(
            "round %d: %s's audit stays unanswered (last try: %s: %s)",
            sched.round,
            miner[:10],
            v.stage,
            v.reason,
        )
        return kept

    def _judge(self, sched: RoundSchedule, ctx: RoundContext, slot: Slot, v: Verdict) -> None:
        """Tag ``v`` with the miner's audit (``validator.audits.mark_audit``) and, when it leaves the audit
        unanswered, with this validator's own fault if it is one: a fetch its budget cut short of the
        serving window (the fetch policy's per-attempt ``timeout``), or a link that brought in nothing
        this round. Keep the first unanswered try."""
        mark_audit(v, ctx)
        if not unanswered(v):
            return
        cache = self.intake.cache
        link_ok = bool(cache.updates) or not v.evidence.get("unreachable")
        fault = own_fault(v, slot.watch, self.conn.fetch_policy.timeout, link_ok)
        if fault is not None:
            v.evidence["own_fault"] = str(fault)
            log.info(
                "round %d: %s's audit not finished through this validator's own %s; not reported (%s)",
                sched.round, slot.miner[:10], fault, v.reason,
            )  # fmt: skip
            return
        sched.unanswered.setdefault(slot.miner, v)

    def _schedule(self, st: RoundState, ctx: RoundContext) -> RoundSchedule:
        """The round's schedule, made at its first SCORE_COMMIT step (after a restart: of the miners
        without a verdict)."""
        r = st.round
        if self.schedule is None or self.schedule.round != r:
            assert st.seed is not None
            self._commits = dict(self.conn.coord.update_commitments(r))
            todo = [m for m in self._commits if self.conn.state.verdict(r, m) is None]
            limit = st.deadline - RETRY_MARGIN_BLOCKS
            audited = [
                m for m in todo if ctx.audits.get(m) is not None and ctx.audit_role(m) is AuditRole.AUDIT
            ]
            self.schedule = RoundSchedule.create(
                r, st.seed, todo, lambda: self.blocks.at(limit), workers=self.workers, audited=audited,
                audit_budget_s=self.conn.fetch_policy.timeout + AUDIT_CHECK_S,
            )  # fmt: skip
            log.info(
                "round %d: verifying %d of %d committed updates, %d at a time in the seed's order; "
                "%.0fs to the score commit",
                r, len(todo), len(self._commits), self.workers, self.schedule.time_left(),
            )  # fmt: skip
        return self.schedule

    def _observe(self, left: float) -> None:
        """Read the chain's block for the commit point's estimate, ``left`` seconds away, unless a reading
        younger than :data:`OBSERVE_SHARE` of that stands (a few reads a phase, whatever its length); with
        the RPC down the clock decides."""
        age = min(OBSERVE_MAX_AGE_S, max(self.conn.cfg.poll_interval / 2, left / OBSERVE_SHARE))
        if time.monotonic() - self._observed < age:
            return  # the estimate runs on the block time meanwhile (a stale reading would shift it)
        self._observed = time.monotonic()
        try:
            self.blocks.observe(self.conn.coord.current(max_age=self.conn.cfg.poll_interval / 2).block)
        except ProtocolError as exc:
            log.info("chain not readable (%s); the score-commit point is kept by the clock", exc)

    def _collect(self, sched: RoundSchedule, ctx: RoundContext, record: Record) -> None:
        """Take the finished workers' verdicts: final ones to ``record``, transient ones back in the queue
        (an audit left unanswered in any try is recorded unanswered unless a later try is answered)."""
        cache = self.intake.cache
        for miner, slot in list(sched.running.items()):
            if slot.work is None or not slot.work.done():
                continue
            try:
                v: Verdict = slot.work.result()  # the pipeline turns every exception into a verdict
            except Exception as exc:  # but one outside its stages is still the validator's own
                reason = f"{type(exc).__name__}: {exc}"
                v = Verdict(miner=miner, round=sched.round, accepted=False, stage=Stage.ERROR, reason=reason)
            v.metrics["budget_s"] = round(slot.budget_s, 3)
            v.metrics["verify_wall_seconds"] = round(sched.clock() - slot.started, 3)
            self._judge(sched, ctx, slot, v)
            stage = Stage(v.stage)
            unreachable = stage.retryable(v.provable) and bool(v.evidence.get("unreachable"))
            own = stage is Stage.ERROR  # an error no check anticipated: the validator's RPC, its peers
            # an unreachable miner is tried again while its budget lasts: with the others verified beside it,
            # its budget, not a withholding grace, is what bounds its cost
            transient = own or (unreachable and not slot.out_of_time())
            if transient and sched.retry(miner):
                if stage is not Stage.RECOMPUTE:  # past digest the update matched: kept for the retry
                    cache.updates.pop(miner, None)
                log.info(
                    "round %d: %s not verifiable yet (%s); retried in the phase",
                    sched.round,
                    miner[:10],
                    v.reason,
                )
                continue
            sched.finish(miner)
            if stage is Stage.BUDGET or unreachable:
                log.warning(
                    "round %d: %s over its budget (%.1fs): not served in time; scored 0 (%s)",
                    sched.round, miner[:10], slot.budget_s, v.reason,
                )  # fmt: skip
            record(miner, self._final(sched, miner, v))
