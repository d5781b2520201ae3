"""When a node reads a round's records from the DHT again.

A DHT lookup asks every peer holding the round for all of its records: 23-34 kB on the devnet's 7 peers
(``benchmarks.dht_ops``), against about 0.3 kB for a peer's ``/records`` that answers 304. A read at every
ask (the old ``fresh``) or at a fixed interval made the DHT's bytes grow with the round's length. Here
every wait doubles after each read it allowed, so over a round of length T a node reads about log2(T)
times for each record it keeps missing, and not at all while the records it wants came over HTTP:

- a caller that names the addresses it wants and misses some: the first read for a missing address waits
  ``fresh_s`` after the round's last read, each later read for it twice as long as the one before;
- a caller that names none: the round is read again ``every_s`` (``fresh_s`` when ``fresh``) after the
  round's first read, then at doubling waits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from protocol.wire.records import NodeRecord

#: Rounds behind the newest one read whose DHT answers are kept.
KEEP_ROUNDS = 4


@dataclass
class RoundReads:
    """One round's DHT reads: when the last was, what it found, how many there were, and for each wanted
    address that was missing, how many reads the round had when it was first missed."""

    at: float
    records: list[NodeRecord]
    reads: int = 1
    missed: dict[str, int] = field(default_factory=dict)


class DhtReadSchedule:
    """Decides whether a round's records are read from the DHT now (:meth:`due`) and keeps the last
    answer per round (:meth:`held`, :meth:`note`), for :class:`protocol.p2p.discovery.Discovery`."""

    def __init__(
        self, every_s: float = 15.0, fresh_s: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.every_s = every_s
        self.fresh_s = fresh_s
        self.clock = clock
        self._rounds: dict[int, RoundReads] = {}

    def held(self, round: int) -> list[NodeRecord]:
        """The records of the round's last DHT read (none before the first)."""
        r = self._rounds.get(round)
        return [] if r is None else list(r.records)

    def reads(self, round: int) -> int:
        """DHT reads of the round so far."""
        r = self._rounds.get(round)
        return 0 if r is None else r.reads

    def due(self, round: int, missing: Collection[str] | None, fresh: bool = False) -> bool:
        """Whether to read the round now: ``missing``, the wanted addresses (lower case) that no record
        holds (None: the caller named none)."""
        r = self._rounds.get(round)
        if r is None:
            return True
        since = self.clock() - r.at
        if missing is None:
            return since >= (self.fresh_s if fresh else self.every_s) * 2 ** (r.reads - 1)
        waits = [self.fresh_s * 2 ** (r.reads - r.missed.setdefault(a, r.reads)) for a in missing]
        return bool(waits) and since >= min(waits)

    def note(self, round: int, records: list[NodeRecord]) -> None:
        """Count a read and keep its answer beside the earlier ones (forget rounds more than
        :data:`KEEP_ROUNDS` behind the one read)."""
        r = self._rounds.get(round)
        if r is None:
            self._rounds[round] = RoundReads(self.clock(), list(records))
        else:  # merged per signer, the later expiry kept: a failed read does not forget a record
            kept = {x.address: x for x in r.records}
            for x in records:
                if x.address not in kept or x.expires > kept[x.address].expires:
                    kept[x.address] = x
            r.at, r.records, r.reads = self.clock(), list(kept.values()), r.reads + 1
        for old in [k for k in list(self._rounds) if k < round - KEEP_ROUNDS]:
            self._rounds.pop(old, None)  # list(): other threads may add a round meanwhile
