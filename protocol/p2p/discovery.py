"""Finding who serves what: signed records from the DHT and from peers over HTTP, with static fallbacks.

``Discovery`` wraps an optional :class:`protocol.p2p.dht.DHTNode`. ``announce`` signs this node's record for a
round, publishes it in the DHT, keeps it in the node's :class:`protocol.p2p.recordbook.RecordBook` (served at
``GET /records/{round}``) and pushes it to the configured peer URLs (``POST /records``); ``find`` merges the
round's valid records from the DHT, the book and the peers' ``/records`` (bad ones are logged and counted,
never raised; per signer the record expiring last wins). So a DHT that strangers poison, split
or switch off degrades to peering over HTTP instead of stopping the node; the fallback URLs are also
returned as places to fetch from.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from eth_account import Account

from protocol.p2p.dht import DHTError, DHTNode
from protocol.p2p.dhtreads import KEEP_ROUNDS, DhtReadSchedule
from protocol.p2p.recordbook import RecordBook, RecordExchange
from protocol.wire.records import NodeRecord, RecordError, Served, make_record

log = logging.getLogger(__name__)

STATS_TIMEOUT_S = 1.0
"""Seconds :meth:`Discovery.refused_by_dht` waits for the DHT process's counters."""


@dataclass
class Discovery:
    """Announce and look up node records for a chain."""

    chain_id: int
    private_key: str
    dht: DHTNode | None = None
    fallback_urls: tuple[str, ...] = ()
    refused: int = 0
    """Records refused so far (malformed, badly signed, expired)."""
    errors: list[str] = field(default_factory=list)
    cache_seconds: float = 2.0
    """Lookups of a round are reused for this long (a DHT get can take seconds)."""
    _cache: dict[int, tuple[float, list[NodeRecord]]] = field(default_factory=dict)
    record_urls: tuple[str, ...] | None = None
    """Peers to push records to and pull records from over HTTP (None: the fallback URLs)."""
    http_timeout: float = 2.0
    """Seconds of wall time for one push or pull of records over HTTP."""
    book: RecordBook = field(init=False)
    exchange: RecordExchange = field(init=False)
    dht_every_s: float = 15.0
    """The wait before a round's second DHT read for callers that name no record they want, doubled before
    each later one (:class:`protocol.p2p.dhtreads.DhtReadSchedule`)."""
    dht_fresh_s: float = 1.0
    """The wait before reading the DHT for a wanted record that is missing (or for any record, ``fresh``),
    doubled before each later read while it stays missing (a read at every ask grew with the
    round's length)."""
    schedule: DhtReadSchedule = field(init=False)
    dht_reads: int = 0
    """DHT lookups of rounds' records so far (tests, debugging)."""
    clock: Callable[[], float] = time.monotonic
    """The clock of the caches and the DHT's waits (monotonic seconds)."""
    _published: dict[int, NodeRecord] = field(default_factory=dict, init=False)
    first_announced: int | None = field(default=None, init=False)
    """The first round this process announced: a record of this node in the DHT for a later round than the
    next one can only be this process's own, which the book holds (a DHT lookup moves 23-34 kB)."""

    def __post_init__(self) -> None:
        self.book = RecordBook(self.chain_id)
        self.schedule = DhtReadSchedule(self.dht_every_s, self.dht_fresh_s, self.clock)
        self.exchange = RecordExchange(self.chain_id, timeout=self.http_timeout)

    def _peers(self) -> tuple[str, ...]:
        return self.fallback_urls if self.record_urls is None else self.record_urls

    def sign_record(
        self, round: int, role: str, url: str, serves: Sequence[Served], ttl: int, *, now: float | None = None
    ) -> NodeRecord:
        """This node's record of ``round``, signed with its key (``protocol.wire.records.make_record``)."""
        return make_record(
            self.private_key,
            chain_id=self.chain_id,
            role=role,
            round=round,
            url=url,
            serves=tuple(serves),
            ttl=ttl,
            now=now,
        )

    def announce(
        self, round: int, role: str, url: str, serves: Sequence[Served], ttl: int = 3600
    ) -> NodeRecord:
        """Sign and publish a record in the DHT, the book and to the peers (failures are logged, not raised).
        A record this process already published for the round with the same role and URL, serving at
        least ``serves``, and good for half of ``ttl`` more, is returned as it is: a validator announces
        the checkpoint it merged and again when the round opens, and a DHT store moves 14-23 kB."""
        now = time.time()
        prior = self._published.get(round)
        if prior is not None and prior.role == role and prior.url == url and prior.expires - now > ttl / 2:
            if all(_served_in(s, prior.serves) for s in serves):
                return prior
        self._cache.pop(round, None)
        # the newest record must expire last, or a node restarted within the second of its previous
        # announcement keeps its old URL where records are merged (the DHT keeps the later expiry)
        address = Account.from_key(self.private_key).address
        held = [r.expires for r in self.book.records(round) if r.address == address]
        if self.first_announced is None:
            self.first_announced = round
        # a restarted node: what it announced before (at most the round after the one it restarts in) is in
        # the DHT, if anywhere
        if not held and round <= self.first_announced + 1:
            held = [r.expires for r in self._from_dht(round) if r.address == address]
        ttl = max(ttl, max(held, default=0) + 1 - int(now))
        rec = self.sign_record(round, role, url, serves, ttl, now=now)
        self.book.note_round(round)
        try:
            self.book.add(rec)
        except RecordError as exc:  # only a signer filter that refuses this node itself
            log.warning("own record not kept: %s", exc)
        self.exchange.push(self._peers(), rec)
        if self.dht is not None and self.dht.running:
            try:
                self.dht.announce(rec)
            except DHTError as exc:
                log.warning("DHT announce failed: %s", exc)
                self.errors.append(str(exc))
                return rec  # not kept as published: the next announcement stores it again
        self._published[round] = rec
        for old in [r for r in list(self._published) if r < round - KEEP_ROUNDS]:
            self._published.pop(old, None)
        return rec

    def find(self, round: int, fresh: bool = False, want: Collection[str] | None = None) -> list[NodeRecord]:
        """Valid records of a round from the book, the peers and the DHT (``fresh``: bypass the cache).
        ``want``: the addresses whose records the caller needs; while the book and the DHT's last answer
        hold all of them the peers are not asked, and while the peers' answers complete them the DHT is
        not read (None: the peers are asked, and the DHT when due). When the DHT is read again:
        :class:`protocol.p2p.dhtreads.DhtReadSchedule`."""
        hit = self._cache.get(round)
        if not fresh and hit is not None and self.clock() - hit[0] < self.cache_seconds:
            return list(hit[1])
        self.book.note_round(round)
        near = [*self.book.records(round), *self.schedule.held(round)]
        if want is None or _missing(want, near):  # the book covers what is wanted: no pull
            near += self._pull(round)
        missing = None if want is None else _missing(want, near)
        found = near
        if (missing is None or missing) and self.schedule.due(round, missing, fresh):
            found = [*near, *self._from_dht(round)]
            self.schedule.note(round, found[len(near) :])
        best: dict[str, NodeRecord] = {}
        for rec in found:
            if rec.round != round or rec.chain_id != self.chain_id:
                continue
            kept = best.get(rec.address)
            if kept is None or rec.expires > kept.expires:
                best[rec.address] = rec
        records = sorted(best.values(), key=lambda r: r.address)
        self._cache[round] = (self.clock(), list(records))
        return records

    def _pull(self, round: int) -> list[NodeRecord]:
        """The round's records from the peers' ``/records`` (kept in the book, so relayed onwards)."""
        refused_before = self.exchange.refused
        pulled = self.exchange.pull(self._peers(), round)
        self.refused += self.exchange.refused - refused_before
        for rec in pulled:
            try:
                self.book.add(rec)  # relayed to whoever pulls from this node
            except RecordError:
                pass
        return pulled

    def _from_dht(self, round: int) -> list[NodeRecord]:
        if self.dht is None or not self.dht.running:
            return []
        self.dht_reads += 1
        try:
            res = self.dht.lookup(self.chain_id, round)
        except DHTError as exc:
            log.warning("DHT lookup failed: %s", exc)
            self.errors.append(str(exc))
            return []
        except Exception as exc:  # a value some peer stored that the DHT client cannot handle: not fatal
            log.warning("DHT lookup failed (untyped %s): %s", type(exc).__name__, exc)
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return []
        self.refused += len(res.refused)
        return res.records

    def urls_for(self, round: int, kind: str, digest: str, *, address: str | None = None) -> list[str]:
        """URLs announcing ``digest`` of ``kind`` for a round (optionally only ``address``'s), then fallbacks."""
        hexd = digest.removeprefix("0x")
        urls = [
            r.url
            for r in self.find(round, want=None if address is None else (address,))
            if (address is None or r.address.lower() == address.lower())
            and any(s.kind == kind and s.digest.removeprefix("0x") == hexd for s in r.serves)
        ]
        return urls + [u for u in self.fallback_urls if u not in urls]

    def url_of(self, round: int, address: str) -> str | None:
        """The URL ``address`` announced for a round."""
        for r in self.find(round, want=(address,)):
            if r.address.lower() == address.lower():
                return r.url
        return None

    def refused_by_dht(self) -> int:
        """Records this node's DHT validator refused: stores peers sent it and reads alike (0 without a DHT).

        ``refused`` counts only what this node's own lookups threw out, and a node that reads no DHT while
        it holds the records it wants may never look at junk its DHT refused on store. Read for
        ``/status``, so a stuck DHT process holds the page up for :data:`STATS_TIMEOUT_S` at most."""
        dht = self.dht
        if dht is None or not dht.running:
            return 0
        try:
            return sum(n for k, n in dht.validator_stats(STATS_TIMEOUT_S).items() if k != "accepted")
        except DHTError as exc:
            log.debug("DHT validator stats: %s", exc)
            return 0


def _missing(want: Collection[str], records: Sequence[NodeRecord]) -> set[str]:
    """The addresses of ``want`` (lower case) that no record of ``records`` is of."""
    return {a.lower() for a in want} - {r.address.lower() for r in records}


def _served_in(s: Served, held: Sequence[Served]) -> bool:
    """Whether ``held`` serves ``s`` (the same kind and digest; its size when ``s`` names one)."""
    digest = s.digest.removeprefix("0x").lower()
    return any(
        h.kind == s.kind and h.digest.removeprefix("0x").lower() == digest and s.size in (0, h.size)
        for h in held
    )
