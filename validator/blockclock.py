"""The chain's block clock as a validator sees it: seconds per block and when a block is due, from the
readings of the block number the node takes anyway (``validator.schedule`` times a round's verification
against the score-commit block with it, and keeps time by it while the RPC is down)."""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], float]
"""Seconds on a monotonic clock."""

MIN_BLOCK_S = 0.5
"""Fewest seconds per block the schedule assumes (no chain the project runs on is faster)."""


class BlockClock:
    """Seconds per block and when a block is due, from (clock, block) readings the node takes anyway."""

    def __init__(self, clock: Clock = time.monotonic, default_block_s: float = 2.0) -> None:
        self.clock = clock
        self.default_block_s = default_block_s
        """Seconds per block assumed until two different blocks were seen."""
        self._first: tuple[float, int] | None = None
        self._latest: tuple[float, int] | None = None
        """When the block number last changed, and to what."""
        self._read: tuple[float, int] | None = None
        """The last reading."""

    def observe(self, block: int) -> None:
        """A reading of the chain's block number now (the node's main thread, every step)."""
        now = self.clock()
        if self._first is None or block < self._first[1]:
            self._first = (now, block)
        if self._latest is None or block != self._latest[1]:
            self._latest = (now, block)
        self._read = (now, block)

    def block_seconds(self) -> float:
        """Seconds per block over the readings (the default until two blocks were seen)."""
        if self._first is None or self._latest is None or self._latest[1] <= self._first[1]:
            return self.default_block_s
        measured = (self._latest[0] - self._first[0]) / (self._latest[1] - self._first[1])
        # faster than MIN_BLOCK_S is a fast-forward (anvil_mine) or a lockstep test chain, where the clock
        # does not predict blocks: budgets of ~0 s would refuse every fetch at once
        return max(MIN_BLOCK_S, measured)

    def at(self, block: int) -> float:
        """When (on the clock) the chain reaches ``block``: from the last change of block number, or, when
        the chain has stood still longer than a block (a paused or lockstep chain), from the last reading
        with the next block due now. Without readings (the RPC is down) the estimate stands still and the
        clock decides."""
        if self._latest is None or self._read is None:
            return self.clock()
        bs = self.block_seconds()
        t, b = self._latest
        tr, br = self._read
        return max(t + (block - b) * bs, tr + (block - br - 1) * bs)
