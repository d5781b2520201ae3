"""A validator-side cache of parsed collateral, bounded in entries and bytes, that never reads the clock."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections import OrderedDict

from attestation.collateral.kinds import Collateral, IntelCollateral
from attestation.collateral.wire import loads_collateral
from attestation.errors import MalformedCollateralError
from attestation.limits import DEFAULT_LIMITS, Limits, check_size

PARSE_FACTOR = 4
"""A parsed collateral entry is charged this many times its JSON text (certificates, CRLs, parsed JSON)."""


class CollateralCache:
    """A validator-side cache of parsed collateral, keyed by the SHA-256 of its JSON text.

    Miners ship collateral with their evidence; many miners share a platform, so the same collateral
    arrives many times. The cache parses each distinct document once (certificates, CRLs, TCB info), so
    ``verify`` only checks signatures and windows. It never reads the clock: ``evict_expired(now)``
    drops Intel entries whose TCB info or QE identity ``nextUpdate`` has passed. It is bounded both in
    entries (``max_entries``) and in bytes (``max_bytes``, each entry charged ``PARSE_FACTOR`` times its
    text); every text is checked against ``limits`` before it is parsed.
    """

    def __init__(
        self, max_entries: int = 256, max_bytes: int = 32 * 1024 * 1024, limits: Limits = DEFAULT_LIMITS
    ) -> None:
        self._max = max_entries
        self._max_bytes = max_bytes
        self._limits = limits
        self._entries: OrderedDict[bytes, Collateral] = OrderedDict()
        self._sizes: dict[bytes, int] = {}
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def held_bytes(self) -> int:
        """Estimated bytes held: ``PARSE_FACTOR`` times the text of each entry."""
        return self._bytes

    def _drop(self, key: bytes) -> None:
        del self._entries[key]
        self._bytes -= self._sizes.pop(key)

    def get(self, text: str | bytes) -> Collateral:
        """Return the parsed collateral for ``text`` (parsing and preloading it on a miss)."""
        check_size(text, self._limits.max_collateral_bytes, "the collateral")  # before hashing it
        raw = text.encode() if isinstance(text, str) else text
        key = hashlib.sha256(raw).digest()
        hit = self._entries.get(key)
        if hit is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            return hit
        self.misses += 1
        coll = loads_collateral(raw, self._limits)
        coll.preload()
        size = PARSE_FACTOR * len(raw)
        if size > self._max_bytes:
            return coll
        self._entries[key] = coll
        self._sizes[key] = size
        self._bytes += size
        while len(self._entries) > self._max or self._bytes > self._max_bytes:
            self._drop(next(iter(self._entries)))
        return coll

    def evict_expired(self, now: dt.datetime) -> int:
        """Drop Intel collateral past its nextUpdate at ``now`` (or undecodable); returns how many."""
        dead = [k for k, c in self._entries.items() if isinstance(c, IntelCollateral) and _expired(c, now)]
        for k in dead:
            self._drop(k)
        return len(dead)


def _expired(c: IntelCollateral, now: dt.datetime) -> bool:
    try:
        return min(c.tcb_info_parsed.next_update, c.qe_identity_parsed.next_update) < now
    except MalformedCollateralError:
        return True
