"""When and for how long each miner of a round is verified, on an injected clock (pure: no chain, no
threads; ``validator.schedule.VerifyScheduler`` runs it). See ``validator.schedule``'s module doc for the
rules: the seed's order with the miners this validator audits first, budgets shared from the time left to
the commit point (an audited miner's at least the serving window plus :data:`AUDIT_CHECK_S`), bounded
retries, and the first unanswered try of an audit kept.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from validator.audits import ServeWatch
from validator.blockclock import Clock
from validator.context import Verdict

MIN_BUDGET_S = 2.0
"""The least budget a miner starts with (enough for the cheap checks of an update already fetched)."""
MAX_TRIES = 4
"""Times a miner is verified in a round when the failures are transient (the validator's own, or a miner
that could not be reached while its budget lasts)."""
RETRY_DELAY_S = 12.0
"""Seconds a transient failure waits before its next try: a peer that stalled a fetch is skipped for 30 s
by the transfer layer, and a miner frozen or restarting needs that long to answer again (a retry at once
burnt 3 tries in 11 s on a miner frozen 30 s, which was back 3 s later with 100 s of budget left)."""
AUDIT_CHECK_S = 5.0
"""Seconds an audited miner's least budget adds to the serving window: the checks and the replay around
the fetch of the state it may withhold."""


def seeded_order(seed: bytes, miners: Iterable[str]) -> list[str]:
    """``miners`` in the order of ``sha256(seed || address)``: drawn from the round's seed, the same for
    every validator, unknown to a miner before the seed is revealed and not bought by grinding a key."""
    return sorted(miners, key=lambda m: hashlib.sha256(seed + bytes.fromhex(m[2:].lower())).digest())


@dataclass
class Slot:
    """One miner's verification under way."""

    miner: str
    started: float
    budget_s: float
    clock: Clock
    commit_at: Callable[[], float]
    """The schedule's commit point now (it moves when the chain is slower than estimated)."""
    commit_at_start: float
    work: Any = None
    """What the node runs it as (a ``concurrent.futures.Future``)."""
    watch: ServeWatch | None = None
    """Its fetches' windows (whether a failed one was cut short by this budget)."""

    @property
    def end(self) -> float:
        """When its budget runs out: its share, pushed back by as much as the commit point moved since it
        started (a chain slower than estimated, or paused, gives everyone that time)."""
        return self.started + self.budget_s + max(0.0, self.commit_at() - self.commit_at_start)

    def remaining(self) -> float:
        """Seconds left of its budget (0 when spent): the bound of its next fetch."""
        return max(0.0, self.end - self.clock())

    def out_of_time(self) -> bool:
        """Whether its budget is spent (asked by the pipeline between stages and segments)."""
        return self.clock() >= self.end


@dataclass
class RoundSchedule:
    """One round's verification schedule (see the module doc)."""

    round: int
    commit_at: Callable[[], float]
    """When, on the clock, the node commits its scores with what is finished (an estimate that moves
    with the chain's readings: :meth:`BlockClock.at` of the commit block)."""
    queue: deque[str]
    """Miners not started yet, in order."""
    workers: int = 4
    clock: Clock = time.monotonic
    min_budget_s: float = MIN_BUDGET_S
    running: dict[str, Slot] = field(default_factory=dict)
    tries: dict[str, int] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)
    budgets: dict[str, float] = field(default_factory=dict)
    """Each miner's budget at its last start (reported with its verdict)."""
    not_before: dict[str, float] = field(default_factory=dict)
    """When a miner put back after a transient failure may start again."""
    unanswered: dict[str, Verdict] = field(default_factory=dict)
    """The first try of each miner that left its audit unanswered (kept whatever later tries end in,
    unless the miner answers one)."""
    audited: frozenset[str] = frozenset()
    """The miners this validator audits this round: first in the queue, each with at least
    :attr:`audit_budget_s`."""
    audit_budget_s: float = 0.0
    """An audited miner's least budget (the serving window plus :data:`AUDIT_CHECK_S`), within the time left."""

    @classmethod
    def create(
        cls,
        round: int,
        seed: bytes,
        miners: Iterable[str],
        commit_at: Callable[[], float],
        *,
        workers: int = 4,
        clock: Clock = time.monotonic,
        audited: Iterable[str] = (),
        audit_budget_s: float = 0.0,
    ) -> RoundSchedule:
        """The schedule of ``miners`` (those without a verdict yet) in the seed's order, those this
        validator audits (``audited``) first."""
        order = seeded_order(seed, miners)
        mine = frozenset(audited) & frozenset(order)
        queue = deque([m for m in order if m in mine] + [m for m in order if m not in mine])
        return cls(
            round, commit_at, queue, max(1, workers), clock, audited=mine, audit_budget_s=audit_budget_s
        )

    def time_left(self) -> float:
        """Seconds to the commit point."""
        return self.commit_at() - self.clock()

    def due(self) -> bool:
        """Whether the commit point has come."""
        return self.time_left() <= 0

    def unfinished(self) -> int:
        """Miners without a final verdict."""
        return len(self.queue) + len(self.running)

    def share(self, miner: str | None = None) -> float:
        """The budget of a miner starting now: its share of the time left, as if the unfinished ran in
        waves of ``workers``; at least ``min_budget_s`` (an audited ``miner``: ``audit_budget_s``), never
        past the commit point."""
        left = self.time_left()
        waves = max(1, math.ceil(self.unfinished() / self.workers))
        least = max(self.min_budget_s, self.audit_budget_s if miner in self.audited else 0.0)
        return max(0.0, min(left, max(least, left / waves)))

    def start_next(self) -> Slot | None:
        """Start the next miner if a worker is free and there is time left (None otherwise)."""
        if not self.queue or len(self.running) >= self.workers or self.time_left() <= 0:
            return None
        now = self.clock()
        miner = next((m for m in self.queue if self.not_before.get(m, 0.0) <= now), None)
        if miner is None:
            return None
        budget = self.share(miner)
        self.queue.remove(miner)
        slot = Slot(miner, self.clock(), budget, self.clock, self.commit_at, self.commit_at())
        self.running[miner] = slot
        self.tries[miner] = self.tries.get(miner, 0) + 1
        self.budgets[miner] = round(budget, 3)
        return slot

    def finish(self, miner: str) -> None:
        """``miner``'s verdict is final."""
        self.running.pop(miner, None)
        self.finished.add(miner)

    def retry(self, miner: str) -> bool:
        """Put ``miner`` back at the end of the queue after a failure of the validator's own (or a peer
        that was unreachable); False (and nothing changes but the slot freed) when it has had its
        :data:`MAX_TRIES` or the commit point is too near for another budget."""
        self.running.pop(miner, None)
        if self.tries.get(miner, 0) >= MAX_TRIES or self.time_left() < RETRY_DELAY_S + self.min_budget_s:
            return False
        self.queue.append(miner)
        self.not_before[miner] = self.clock() + RETRY_DELAY_S
        return True

    def complete(self) -> bool:
        """Whether every miner has a final verdict."""
        return not self.queue and not self.running

    def left_over(self) -> list[str]:
        """Miners still queued or running (at the commit point: scored as unverified)."""
        return [*self.running, *self.queue]
