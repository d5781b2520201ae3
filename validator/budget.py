"""Turning the chain's block deadlines into wall-clock budgets for the validator's work.

A phase ends at a block, but verification runs in seconds: a replay that starts two blocks before the
SCORE_COMMIT deadline and takes 15 s commits its scores after the phase closed (issue 10: one restarted
miner made a validator miss the deadline and the round paid nobody). :class:`BlockClock` measures the
chain's seconds per block as this node sees it and gives the wall-clock time at which a block will be
reached, so that one miner's verification can be cut off in time (``verify_update(deadline=...)``) and
the scores of everything verified are committed before the phase closes.

The estimate is the median of the seconds per block of recent intervals in which the chain moved by at
most :data:`MAX_INTERVAL_BLOCKS`: the devnet's fast-forwards and test drivers mine many blocks at once,
which says nothing about how fast blocks come on their own; until such intervals are seen the default
(1 s, anvil's interval mining) holds.
"""

from __future__ import annotations

import statistics
import time
from collections import deque

MIN_SECONDS_PER_BLOCK = 0.05
"""Floor of the estimate (a chain that mines faster than this is taken as this fast)."""
MAX_SECONDS_PER_BLOCK = 120.0
"""Ceiling of the estimate."""
MAX_INTERVAL_BLOCKS = 2
"""Intervals in which more blocks than this were mined are not samples of the block time."""


class BlockClock:
    """Seconds per block as observed by this node."""

    def __init__(self, default_seconds: float = 1.0, window: int = 32) -> None:
        self.default_seconds = default_seconds
        self._last: tuple[float, int] | None = None
        self._rates: deque[float] = deque(maxlen=window)

    def observe(self, block: int, now: float | None = None) -> None:
        """Record that the chain's latest block is ``block`` at monotonic time ``now``."""
        t = time.monotonic() if now is None else now
        if self._last is not None and 0 < block - self._last[1] <= MAX_INTERVAL_BLOCKS:
            self._rates.append((t - self._last[0]) / (block - self._last[1]))
        if self._last is None or block != self._last[1]:
            self._last = (t, block)

    def seconds_per_block(self) -> float:
        """The median observed seconds per block (the default until two blocks were seen)."""
        if not self._rates:
            return self.default_seconds
        rate = statistics.median(self._rates)
        return min(MAX_SECONDS_PER_BLOCK, max(MIN_SECONDS_PER_BLOCK, rate))

    def time_of(self, block_now: int, target: int, now: float | None = None) -> float:
        """Monotonic time at which ``target`` is expected, seen from ``block_now`` at ``now``."""
        t = time.monotonic() if now is None else now
        return t + max(0, target - block_now) * self.seconds_per_block()
