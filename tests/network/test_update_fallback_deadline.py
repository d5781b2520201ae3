"""The validator's fallback fetch of ``/updates/{p}/{miner}`` is bounded in wall time and bytes (issue 11).

It used ``httpx.stream`` with only a per-read timeout: a peer that drips one byte every 0.2 s held the
validator for as long as it liked. Now it goes through ``protocol.p2p.transfer.get_capped``.
The validator here is the intake's real method on a stand-in ``self`` holding only what the method reads.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest

from validator.intake import Intake

MINER = "0x" + "ab" * 20
UPDATE = b"u" * 1000


def _drip_server(body_bytes: int, every: float) -> tuple[str, threading.Event, socket.socket]:
    """A peer answering 200 with a large Content-Length, then one body byte every ``every`` seconds."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.recv(4096)
            conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {body_bytes}\r\n\r\n".encode())
            for _ in range(body_bytes):
                if stop.wait(every):
                    return
                try:
                    conn.sendall(b"x")
                except OSError:
                    return

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}", stop, srv


@pytest.fixture
def dripper() -> Iterator[str]:
    # 100 bytes at 0.2 s each: 20 s in all, far past the 1 s fetch timeout, each read well within it
    url, stop, srv = _drip_server(100, 0.2)
    yield url
    stop.set()
    srv.close()


@pytest.fixture
def honest() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != f"/updates/5/{MINER}":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(UPDATE)))
            self.end_headers()
            self.wfile.write(UPDATE)

        def log_message(self, *_a: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _validator(peers: list[str], kept: list[bytes]) -> Any:
    conn = SimpleNamespace(
        state=SimpleNamespace(verdict=lambda _p, _m: None),
        discovery=SimpleNamespace(find=lambda _r, fresh=False, want=None: []),
        cfg=SimpleNamespace(
            peer_urls=tuple(peers), fetch_timeout=1.0, verify=SimpleNamespace(max_update_bytes=1 << 20)
        ),
        url="http://127.0.0.1:1",
        address="0x" + "cd" * 20,
        fetch_policy=None,
    )
    return SimpleNamespace(
        conn=conn,
        matches_commitment=lambda _p, _m, _c, data: data == UPDATE,
        keep_update=lambda _p, _m, data: kept.append(data),
    )


def test_dripping_peer_is_cut_off_and_the_next_peer_serves(dripper: str, honest: str) -> None:
    kept: list[bytes] = []
    t0 = time.monotonic()
    got = Intake.fetch_missing_update(_validator([dripper, honest], kept), 5, MINER, b"c" * 32)
    took = time.monotonic() - t0
    assert got == UPDATE and kept == [UPDATE]
    assert took < 5.0, f"the dripping peer held the validator {took:.1f}s"


def test_oversize_update_refused(honest: str) -> None:
    kept: list[bytes] = []
    v = _validator([honest], kept)
    v.conn.cfg.verify.max_update_bytes = len(UPDATE) - 1
    assert Intake.fetch_missing_update(v, 5, MINER, b"c" * 32) is None
    assert kept == []
