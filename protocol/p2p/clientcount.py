"""What this process's HTTP clients move: every exchange a node makes as a client, counted where it is made.

A node's server counts what it serves (``protocol.node.traffic.TrafficMiddleware``), so a network's sum over
its servers counts each transfer once. A node's own bandwidth is that plus what it fetched and posted as a
client: a validator fetching every miner's transcript states moves megabytes its server never sees.
:class:`CountingTransport` wraps the transport of every client ``protocol.p2p.transfer.new_client`` makes
and reports each exchange, request and response as the wire carries them (request line, headers and body;
status line, headers and body), to the counter a node process registered with :func:`count_client_http`.
Nothing is counted until one is registered (a process running several in-process nodes registers none).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import httpx

#: A client exchange: (request path, the first bytes of the response body, bytes sent, bytes received).
ClientCounter = Callable[[str, bytes, int, int], None]

#: Bytes of a response body kept to tell its kind (a safetensors header names its tensors).
HEAD_BYTES = 1 << 16

_counter: ClientCounter | None = None
_lock = threading.Lock()


def count_client_http(counter: ClientCounter | None) -> None:
    """Report every HTTP exchange this process's clients make to ``counter`` from now on (None: stop)."""
    global _counter
    with _lock:
        _counter = counter


def client_counter() -> ClientCounter | None:
    """The registered counter, if any."""
    return _counter


def _header_bytes(headers: httpx.Headers) -> int:
    return sum(len(k) + len(v) + 4 for k, v in headers.raw)  # "k: v\r\n"


def request_bytes(request: httpx.Request) -> int:
    """A request on the wire: ``METHOD target HTTP/1.1\\r\\n``, its headers, the blank line and its body."""
    body = request.content if isinstance(request.stream, httpx.ByteStream) else b""
    target = request.url.raw_path
    return len(request.method) + 1 + len(target) + 11 + _header_bytes(request.headers) + 2 + len(body)


class _CountingStream(httpx.SyncByteStream):
    """A response body that counts what is read of it and reports the exchange once, when closed."""

    def __init__(self, inner: httpx.SyncByteStream, report: Callable[[bytes, int], None]) -> None:
        self._inner = inner
        self._report = report
        self._head = bytearray()
        self._n = 0
        self._done = False

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            self._n += len(chunk)
            if len(self._head) < HEAD_BYTES:
                self._head += chunk[: HEAD_BYTES - len(self._head)]
            yield chunk

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            if not self._done:
                self._done = True
                self._report(bytes(self._head), self._n)


class CountingTransport(httpx.BaseTransport):
    """An HTTP transport that reports each exchange to a :data:`ClientCounter`."""

    def __init__(self, inner: httpx.BaseTransport, counter: ClientCounter) -> None:
        self._inner = inner
        self._counter = counter

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` through the wrapped transport; the exchange is reported when the body closes."""
        sent = request_bytes(request)
        path = request.url.path
        try:
            resp = self._inner.handle_request(request)
        except Exception:
            self._counter(path, b"", sent, 0)  # refused or cut: the request's bytes may have left
            raise
        status = (
            len(f"HTTP/1.1 {resp.status_code} {resp.reason_phrase}\r\n") + _header_bytes(resp.headers) + 2
        )
        assert isinstance(resp.stream, httpx.SyncByteStream)

        def report(head: bytes, body: int) -> None:
            self._counter(path, head, sent, status + body)

        return httpx.Response(
            resp.status_code,
            headers=resp.headers,
            stream=_CountingStream(resp.stream, report),
            extensions=resp.extensions,
            request=request,
        )

    def close(self) -> None:
        """Close the wrapped transport."""
        self._inner.close()
