"""The validator's upload probe (``POST /link/probe``, ``protocol.p2p.linkprobe``), on a real validator node
started with its own ``start()``: it reads and discards a bounded body and says how many bytes arrived in
how many seconds; a larger declared body is refused 413 before any of it is read; one peer host's probes
are rate-limited (429)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from eth_account import Account

from protocol.p2p.discovery import Discovery
from protocol.p2p.linkprobe import (
    PROBE_MAX_BYTES,
    PROBE_PATH,
    PROBE_PER_PEER,
    LinkProbeError,
    ProbeLimiter,
    probe_upload,
)
from protocol.rounds.memcoordinator import MemoryCoordinator, MemoryLedger
from protocol.runspec import RunSpec
from validator.config import ValidatorConfig
from validator.node import ValidatorNode

KEY = "0x" + f"{61:064x}"


@pytest.fixture
def validator(tmp_path: Path) -> Iterator[ValidatorNode]:
    v = ValidatorNode(
        ValidatorConfig(data_dir=tmp_path / "v", threads=1, dht=False),
        RunSpec(),
        MemoryCoordinator(MemoryLedger(b"\x01" * 32), Account.from_key(KEY).address),
        Discovery(31337, KEY),
        KEY,
    ).start()
    try:
        yield v
    finally:
        v.stop()


def test_the_probe_reads_a_bounded_body_and_says_its_size_and_time(validator: ValidatorNode) -> None:
    body = b"\x5a" * (1 << 20)
    resp = httpx.post(f"{validator.url}{PROBE_PATH}", content=body, timeout=10)
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert doc["bytes"] == len(body) and doc["max_bytes"] == PROBE_MAX_BYTES
    assert 0 < doc["seconds"] < 10

    r = probe_upload(validator.url, 256 << 10, wall_s=10)  # the client the miners use
    assert r.received == r.sent == 256 << 10 and not r.timed_out and r.mbit_s > 0

    spec = httpx.get(f"{validator.url}/openapi.json", timeout=10).json()
    op = spec["paths"][PROBE_PATH]["post"]
    assert {"200", "408", "413", "429"} <= set(op["responses"])
    assert "application/octet-stream" in op["requestBody"]["content"]


def test_a_larger_declared_body_is_refused_413_before_it_is_read(validator: ValidatorNode) -> None:
    u = urlsplit(validator.url)
    with socket.create_connection((u.hostname or "127.0.0.1", u.port or 80), timeout=10) as s:
        s.sendall(
            f"POST {PROBE_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Length: {PROBE_MAX_BYTES + 1}\r\n\r\n".encode()
        )
        # not one byte of the body sent: the answer comes anyway, so the server did not wait to read it
        answer = s.recv(4096).decode("latin-1")
    assert answer.startswith("HTTP/1.1 413"), answer
    assert "at most" in answer

    # a body without a declared length is cut off as soon as it passes the bound
    def chunks() -> Iterator[bytes]:
        for _ in range(PROBE_MAX_BYTES // (1 << 20) + 2):
            yield b"\0" * (1 << 20)

    try:
        resp = httpx.post(f"{validator.url}{PROBE_PATH}", content=chunks(), timeout=10)
        assert resp.status_code == 413
    except httpx.HTTPError:
        pass  # the server may close the connection before the client has sent the rest: also refused


def test_one_peer_is_rate_limited(validator: ValidatorNode) -> None:
    codes = [
        httpx.post(f"{validator.url}{PROBE_PATH}", content=b"x" * 1000, timeout=10).status_code
        for _ in range(PROBE_PER_PEER + 1)
    ]
    assert codes[:PROBE_PER_PEER] == [200] * PROBE_PER_PEER
    assert codes[-1] == 429
    resp = httpx.post(f"{validator.url}{PROBE_PATH}", content=b"x", timeout=10)
    assert resp.status_code == 429 and int(resp.headers["retry-after"]) >= 1
    with pytest.raises(LinkProbeError, match="429"):
        probe_upload(validator.url, 1000, wall_s=5)


def test_the_limiter_counts_per_peer_and_at_once_and_forgets() -> None:
    now = [0.0]
    lim = ProbeLimiter(per_peer=2, window_s=60, concurrent=2, max_peers=2, clock=lambda: now[0])
    assert lim.acquire("a") == 0.0
    assert lim.acquire("a") == 0.0
    assert lim.acquire("b") > 0, "two probes at once already"
    lim.release()
    lim.release()
    assert lim.acquire("a") > 0, "a's two probes of the window are spent"
    assert lim.acquire("b") == 0.0
    lim.release()
    assert lim.acquire("c") > 0, "no room for a third peer"
    now[0] = 61.0
    assert lim.acquire("c") == 0.0 and lim.acquire("a") == 0.0, "the window passed: forgotten"
