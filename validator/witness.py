"""The witness of an unanswered-audit report (the reverse attack).

"Not served" cannot be proven, so a committee's report that a miner left its audit unanswered is decided
by the committee together with up to c witnesses drawn from the round's seed among the other validators
(the contract's ``auditWitnesses``). A witness that sees the report open asks the miner for the audited
states itself, with the same audit a committee member runs (the pipeline's ``audit`` plan, its fetch
deadlines included), and votes on what it finds:

- not served: for the report (a real withholder is slashed by the committee and its witnesses), whatever
  the way: the update itself, the transcript, a state or a residual not served or not the
  committed bytes -- 404, a hang or a drip past the whole fetch window, partial or wrong bytes, a refused
  connection -- once its own link is known to work (it brought in some update this round): a witness that
  reached nobody does not vote on a miner it could not reach;
- served and checking out: against it (one lying committee member cannot slash an honest miner);
- served but fake: its normal fraud proof (``Slashing.slash``), which forfeits the round's pay even where
  the report had frozen it first;
- undecided (a stage before the states failed, the budget ran out): no vote; the report expires after its
  window and releases the pay.

How a witness tells a committee member's own fault from the miner's: the witness repeats the audit itself,
later (after the score commit), from another machine, through its own RPC, with the whole serving window
(no verification budget cuts its fetches short). A member's RPC outage, its bandwidth or its deadline does
not recur there: the miner serves the witness, the audit checks out, and the witness votes against the
report (2/3 against slashes the reporter; neither way, the report expires and the pay is released). Only a
miner that does not serve the witness either is confirmed.

A committee member's own report that its RPC failed to send when the verdict was recorded is sent again at
its next witness check (once a phase, until the chain counts it): a member's RPC outage delays the report,
it does not lose it.

A report it voted against is kept in the validator's state file (:class:`ContestedReports`), so that the
witness expires it after the window even when it was restarted meanwhile; the reported miner's own node
closes it as well (``miner.reports``), so the pay is released while either of the two runs.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from protocol.rounds.audits import REPORT_WINDOW_ROUNDS, AuditDraw
from protocol.rounds.coordinator import AlreadyDoneError, CoordinatorError, RoundState
from validator.audits import AuditBoard, mark_audit, report_unanswered, round_audits, unanswered
from validator.connections import Connections, Theta
from validator.context import RoundContext, Verdict
from validator.intake import Intake
from validator.pipeline import VerificationPipeline
from validator.stages import Stage
from validator.state import ValidatorState

log = logging.getLogger(__name__)

#: Rounds past its window that an expiry which failed (other than "already closed") is tried again before
#: the entry is dropped: a chain that lost the report is not asked for ever.
EXPIRE_RETRY_ROUNDS = 3

#: Stages that decide before any audited state is asked for: the witness cannot tell "served" from them.
_BEFORE_STATES = frozenset(
    {Stage.COMMIT, Stage.FETCH, Stage.DIGEST, Stage.FORMAT, Stage.HEADER, Stage.BOUNDS, Stage.ATTESTATION}
    | {Stage.ERROR, Stage.BUDGET, ""}
)


class UnansweredReport(Protocol):
    """An unanswered-audit report as the board reads it (``protocol.chain.UnansweredReport``)."""

    @property
    def evidence(self) -> bytes:
        """Its evidence hash."""
        ...

    @property
    def open(self) -> bool:
        """Filed and not decided or expired yet."""
        ...

    @property
    def voted(self) -> bool:
        """Whether this validator voted on it."""
        ...


@runtime_checkable
class WitnessBoard(Protocol):
    """A coordinator that tells a round's witnesses and takes their votes (the chain's)."""

    def audit_witnesses(self, round: int, miners: Sequence[str]) -> dict[str, int]:
        """Each miner's witness bitmap of ``round``."""
        ...

    def unanswered_report(self, miner: str, round: int) -> UnansweredReport:
        """The unanswered-audit report on ``miner`` in ``round``."""
        ...

    def vote_unanswered(self, evidence: bytes, support: bool) -> None:
        """Vote on the unanswered-audit report on ``evidence``."""
        ...

    def expire_report(self, evidence: bytes) -> None:
        """Close the contested unanswered-audit report on ``evidence`` after its window."""
        ...


def witness_vote(v: Verdict, link_ok: bool = True) -> bool | None:
    """The vote a witness's own audit ``v`` calls for: True (not served, any way: the update, the
    transcript, a state), False (served and checking out, whatever the usefulness score), None (a fraud
    proof instead, or undecided: a miner it could not reach while its own link, ``link_ok``, brought in
    nothing this round)."""
    if v.provable:
        return None
    if unanswered(v):
        return True if link_ok or not v.evidence.get("unreachable") else None
    if v.stage in _BEFORE_STATES:
        return None
    if v.stage == Stage.RECOMPUTE:  # a replay that failed unprovably (not a missing state): no opinion
        return None
    return False


class Witness:
    """This validator's witness duty: audit the miners its committee reported unanswered, then vote."""

    def __init__(
        self,
        conn: Connections,
        intake: Intake,
        pipeline: VerificationPipeline,
        prove: Callable[[Verdict], None],
    ) -> None:
        self.conn, self.intake, self.pipeline = conn, intake, pipeline
        self.prove = prove
        """Proposes a fraud proof on a provable verdict (``Slashing.slash``)."""
        self.decided: set[tuple[int, str]] = set()
        """(round, miner) pairs this validator voted on or proved already."""
        self.witnesses: dict[tuple[int, str], int] = {}
        """(round, miner) -> its witness bitmap (fixed with the seed: read once)."""
        self.contested = ContestedReports(conn.state)
        """Reports it voted against: it expires them after the window, which releases the honest miner's
        pay (kept in the state file, so a restart does not forget them)."""

    def check(self, st: RoundState, theta: Theta) -> None:
        """For each miner of ``st.round`` audited by a committee this validator witnesses, with the
        committee's unanswered report open and not yet voted on by it: audit the miner and vote."""
        coord, r = self.conn.coord, st.round
        if st.seed is None or not isinstance(coord, WitnessBoard) or not isinstance(coord, AuditBoard):
            return
        self.contested.expire_due(coord, r)
        # only the current round is witnessed: what is remembered of earlier ones is never read again
        self.decided = {k for k in self.decided if k[0] >= r}
        self.witnesses = {k: w for k, w in self.witnesses.items() if k[0] >= r}
        try:
            commits = coord.update_commitments(r)
            ctx = self.conn.round_context(st, theta)
            round_audits(coord, ctx, list(commits))
            me = ctx.validator_index
            audited = [m for m, d in ctx.audits.items() if d.audited and (r, m) not in self.decided]
            if me is None or not audited:
                return
            todo = [m for m in audited if (r, m) not in self.witnesses]
            self.witnesses.update(
                {(r, m): w for m, w in coord.audit_witnesses(r, todo).items()} if todo else {}
            )
            for miner in [m for m in audited if ctx.audits[m].committee >> me & 1]:
                self._report_again(coord, r, miner)
            mine = [m for m in audited if self.witnesses.get((r, m), 0) >> me & 1]
            for miner in mine:
                report = coord.unanswered_report(miner, r)
                if report.voted:
                    self.decided.add((r, miner))
                if report.open and not report.voted and miner in commits:
                    self._audit_and_vote(coord, ctx, miner, commits[miner], report.evidence)
        except CoordinatorError as exc:  # a witness's read or vote must not stop the round
            log.info("round %d: witness check not done: %s", r, exc)

    def _report_again(self, board: WitnessBoard, round: int, miner: str) -> None:
        """As a member of ``miner``'s committee: send again the unanswered report this validator's own
        verdict calls for when the chain has no vote of it yet (a report its RPC failed to send
        at the verdict is not lost; asked once a phase until it counts or the report is closed)."""
        own = self.conn.state.verdict(round, miner)
        if own is None or not unanswered(own):
            return
        report = board.unanswered_report(miner, round)
        if report.voted:
            self.decided.add((round, miner))
            return
        if report_unanswered(board, own):
            self.decided.add((round, miner))

    def _audit_and_vote(
        self, board: WitnessBoard, ctx: RoundContext, miner: str, commitment: bytes, evidence: bytes
    ) -> None:
        """Run the committee's audit of ``miner`` as if on its committee, then vote on ``evidence`` (or
        prove a fake)."""
        me = ctx.validator_index
        assert me is not None
        draw = ctx.audits[miner]
        audits = dict(ctx.audits)
        audits[miner] = AuditDraw(audited=True, committee=draw.committee | 1 << me)
        as_auditor = dataclasses.replace(ctx, audits=audits)
        inc = self.intake.incoming(ctx.round, miner, commitment, len(ctx.registry))
        v = mark_audit(self.pipeline.verify(inc, as_auditor), as_auditor)
        vote = witness_vote(v, link_ok=bool(self.intake.cache.updates))
        if v.provable:
            log.warning("round %d: witness of %s was served a fake: %s", ctx.round, miner[:10], v.reason)
            self.prove(v)
            self.decided.add((ctx.round, miner))
            return
        if vote is None:
            log.info("round %d: witness of %s undecided (%s: %s)", ctx.round, miner[:10], v.stage, v.reason)
            return
        board.vote_unanswered(evidence, vote)
        self.decided.add((ctx.round, miner))
        if not vote:
            self.contested.add(evidence, ctx.round)
        log.warning(
            "round %d: witness of %s's unanswered report: %s (%s)",
            ctx.round,
            miner[:10],
            "not served, confirmed" if vote else "served, rejected",
            v.reason or v.stage,
        )


class ContestedReports:
    """The unanswered-audit reports this validator voted against as their witness, kept in its state file
    (``ValidatorState.contested``) until they are closed, so that a restarted witness still expires them
    after their window."""

    def __init__(self, state: ValidatorState) -> None:
        self.state = state

    def add(self, evidence: bytes, round: int) -> None:
        """Remember, durably, the report on ``evidence`` of ``round`` that this validator contested."""
        self.state.put_contested(evidence, round)

    def open(self) -> dict[bytes, int]:
        """The contested reports not closed yet: evidence -> their round."""
        return self.state.contested()

    def expire_due(self, board: WitnessBoard, current: int) -> list[bytes]:
        """Send ``expireReport`` for each contested report whose window is over in round ``current``;
        an entry is forgotten once expired here, refused as closed already (decided, or expired by the
        miner or anyone), or failed :data:`EXPIRE_RETRY_ROUNDS` rounds past its window. Returns the
        evidence this call expired."""
        done = []
        for evidence, r in self.open().items():
            if current <= r + REPORT_WINDOW_ROUNDS:
                continue
            try:
                board.expire_report(evidence)
            except AlreadyDoneError as exc:
                log.info("round %d: unanswered report of round %d closed already: %s", current, r, exc)
            except CoordinatorError as exc:
                if current <= r + REPORT_WINDOW_ROUNDS + EXPIRE_RETRY_ROUNDS:
                    log.info("round %d: unanswered report of round %d not expired yet: %s", current, r, exc)
                    continue
                log.warning(
                    "round %d: unanswered report of round %d not expired, given up: %s", current, r, exc
                )
            else:
                log.warning(
                    "round %d: contested unanswered report of round %d expired, pay released", current, r
                )
                done.append(evidence)
            self.state.drop_contested(evidence)
        return done
