"""The validator's side of the chain's audit draw (issue 26): which miners it audits this round, and the
report of an audit the miner left unanswered.

The round's seed, fixed after the update commits, draws each (miner, round) for an audit with probability
q and a committee of c validators (``protocol.rounds.audits``, the same as the contract's ``auditDraw``).
:func:`round_audits` puts the draws into the round's context, where the pipeline reads them
(``RoundContext.audit_role``): a committee member fetches states and replays, the others abstain on that
miner (the median ignores their score) and fetch no state. A coordinator that cannot tell the draws (a
test double) leaves them empty: every validator audits every miner, as before issue 26.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from protocol.rounds.audits import AuditDraw
from validator.context import AuditRole, RoundContext, Verdict
from validator.stages import Stage

log = logging.getLogger(__name__)


@runtime_checkable
class AuditBoard(Protocol):
    """A coordinator that knows a round's audit draws (``ChainCoordinator``, ``MemoryCoordinator``)."""

    def audit_draws(self, round: int, miners: Sequence[str]) -> dict[str, AuditDraw]:
        """Each miner's draw of ``round`` (its seed fixed)."""
        ...


@runtime_checkable
class UnansweredBoard(Protocol):
    """A coordinator through which a committee member reports an unanswered audit (the chain's)."""

    def report_unanswered(self, miner: str, round: int) -> None:
        """Report ``miner``'s audit of ``round`` as unanswered."""
        ...


def round_audits(coord: object, ctx: RoundContext, miners: Sequence[str]) -> None:
    """Put ``miners``' draws of ``ctx.round`` and this validator's committee index into ``ctx`` (nothing
    when ``coord`` cannot tell them: every validator audits every miner)."""
    if not isinstance(coord, AuditBoard) or not miners:
        return
    ctx.audits = coord.audit_draws(ctx.round, list(miners))
    order = [v.lower() for v in ctx.validators]
    me = ctx.validator.lower()
    ctx.validator_index = order.index(me) if me in order else None
    mine = [m for m in miners if ctx.audit_role(m) is AuditRole.AUDIT]
    audited = sum(d.audited for d in ctx.audits.values())
    log.debug(
        "round %d: %d of %d miners drawn for audit, %d on this validator's committees",
        ctx.round,
        audited,
        len(miners),
        len(mine),
    )


def unanswered(v: Verdict) -> bool:
    """Whether ``v`` is an audit this validator ran that the miner left unanswered: a state, the
    transcript or a residual not served (after the grace the node gives an unreachable miner)."""
    return (
        v.evidence.get("audit") == AuditRole.AUDIT
        and v.stage == Stage.RECOMPUTE
        and not v.provable
        and bool(v.evidence.get("unanswered"))
    )


def report_unanswered(coord: object, v: Verdict) -> bool:
    """Report ``v``'s miner as not answering its audit (committee quorum path); False when the
    coordinator has no such report or the chain refused it (logged)."""
    if not isinstance(coord, UnansweredBoard):
        return False
    try:
        coord.report_unanswered(v.miner, v.round)
    except Exception as exc:  # a refused report (already confirmed, not audited) must not stop the round
        log.info("round %d: unanswered audit of %s not reported: %s", v.round, v.miner[:10], exc)
        return False
    log.warning("round %d: %s did not answer its audit (%s); reported", v.round, v.miner[:10], v.reason)
    return True
