"""``slow-certificate`` (issue 35 item 4), the parts that run without a devnet: it is registered with its
settings, and its proxy rule holds a ``certify`` transaction (answering with its hash, showing it
pending, sending it on after the hold) while every other request passes (the devnet run is
``tessera faults slow-certificate``)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from eth_account import Account
from eth_utils import keccak

from tessera.devnet.faults import SCENARIOS
from tessera.devnet.faults.base import Scenario
from tessera.devnet.faults.slowcert import HOLD_S, CertifyHold, SlowCertificate, certify_selectors
from tessera.devnet.proxy import FaultProxy, ProxyMode

KEY = Account.create()


class _Rpc(BaseHTTPRequestHandler):
    """A stand-in node: records every JSON-RPC method it is sent and answers ``result: "node"``."""

    seen: list[tuple[float, str, Any]] = []

    def do_POST(self) -> None:  # http.server's name
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Rpc.seen.append((time.monotonic(), req["method"], req.get("params")))
        body = json.dumps({"jsonrpc": "2.0", "id": req.get("id"), "result": "node"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def front() -> Iterator[tuple[FaultProxy, CertifyHold]]:
    """A proxy in ``rule`` mode, holding certify transactions 1.5 s, in front of a stand-in node."""
    _Rpc.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Rpc)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    proxy = FaultProxy("rpc").start()
    proxy.set_target(server.server_address[1])
    rule = CertifyHold(certify_selectors(), 1.5, proxy.post)
    proxy.rule = rule
    proxy.set_mode(ProxyMode.RULE)
    yield proxy, rule
    proxy.stop()
    server.shutdown()


def _raw(data: bytes, nonce: int = 7) -> str:
    tx = {
        "to": "0x" + "22" * 20,
        "value": 0,
        "gas": 300_000,
        "maxFeePerGas": 3 * 10**9,
        "maxPriorityFeePerGas": 10**9,
        "nonce": nonce,
        "chainId": 31337,
        "data": data,
    }
    return "0x" + bytes(KEY.sign_transaction(tx).raw_transaction).hex()


def _call(url: str, method: str, params: list[Any]) -> Any:
    got = httpx.post(url, json={"jsonrpc": "2.0", "id": 5, "method": method, "params": params}, timeout=10)
    return got.json()


def test_slow_certificate_is_registered_as_a_class() -> None:
    sc = SCENARIOS["slow-certificate"]
    assert isinstance(sc, SlowCertificate) and isinstance(sc, Scenario)
    assert (sc.block_time, sc.fast_forward, sc.windows) == (2.0, False, (30, 10, 40, 8))
    assert HOLD_S == 30.0
    assert all(type(s) is not Scenario for s in SCENARIOS.values())  # every scenario carries its behaviour


def test_certify_selectors_are_the_abis() -> None:
    sels = certify_selectors()
    assert keccak(text="certifyCheckpointEcdsa(uint256,bytes32,bytes[])")[:4] in sels
    assert len(sels) == 2


def test_rule_holds_a_certify_transaction_and_passes_others(front: tuple[FaultProxy, CertifyHold]) -> None:
    proxy, rule = front
    other = _raw(keccak(text="advance()")[:4], nonce=6)
    assert _call(proxy.url, "eth_sendRawTransaction", [other])["result"] == "node"  # passed at once
    assert _call(proxy.url, "eth_blockNumber", [])["result"] == "node"
    sel = keccak(text="certifyCheckpointEcdsa(uint256,bytes32,bytes[])")[:4]
    raw = _raw(sel + bytes(96))
    t0 = time.monotonic()
    h = _call(proxy.url, "eth_sendRawTransaction", [raw])["result"]
    assert h == "0x" + keccak(bytes.fromhex(raw[2:])).hex()  # the hash, as a node answers a pooled tx
    assert _call(proxy.url, "eth_sendRawTransaction", [raw])["result"] == h  # a resend: held once
    pending = _call(proxy.url, "eth_getTransactionByHash", [h])["result"]
    assert pending["blockNumber"] is None and int(pending["nonce"], 16) == 7
    assert pending["from"] == KEY.address
    assert [m for _, m, _ in _Rpc.seen] == ["eth_sendRawTransaction", "eth_blockNumber"]  # not sent yet
    deadline = time.monotonic() + 10
    while rule.held[h].sent_at is None and time.monotonic() < deadline:
        time.sleep(0.05)
    sent = [(t, p) for t, m, p in _Rpc.seen if m == "eth_sendRawTransaction" and p == [raw]]
    assert len(sent) == 1 and sent[0][0] - t0 >= 1.4  # sent on once, after the hold
    assert rule.held[h].answer == '"node"'
    assert _call(proxy.url, "eth_getTransactionByHash", [h])["result"] == "node"  # the node's again
    assert proxy.stats.answered == 3
