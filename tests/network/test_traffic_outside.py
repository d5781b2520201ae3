"""Issue 26's outside count (benchmarks/traffic_watch.py): each direction of a connection is counted from
whichever end's kernel counters survived, and put under the role listening on the server port; and the
ledger's count of an HTTP exchange is what the wire carries (real uvicorn, a raw socket client)."""

from __future__ import annotations

import os
import socket
import time

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from benchmarks.traffic_watch import flows, split
from protocol.chain.endpoint import http_web3
from protocol.node.api import NodeServer
from protocol.node.sockstats import TcpSocket, dump_tcp, socket_inodes
from protocol.node.traffic import Kind, TrafficLedger, TrafficMiddleware
from protocol.node.trafficsums import kind_totals, merge_ledgers
from protocol.rounds.anvil import Anvil

ANVIL = ("127.0.0.1", 8545)
MINER = ("127.0.0.1", 40000)


def sock(cookie: int, local: tuple[str, int], remote: tuple[str, int], sent: int, received: int) -> TcpSocket:
    return TcpSocket(0, cookie, local, remote, 1, sent, received, 0, 0)


def test_a_direction_is_counted_from_the_end_whose_counters_survived() -> None:
    client = sock(1, MINER, ANVIL, sent=1_002, received=500)  # acknowledged: 1,000 + the SYN + the FIN
    server = sock(2, ANVIL, ("127.0.0.1", 0), sent=0, received=0)  # closed with SO_LINGER 0: zeroed
    moved, roles = flows([client, server], {1: "miner"})
    assert moved == {(MINER, ANVIL): 1_000, (ANVIL, MINER): 500}
    assert roles == {(MINER, ANVIL): "miner"}
    assert split(moved, roles, {8545: "anvil"}) == {"anvil": {"bytes": 1_500, "by_client": {"miner": 1_500}}}


def test_both_ends_counted_agree_and_a_peer_to_peer_link_goes_under_the_lower_port() -> None:
    a, b = ("127.0.0.1", 4001), ("127.0.0.1", 4002)
    ends = [sock(1, a, b, sent=302, received=700), sock(2, b, a, sent=702, received=300)]
    moved, roles = flows(ends, {1: "dht", 2: "dht"})
    assert moved == {(a, b): 300, (b, a): 700}
    assert split(moved, roles, {4001: "dht", 4002: "dht"}) == {
        "dht": {"bytes": 1_000, "by_client": {"dht": 1_000}}
    }


def _exchange(url: str, request: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(request)
        got = b""
        while chunk := s.recv(1 << 16):
            got += chunk
    return got


def test_the_ledger_counts_an_http_exchange_as_the_wire_carries_it() -> None:
    """Every byte of each exchange (request line, headers, blank line, body; the status line, the app's and
    the server's headers, chunked framing, body) as a raw client sends and receives it, to the byte."""
    app = FastAPI()

    @app.get("/status")
    def status() -> dict[str, str]:
        return {"phase": "commit", "pad": "x" * 300}

    @app.get("/stream")
    def stream() -> StreamingResponse:
        return StreamingResponse(iter([b"z" * 70_000, b"y" * 5, b""]))

    @app.post("/records/{r}")
    async def post(r: int, request: Request) -> dict[str, int]:
        return {"got": len(await request.body())}

    ledger = TrafficLedger()
    app.add_middleware(TrafficMiddleware, ledger=ledger, blob=lambda _d: Kind.OTHER)
    server = NodeServer(app, "127.0.0.1", 0).start()
    try:
        for request in (
            b"GET /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            b"GET /stream?reader=me HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            b"GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            b"POST /records/3 HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\nConnection: close\r\n\r\n123456789",
        ):
            before = sum(kind_totals(merge_ledgers([ledger.to_json()])).values())
            answer = _exchange(server.url, request)
            deadline = time.monotonic() + 5  # the server counts an exchange once its response has gone out
            while sum(kind_totals(merge_ledgers([ledger.to_json()])).values()) == before:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            counted = sum(kind_totals(merge_ledgers([ledger.to_json()])).values()) - before
            assert counted == len(request) + len(answer), (request, answer[:300])
    finally:
        server.stop()


def test_the_ledger_counts_a_json_rpc_exchange_as_the_wire_carries_it() -> None:
    """Web3's JSON-RPC through the counting session against a real anvil: the ledger's bytes both ways
    are what the kernel's counters of the client's socket say went over it, to the byte."""
    anvil = Anvil().start()
    try:
        ledger = TrafficLedger()
        w3 = http_web3(anvil.rpc_url, 10, ledger)
        for _ in range(5):
            assert w3.eth.get_block("latest")["number"] >= 0
        port = int(anvil.rpc_url.rsplit(":", 1)[1])
        mine = socket_inodes(os.getpid())
        conns = [s for s in dump_tcp() if s.inode in mine and s.remote[1] == port]
        assert conns, "the session's keep-alive connection to anvil"
        rpc = ledger.to_json()["0"]["rpc"]
        # each connection's SYN is acknowledged too
        assert rpc["sent"] + rpc["sent_overhead"] == sum(c.sent - 1 for c in conns)
        assert rpc["received"] + rpc["received_overhead"] == sum(c.received for c in conns)
    finally:
        anvil.stop()
