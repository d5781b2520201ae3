"""The validator's side of the chain's audit draw: which miners it audits this round, and the
report of an audit the miner left unanswered.

The round's seed, fixed after the update commits, draws each (miner, round) for an audit with probability
q and a committee of c validators (``protocol.rounds.audits``, the same as the contract's ``auditDraw``).
:func:`round_audits` puts the draws into the round's context, where the pipeline reads them
(``RoundContext.audit_role``): a committee member fetches states and replays, the others abstain on that
miner (the median ignores their score) and fetch no state. A coordinator that cannot tell the draws (a
test double) leaves them empty: every validator audits every miner.

Unanswered is unanswered whatever the way: an audit a committee member cannot finish because the
miner did not serve what its commitment names -- the update itself (not served, not the committed bytes),
the transcript, a state or a residual (404, a hang, a drip past the fetch's window, partial or wrong bytes,
a refused connection) -- is reported (:func:`unanswered`, :func:`report_unanswered`) and costs what a caught
fake costs once the committee and its witnesses confirm it. What the member could not finish through its
own fault is not reported: an error of its own (``error``), its budget spent in its own checks
(``budget``), a fetch it cut short of the serving window (its deadline: :class:`ServeWatch`), or a link
that reached no peer this round (``own_fault`` in the verdict's evidence). The witnesses
(``validator.witness``) then decide between the member and the miner: they ask the miner for the same
material themselves, from other machines, with the whole serving window.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Any, Protocol, TypeVar, runtime_checkable

from protocol.rounds.audits import AuditDraw
from validator.context import AuditRole, Incoming, RoundContext, Verdict, unreachable
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


UNANSWERED_STAGES = frozenset({Stage.FETCH, Stage.DIGEST, Stage.RECOMPUTE})
"""Stages at which an audit can be left unanswered: the update not served or not the committed bytes
(``fetch``, ``digest``), the transcript, a state or a residual not served or not the committed one
(``recompute``)."""

ANSWERED_STAGES = frozenset({Stage.OK, Stage.USEFULNESS})
"""Stages an audit reaches only when the miner served everything it asked for."""


def mark_audit(v: Verdict, ctx: RoundContext) -> Verdict:
    """Tag ``v`` (a verdict of ``ctx``'s round) with this validator's part in the miner's audit where the
    chain drew one, also when the verification ended before the pipeline's plan named it (a fetch or
    digest failure), and, for an audit, an update not served or not the committed bytes as unanswered
    (the update itself withheld from an audited member is an audit left unanswered). Returns
    ``v``."""
    if v.miner not in ctx.audits:
        return v  # no draw from the chain (every validator audits): nothing a committee could report
    role = ctx.audit_role(v.miner)
    v.evidence.setdefault("audit", str(role))
    if role is AuditRole.AUDIT and not v.provable and v.stage in (Stage.FETCH, Stage.DIGEST):
        v.evidence["unanswered"] = True
    return v


def unanswered(v: Verdict) -> bool:
    """Whether ``v`` is an audit this validator ran that the miner left unanswered: the update, the
    transcript, a state or a residual not served or not the committed bytes (after the retries the
    schedule gives an unreachable miner), and not through a fault of this validator's own
    (``own_fault``: its deadline or its link)."""
    return (
        v.evidence.get("audit") == AuditRole.AUDIT
        and v.stage in UNANSWERED_STAGES
        and not v.provable
        and bool(v.evidence.get("unanswered"))
        and not v.evidence.get("own_fault")
    )


def answered(v: Verdict) -> bool:
    """Whether the miner answered the verification ``v`` records: everything asked for was served and
    checked (accepted or scored low), or it was served and proven fake."""
    return v.provable or v.stage in ANSWERED_STAGES


class OwnFault(StrEnum):
    """Why an unfinished audit is the validator's own doing, not the miner's (``own_fault`` evidence)."""

    DEADLINE = "deadline"
    """A fetch that failed on time was given less than the serving window (the member's budget)."""
    LINK = "link"
    """The fetch failed unreachable and this validator received nothing from any peer this round."""


T = TypeVar("T")


class ServeWatch:
    """Watches one verification's fetches (wraps an :class:`Incoming`'s fetchers): for the first that
    failed, the window it was given (the miner's budget left when it started) and whether it failed
    unreachable (a timeout, a refused or broken connection). A timeout of a fetch given less than the
    serving window is the member's deadline, not the miner's failure (:meth:`short_window`)."""

    def __init__(self, remaining: Callable[[], float] | None = None) -> None:
        self.remaining = remaining
        """Seconds left of the miner's budget (None: no budget, every fetch gets the whole window)."""
        self.failed_window: float | None = None
        """The window of the first failed fetch (inf without a budget); None while none failed."""
        self.failed_unreachable = False
        """Whether that fetch failed unreachable."""
        self._lock = threading.Lock()

    def wrap(self, inc: Incoming) -> Incoming:
        """``inc`` with its update and state fetchers watched."""
        return dataclasses.replace(
            inc, fetch_update=self._watched(inc.fetch_update), fetch_state=self._watched(inc.fetch_state)
        )

    def _watched(self, fetch: Callable[..., T]) -> Callable[..., T]:
        def watched(*args: Any) -> T:
            window = self.remaining() if self.remaining is not None else float("inf")
            try:
                return fetch(*args)
            except Exception as exc:
                with self._lock:
                    if self.failed_window is None:
                        self.failed_window, self.failed_unreachable = window, unreachable(exc)
                raise

        return watched

    def short_window(self, serve_window_s: float) -> bool:
        """Whether the first failed fetch failed unreachable with less than ``serve_window_s`` seconds of
        window: the miner was not given the time it is bound to serve in."""
        return (
            self.failed_window is not None and self.failed_unreachable and self.failed_window < serve_window_s
        )


def own_fault(v: Verdict, watch: ServeWatch | None, serve_window_s: float, link_ok: bool) -> OwnFault | None:
    """Why the unanswered audit ``v`` is this validator's own doing (an :class:`OwnFault`), or None when
    it is the miner's: a fetch that failed on time with less than ``serve_window_s`` of window (its
    deadline), or an unreachable miner while this validator's link reached no peer this round
    (``link_ok`` False). A miner that answered 404 or served the wrong bytes is the miner's whatever
    the window."""
    if not v.evidence.get("unreachable"):
        return None  # answered, with nothing or with the wrong bytes: the miner's
    if watch is not None and watch.short_window(serve_window_s):
        return OwnFault.DEADLINE
    if not link_ok:
        return OwnFault.LINK
    return None


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
