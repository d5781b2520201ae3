"""A peer that trickles bytes must not hold a fetch past its deadline (issue 6, faults: a stalling peer).

Before the deadline existed, ``fetch_blob`` only had httpx's per-read timeout: a peer sending one byte of
its response headers every 0.2 s kept a 1 s timeout from ever firing, and the caller (a validator
verifying its miners) hung for as long as the peer liked.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from protocol.p2p.blobs import FetchTimeoutError
from protocol.p2p.transfer import FetchPolicy, fetch_blob, stalled_recently

DIGEST = "0x" + "00" * 32


@pytest.fixture
def trickler() -> Iterator[str]:
    """An HTTP 'server' that answers every request one header byte every 0.2 s, forever."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.recv(4096)
            for b in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10_000:
                if stop.is_set():
                    return
                try:
                    conn.sendall(bytes([b]))
                except OSError:
                    return
                time.sleep(0.2)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    stop.set()
    srv.close()


def test_trickling_peer_is_abandoned_at_the_deadline(trickler: str) -> None:
    t0 = time.monotonic()
    with pytest.raises(FetchTimeoutError, match="stalling peer|deadline"):
        fetch_blob(trickler, DIGEST, policy=FetchPolicy(timeout=1.0, attempts=2, backoff=0.05, deadline=2.0))
    took = time.monotonic() - t0
    assert took < 2.5, took  # 1 s per attempt, not the peer's pace (10,000 bytes at 5 per second)


def test_a_staller_costs_one_timeout_then_is_skipped(trickler: str) -> None:
    pol = FetchPolicy(timeout=0.5, attempts=3, backoff=0.01)
    assert pol.budget() == 1.5
    t0 = time.monotonic()
    with pytest.raises(FetchTimeoutError):
        fetch_blob(trickler, DIGEST, policy=pol)
    assert time.monotonic() - t0 < 1.2  # one attempt's wall-clock limit; the retries skip it
    assert stalled_recently(trickler)
    t1 = time.monotonic()
    with pytest.raises(FetchTimeoutError, match="skipped"):
        fetch_blob(trickler, "0x" + "11" * 32, policy=pol)
    assert time.monotonic() - t1 < 0.3  # the next blob from the same peer fails fast during the cooldown


def test_small_get_from_a_trickling_peer_is_cut_at_its_timeout(trickler: str) -> None:
    """``get_capped`` (a peer validator's certificate signature) has the same wall-clock limit."""
    from protocol.p2p.transfer import get_capped

    t0 = time.monotonic()
    with pytest.raises(FetchTimeoutError, match="stalling peer"):
        get_capped(f"{trickler}/signatures/3", max_bytes=4096, timeout=1.0)
    assert time.monotonic() - t0 < 3.0
