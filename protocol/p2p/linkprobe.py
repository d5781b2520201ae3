"""The upload probe: a node measures its own upload rate to a peer that serves ``POST /link/probe``.

A miner audited must upload an audit's largest part within a validator's fetch timeout, or the audit is
reported unanswered and costs what a caught fake costs; so it measures its link at start, before it stakes
(``miner.linkcheck``). The serving side (:func:`mount_link_probe`, on the validator's API) reads and
discards a body of at most :data:`PROBE_MAX_BYTES` (a larger declared ``Content-Length`` is refused 413
before any of it is read), within :data:`PROBE_MAX_SECONDS` (408 past it), and answers the bytes it
received and the seconds they took to arrive, timed from the handler's start. It never answers more than a
few dozen bytes (no amplification), and a :class:`ProbeLimiter` bounds what one peer host and all peers
together may send it (429 with ``Retry-After``). The client side is :func:`probe_upload`.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import FastAPI, HTTPException, Request

from protocol.errors import ProtocolError
from protocol.p2p.transfer import new_client

PROBE_PATH = "/link/probe"
"""Where a node serves the probe."""

PROBE_MAX_BYTES = 8 << 20
"""The largest probe body the server reads (8 MiB): about a quarter of a second at the 125m preset's
audit rate, and a few seconds at the small presets' (``tessera runspec estimate``)."""

PROBE_MAX_SECONDS = 30.0
"""Wall seconds the server spends reading one probe body; a body not in by then is answered 408."""

PROBE_PER_PEER = 6
"""Probes one peer host may send within :data:`PROBE_WINDOW_S` (a miner's start sends one per validator)."""

PROBE_WINDOW_S = 60.0
"""The window of :data:`PROBE_PER_PEER`."""

PROBE_CONCURRENT = 4
"""Probes read at once, by all peers together."""

PROBE_MAX_PEERS = 4096
"""Peer hosts the limiter remembers; past it, probes from a host it does not know are refused."""

_CHUNK = 64 << 10


class LinkProbeError(ProtocolError):
    """A probe could not be made or its answer is malformed."""


@dataclass
class ProbeLimiter:
    """At most :data:`PROBE_PER_PEER` probes a peer host per :data:`PROBE_WINDOW_S` and
    :data:`PROBE_CONCURRENT` at once; memory bounded by :data:`PROBE_MAX_PEERS` hosts."""

    per_peer: int = PROBE_PER_PEER
    window_s: float = PROBE_WINDOW_S
    concurrent: int = PROBE_CONCURRENT
    max_peers: int = PROBE_MAX_PEERS
    clock: Callable[[], float] = time.monotonic
    _seen: dict[str, deque[float]] = field(default_factory=dict, init=False)
    _active: int = field(default=0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def acquire(self, peer: str) -> float:
        """Take a slot for ``peer``: 0.0 when taken (call :meth:`release` after), else the seconds to wait."""
        now = self.clock()
        with self._lock:
            for host in [h for h, q in self._seen.items() if not q or now - q[-1] >= self.window_s]:
                del self._seen[host]
            if self._active >= self.concurrent:
                return 1.0
            q = self._seen.get(peer)
            if q is None:
                if len(self._seen) >= self.max_peers:
                    return self.window_s
                q = self._seen[peer] = deque()
            while q and now - q[0] >= self.window_s:
                q.popleft()
            if len(q) >= self.per_peer:
                return max(0.001, self.window_s - (now - q[0]))
            q.append(now)
            self._active += 1
            return 0.0

    def release(self) -> None:
        """Give back a slot :meth:`acquire` took."""
        with self._lock:
            self._active = max(0, self._active - 1)


_ERROR = {"application/json": {"schema": {"type": "object", "properties": {"detail": {"type": "string"}}}}}

_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "bytes": {"type": "integer"},
                        "seconds": {"type": "number"},
                        "max_bytes": {"type": "integer"},
                    },
                    "required": ["bytes", "seconds", "max_bytes"],
                }
            }
        }
    },
    408: {"description": f"the body took longer than {PROBE_MAX_SECONDS:g} s", "content": _ERROR},
    413: {"description": f"the body is larger than {PROBE_MAX_BYTES} bytes", "content": _ERROR},
    429: {"description": "too many probes from this peer or at once; retry after", "content": _ERROR},
}
"""The probe's answers, for the OpenAPI document."""


def mount_link_probe(app: FastAPI, limiter: ProbeLimiter | None = None) -> ProbeLimiter:
    """Add ``POST /link/probe`` to a node's app; returns its limiter."""
    lim = limiter or ProbeLimiter()

    @app.post(
        PROBE_PATH,
        summary="Upload probe: the bytes of the body received and the seconds they took (body discarded)",
        openapi_extra={
            "requestBody": {
                "required": False,
                "description": f"any bytes, at most {PROBE_MAX_BYTES}; read and discarded",
                "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
            }
        },
        responses=_RESPONSES,
    )
    async def link_probe(request: Request) -> dict[str, Any]:
        """Read and discard the body, timed from the start of this handler: ``bytes`` received and
        ``seconds`` they took, so the sender knows its upload rate to this node."""
        start = time.perf_counter()
        announced = request.headers.get("content-length", "")
        if announced.isdigit() and int(announced) > PROBE_MAX_BYTES:
            raise HTTPException(413, f"a probe is at most {PROBE_MAX_BYTES} bytes", {"Connection": "close"})
        peer = request.client.host if request.client is not None else "?"
        wait = lim.acquire(peer)
        if wait > 0:
            raise HTTPException(
                429, "too many link probes; retry later", {"Retry-After": str(max(1, round(wait)))}
            )
        try:
            n = await asyncio.wait_for(_drain(request), PROBE_MAX_SECONDS)
        except TimeoutError as exc:
            raise HTTPException(
                408, f"the probe took over {PROBE_MAX_SECONDS:g} s", {"Connection": "close"}
            ) from exc
        finally:
            lim.release()
        if n < 0:
            raise HTTPException(413, f"a probe is at most {PROBE_MAX_BYTES} bytes", {"Connection": "close"})
        return {"bytes": n, "seconds": time.perf_counter() - start, "max_bytes": PROBE_MAX_BYTES}

    return lim


async def _drain(request: Request) -> int:
    """Bytes of the body, read and dropped; -1 as soon as they exceed :data:`PROBE_MAX_BYTES`."""
    n = 0
    async for chunk in request.stream():
        n += len(chunk)
        if n > PROBE_MAX_BYTES:
            return -1
    return n


@dataclass(frozen=True)
class ProbeResult:
    """One probe of one peer."""

    url: str
    sent: int
    """Bytes the probe's body held."""
    received: int
    """Bytes the peer says it received."""
    seconds: float
    """Seconds the peer says they took to arrive."""
    wall_s: float
    """Seconds the whole request took here (connection and answer included)."""
    timed_out: bool = False
    """The body was not sent within the wall limit: :attr:`mbit_s` is an upper bound."""

    @property
    def mbit_s(self) -> float:
        """The upload rate the probe measured (megabits per second)."""
        secs = self.wall_s if self.timed_out else self.seconds
        return 8 * self.received / max(secs, 1e-6) / 1e6


class _Late(Exception):
    """The probe body passed its wall limit while being sent."""


def probe_upload(url: str, nbytes: int, wall_s: float, connect_s: float = 5.0) -> ProbeResult:
    """``POST {url}/link/probe`` with ``nbytes`` random bytes (at most :data:`PROBE_MAX_BYTES`), given up
    after ``wall_s`` seconds of sending (then the result is an upper bound, ``timed_out``).
    :class:`LinkProbeError` when the peer cannot be reached, refuses, or answers nonsense."""
    nbytes = max(1, min(int(nbytes), PROBE_MAX_BYTES))
    data = os.urandom(nbytes)  # incompressible: no middlebox shrinks it
    t0 = time.perf_counter()
    deadline = t0 + wall_s
    sent = 0

    def body() -> Iterator[bytes]:
        nonlocal sent
        for i in range(0, nbytes, _CHUNK):
            if time.perf_counter() > deadline:
                raise _Late()
            chunk = data[i : i + _CHUNK]
            yield chunk
            sent += len(chunk)

    target = f"{url.rstrip('/')}{PROBE_PATH}"
    timeout = httpx.Timeout(wall_s, connect=min(connect_s, wall_s))
    try:
        with new_client() as client:
            resp = client.post(
                target,
                content=body(),
                headers={"content-length": str(nbytes), "content-type": "application/octet-stream"},
                timeout=timeout,
            )
    except (_Late, httpx.WriteTimeout, httpx.ReadTimeout) as exc:
        # sending past the limit, or sent (into this host's socket buffers) and not answered in time
        if sent == 0:
            raise LinkProbeError(f"{target}: nothing sent within {wall_s:g} s") from exc
        return ProbeResult(url, nbytes, sent, wall_s, time.perf_counter() - t0, timed_out=True)
    except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as exc:
        if isinstance(exc.__cause__, _Late) or isinstance(exc.__context__, _Late):
            return ProbeResult(url, nbytes, sent, wall_s, time.perf_counter() - t0, timed_out=True)
        raise LinkProbeError(f"{target}: {type(exc).__name__}: {exc}") from exc
    wall = time.perf_counter() - t0
    if resp.status_code != 200:
        raise LinkProbeError(f"{target}: HTTP {resp.status_code} {resp.text[:200]}")
    try:
        doc = resp.json()
        received, seconds = int(doc["bytes"]), float(doc["seconds"])
    except (ValueError, KeyError, TypeError) as exc:
        raise LinkProbeError(f"{target}: not a probe answer: {resp.text[:200]!r}") from exc
    if received != nbytes or not 0 <= seconds <= wall + 1.0:
        raise LinkProbeError(f"{target}: answered {received} bytes in {seconds} s for {nbytes} sent")
    return ProbeResult(url, nbytes, received, seconds, wall)
