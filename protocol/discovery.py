"""Finding who serves what: signed DHT records with static fallback peers.

``Discovery`` wraps an optional :class:`protocol.dht.DHTNode`. ``announce`` signs and publishes this node's
record for a round; ``find`` returns the round's valid records (bad ones are logged and counted, never
raised). When the DHT is off or fails, the configured fallback URLs are used, so a DHT split degrades
to static peering instead of stopping the node.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from protocol.dht import DHTError, DHTNode
from protocol.records import NodeRecord, Served, make_record

log = logging.getLogger(__name__)


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

    def announce(
        self, round: int, role: str, url: str, serves: Sequence[Served], ttl: int = 3600
    ) -> NodeRecord:
        """Sign and publish a record (DHT failures are logged, not raised)."""
        self._cache.pop(round, None)
        rec = make_record(
            self.private_key,
            chain_id=self.chain_id,
            role=role,
            round=round,
            url=url,
            serves=tuple(serves),
            ttl=ttl,
        )
        if self.dht is not None and self.dht.running:
            try:
                self.dht.announce(rec)
            except DHTError as exc:
                log.warning("DHT announce failed: %s", exc)
                self.errors.append(str(exc))
        return rec

    def find(self, round: int, fresh: bool = False) -> list[NodeRecord]:
        """Valid records of a round (``fresh``: bypass the short lookup cache)."""
        if self.dht is None or not self.dht.running:
            return []
        hit = self._cache.get(round)
        if not fresh and hit is not None and time.monotonic() - hit[0] < self.cache_seconds:
            return list(hit[1])
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
        self._cache[round] = (time.monotonic(), list(res.records))
        return res.records

    def urls_for(self, round: int, kind: str, digest: str, *, address: str | None = None) -> list[str]:
        """URLs announcing ``digest`` of ``kind`` for a round (optionally only ``address``'s), then fallbacks."""
        want = digest.removeprefix("0x")
        urls = [
            r.url
            for r in self.find(round)
            if (address is None or r.address.lower() == address.lower())
            and any(s.kind == kind and s.digest.removeprefix("0x") == want for s in r.serves)
        ]
        return urls + [u for u in self.fallback_urls if u not in urls]

    def url_of(self, round: int, address: str) -> str | None:
        """The URL ``address`` announced for a round."""
        for r in self.find(round):
            if r.address.lower() == address.lower():
                return r.url
        return None
