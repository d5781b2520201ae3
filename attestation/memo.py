"""Memoization bounded in bytes: an LRU whose entries carry an estimated size, evicted past a byte budget.

``functools.lru_cache`` bounds the number of entries, not their size: with certificate chains of any
length, 1,024 entries could hold gigabytes. Here each entry is charged ``cost(args, result)`` bytes (an
estimate of what the cached key and value keep alive) and the least recently used entries go once the
total passes ``max_bytes``; an entry larger than the whole budget is returned but not kept. Exceptions
are not cached. ``cache_clear()`` and ``cache_info()`` mirror ``lru_cache``'s.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, NamedTuple, ParamSpec, TypeVar

from cryptography import x509
from cryptography.hazmat.primitives import serialization

P = ParamSpec("P")
R = TypeVar("R")

ENTRY_OVERHEAD = 256
"""Bytes charged per entry on top of its cost (the dict slot, the key tuple, the list node)."""
CERT_OVERHEAD = 12 * 1024
"""Bytes charged per certificate object on top of twice its DER length: the Rust object, the decoded
subject, issuer and extensions cryptography caches on it. Calibrated: 2,000 distinct 3-certificate PCK
chains in ``_load_pem_chain`` grew the process by 44.5 KB each; this charges about 50 KB."""

_ALL: list[BytesMemo[Any, Any]] = []


class MemoInfo(NamedTuple):
    """Counters of one memo."""

    hits: int
    misses: int
    entries: int
    bytes: int
    max_bytes: int


class BytesMemo(Generic[P, R]):
    """A memoized function whose cache holds at most ``max_bytes`` (estimated) bytes."""

    def __init__(self, fn: Callable[P, R], max_bytes: int, cost: Callable[..., int]) -> None:
        self.__wrapped__ = fn
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", "memo")
        self._fn = fn
        self._cost = cost
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, tuple[R, int]] = OrderedDict()
        self._bytes = 0
        self._hits = 0
        self._misses = 0
        self._lock = threading.Lock()
        _ALL.append(self)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        key: Hashable = (args, tuple(sorted(kwargs.items()))) if kwargs else args
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                self._hits += 1
                return hit[0]
            self._misses += 1
        result = self._fn(*args, **kwargs)
        size = ENTRY_OVERHEAD + self._cost(*args, result=result, **kwargs)
        if size > self.max_bytes:
            return result
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._entries[key] = (result, size)
            self._bytes += size
            while self._bytes > self.max_bytes and self._entries:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped
        return result

    def cache_clear(self) -> None:
        """Drop every entry and reset the counters."""
        with self._lock:
            self._entries.clear()
            self._bytes = self._hits = self._misses = 0

    def cache_info(self) -> MemoInfo:
        """Hits, misses, entries, bytes held and the budget."""
        with self._lock:
            return MemoInfo(self._hits, self._misses, len(self._entries), self._bytes, self.max_bytes)


def bytes_memo(max_bytes: int, cost: Callable[..., int]) -> Callable[[Callable[P, R]], BytesMemo[P, R]]:
    """Decorator form of :class:`BytesMemo`."""

    def wrap(fn: Callable[P, R]) -> BytesMemo[P, R]:
        return BytesMemo(fn, max_bytes, cost)

    return wrap


def all_memos() -> list[BytesMemo[Any, Any]]:
    """Every memo of the package (for tests and for measuring what they hold)."""
    return list(_ALL)


def cert_cost(cert: object) -> int:
    """Estimated bytes kept alive by a certificate object (0 for anything else)."""
    if not isinstance(cert, x509.Certificate):
        return 0
    try:
        return CERT_OVERHEAD + 2 * len(cert.public_bytes(serialization.Encoding.DER))
    except ValueError:
        return CERT_OVERHEAD


def deep_cost(value: object) -> int:
    """Estimated bytes of a key or result: bytes and str by length, certificates, tuples/lists summed."""
    if isinstance(value, bytes | bytearray | str):
        return len(value)
    if isinstance(value, x509.Certificate):
        return cert_cost(value)
    if isinstance(value, tuple | list):
        return sum(deep_cost(v) for v in value) + 8 * len(value)
    return 64
