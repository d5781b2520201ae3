"""This miner's own unanswered-audit reports: the miner closes the contested ones itself.

A committee member's report that this miner left its audit unanswered holds the round's pay. Decided by
the committee and its witnesses, a report still contested at round + ``REPORT_WINDOW_ROUNDS`` is closed by
``expireReport``, which anyone may send and which releases the held pay. The witness that voted against
it sends it (``validator.witness``); this node sends it too, because the miner is the one that has the
interest and the witness may have been restarted or be offline.

Cheap in requests (the fixed-traffic budget): a held round shows in the settlement events the miner reads
anyway (``miner.rewards``) as a ``MinerRewarded`` of 0 with a consensus score above 0. Only such a round
costs a read (its report: one batched round trip, once), and only a report found open costs the
transaction, once its window is over. The round's record keeps what was found (``held_report``,
``report_closed``), so a restarted miner still closes it. A report filed after the round was settled
(its pay clawed back from the unvested) is not seen here; its witness still closes it.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol, runtime_checkable

from prometheus_client import Counter

from miner.connections import MinerConnections
from miner.state import COMMITTED, SERVED, MinerRoundRecord
from protocol.chain.values import UnansweredReport
from protocol.rounds.audits import REPORT_WINDOW_ROUNDS
from protocol.rounds.coordinator import AlreadyDoneError, CoordinatorError

log = logging.getLogger(__name__)

EXPIRED, CLOSED, FAILED = "expired", "closed", "failed"
"""How a held round's report ended for this node: expired by it, closed by another (decided, or expired
by the witness or anyone), or given up after :data:`EXPIRE_RETRY_ROUNDS` failed rounds."""

EXPIRE_RETRY_ROUNDS = 3
"""Rounds past its window that a failed expiry (other than "closed already") is tried again."""


@runtime_checkable
class ReportBoard(Protocol):
    """A coordinator that reads a miner's unanswered-audit report and closes it (the chain's)."""

    def unanswered_report(self, miner: str, round: int) -> UnansweredReport:
        """The unanswered-audit report on ``miner`` in ``round``."""
        ...

    def expire_report(self, evidence: bytes) -> None:
        """Close the contested report on ``evidence`` after its window."""
        ...


def held(rec: MinerRoundRecord) -> bool:
    """Whether a settled round's record shows its pay held: committed, scored above 0, paid 0."""
    return rec.status in (COMMITTED, SERVED) and rec.reward == "0" and (rec.consensus_score or 0) > 0


class OwnReports:
    """Find this miner's open unanswered-audit reports among its held rounds and expire them when due."""

    def __init__(self, conn: MinerConnections) -> None:
        self.conn = conn
        self.outcomes = Counter(
            "tessera_miner_unanswered_reports",
            "Unanswered-audit reports that held this miner's pay, by outcome: expired (by this node, pay "
            "released), closed (decided, or expired by another), failed (gave up)",
            ["outcome"],
            registry=conn.metrics.registry,
        )
        self._done_at: tuple[int, int] | None = None

    def close(self, current: int, settled: int) -> None:
        """Look up the report of each newly held round and expire each open one whose window is over in
        round ``current``; runs once per (``current``, ``settled`` rounds count): no request otherwise."""
        coord = self.conn.coord
        if self._done_at == (current, settled) or not isinstance(coord, ReportBoard):
            return
        self._done_at = (current, settled)
        for r, rec in sorted(self.conn.state.rounds().items()):
            if r >= current:
                continue
            if rec.held_report is None and held(rec):
                self._look(coord, r)
            elif rec.held_report and rec.report_closed is None and current > r + REPORT_WINDOW_ROUNDS:
                self._expire(coord, r, bytes.fromhex(rec.held_report), current)

    def _look(self, coord: ReportBoard, round: int) -> None:
        """Read round ``round``'s report once and record its evidence if it is open ("" if not)."""
        try:
            report = coord.unanswered_report(self.conn.address, round)
        except CoordinatorError as exc:
            log.info("round %d: unanswered-audit report not read (tried again next round): %s", round, exc)
            return
        with self.conn.state.edit(round) as rec:
            rec.held_report = report.evidence.hex() if report.open else ""
        if report.open:
            log.warning(
                "round %d: pay held by an unanswered-audit report; this node expires it after round %d if "
                "it is still contested",
                round,
                round + REPORT_WINDOW_ROUNDS,
            )

    def _expire(self, coord: ReportBoard, round: int, evidence: bytes, current: int) -> None:
        """Send ``expireReport`` for round ``round``'s report and record how it ended."""
        try:
            coord.expire_report(evidence)
            outcome = EXPIRED
            log.warning(
                "round %d: contested unanswered-audit report of round %d expired, pay released",
                current,
                round,
            )
        except AlreadyDoneError as exc:
            outcome = CLOSED
            log.info("round %d: unanswered-audit report of round %d closed already: %s", current, round, exc)
        except CoordinatorError as exc:
            if current <= round + REPORT_WINDOW_ROUNDS + EXPIRE_RETRY_ROUNDS:
                log.info(
                    "round %d: unanswered-audit report of round %d not expired yet: %s", current, round, exc
                )
                return
            outcome = FAILED
            log.warning(
                "round %d: unanswered-audit report of round %d not expired, given up: %s", current, round, exc
            )
        with self.conn.state.edit(round) as rec:
            rec.report_closed = outcome
        self.outcomes.labels(outcome=outcome).inc()

    @staticmethod
    def to_json(records: dict[int, MinerRoundRecord]) -> dict[str, Any]:
        """``/status`` ``unanswered_reports``: the rounds whose pay an open report holds (round -> evidence)
        and the count of each outcome, from the round records."""
        open_ = {
            str(r): "0x" + rec.held_report
            for r, rec in records.items()
            if rec.held_report and not rec.report_closed
        }
        counts = {
            o: sum(1 for rec in records.values() if rec.report_closed == o) for o in (EXPIRED, CLOSED, FAILED)
        }
        return {"open": open_, **counts}
