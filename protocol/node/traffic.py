"""The traffic ledger: every byte a node moves, by round and kind.

Each node keeps a :class:`TrafficLedger`. Its HTTP server counts every request it answers
(:class:`TrafficMiddleware`: bodies and header bytes, in and out, by what the path and the blob hold) and
its chain client counts every JSON-RPC exchange (:func:`rpc_session`), each as the wire carries it: the
headers the server or ``http.client`` add, blank lines and chunked framing included (held to the
byte against the kernel's counters, ``benchmarks/traffic_outside.py``). Node-to-node transfers are counted
once, by the node that serves them: every HTTP transfer between Tessera nodes has a Tessera node as its
server, so the sum of ``sent`` + ``received`` over all nodes' non-RPC kinds is the network's HTTP traffic,
and the RPC kind is each node's own traffic with its chain endpoint. The DHT (hivemind's own transport;
records go over HTTP too, where they are counted) is read from the kernel's counters of the daemon's
sockets, each byte once, by the node whose daemon received it (:mod:`protocol.node.dhttraffic`). What is
not counted: TCP/IP headers (52 bytes a packet on a loopback) and TLS framing, and HTTP requests that
never reach a handler (refused connections).

The devnet report adds the ledgers up per round and divides by the trained parameters and inner steps:
bits per trained parameter per inner step, budgeted at 0.05 (docs/decisions/traffic-budget.md).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from enum import StrEnum
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

import requests

#: Bytes of a blob read to tell its kind (a safetensors header names every tensor; the update magic is 8).
SNIFF_BYTES = 1 << 16
#: Rounds a ledger keeps (older rounds are dropped, so a long-running node's ledger stays bounded).
KEEP_ROUNDS = 256


class Kind(StrEnum):
    """What the bytes were, as the ledger and the devnet report name them."""

    UPDATE = "update"  # compressed update messages (and validators' cached copies)
    STATE = "state"  # transcript states (replayed segments' starting points)
    RESIDUAL = "residual"  # error-feedback residuals (the exact-recompute check)
    TRANSCRIPT = "transcript"  # a transcript's per-step digests (what the update's transcript.root names)
    CHECKPOINT = "checkpoint"  # theta_r (params + outer momentum)
    EVIDENCE = "evidence"  # TEE attestation evidence
    SIGNATURE = "signature"  # validators' BLS signatures of the merged checkpoint
    VERDICT = "verdict"  # validators' verdicts (slashing evidence)
    RECORD = "record"  # discovery records over HTTP
    RPC = "rpc"  # JSON-RPC with the chain endpoint
    DHT = "dht"  # what the node's DHT daemon received (its sockets' kernel counters: dhttraffic)
    API = "api"  # status, metrics, docs, live pages: operators' reads, not the protocol
    OTHER = "other"  # a blob whose kind the server cannot tell, any other path

    @property
    def protocol(self) -> bool:
        """Whether the kind is part of the training protocol's traffic (what the figure counts)."""
        return self is not Kind.API


#: The fields of one (round, kind) entry: bodies, and the header bytes around them ("overhead").
FIELDS = ("sent", "received", "sent_overhead", "received_overhead")


class TrafficLedger:
    """Thread-safe byte counters per round and :class:`Kind`; ``round`` is what new bytes count towards
    (the node sets it from the chain at each step)."""

    def __init__(self, keep_rounds: int = KEEP_ROUNDS) -> None:
        self.round = 0
        self._keep = keep_rounds
        self._lock = threading.Lock()
        self._rows: dict[int, dict[Kind, dict[str, int]]] = {}
        self._calls: dict[int, dict[str, int]] = {}
        self._call_bytes: dict[int, dict[str, int]] = {}
        self._client: dict[int, dict[Kind, dict[str, int]]] = {}
        self.on_add: Callable[[Kind, str, int], None] | None = None
        """Called with (kind, field, bytes) for each non-zero count (e.g. a Prometheus counter)."""
        self.on_call: Callable[[str], None] | None = None
        """Called with the label of each JSON-RPC request :meth:`add_call` counts."""

    def add(self, kind: Kind, *, round: int | None = None, **counts: int) -> None:
        """Count bytes of ``kind`` (``sent=``, ``received=``, ``sent_overhead=``, ``received_overhead=``)."""
        bad = set(counts) - set(FIELDS)
        if bad:
            raise ValueError(f"unknown traffic fields {sorted(bad)}")
        r = self.round if round is None else round
        with self._lock:
            row = self._rows.setdefault(r, {}).setdefault(kind, dict.fromkeys(FIELDS, 0))
            for f, n in counts.items():
                row[f] += max(0, int(n))
            if len(self._rows) > self._keep:
                for old in sorted(self._rows)[: len(self._rows) - self._keep]:
                    del self._rows[old]
        if self.on_add is not None:
            for f, n in counts.items():
                if n > 0:
                    self.on_add(kind, f, int(n))

    def count_client(self, path: str, head: bytes, sent: int, received: int) -> None:
        """Count one HTTP exchange this node made as a client (``protocol.p2p.clientcount``): ``sent`` and
        ``received`` as the wire carried them, the kind told by the path or the response's first bytes.
        Kept apart from the served rows: each such exchange is also in its server's ledger."""
        kind = blob_kind(head) if path.startswith("/blobs/") else path_kind(path)
        with self._lock:
            row = self._client.setdefault(self.round, {}).setdefault(kind, {"sent": 0, "received": 0})
            row["sent"] += max(0, int(sent))
            row["received"] += max(0, int(received))
            if len(self._client) > self._keep:
                for old in sorted(self._client)[: len(self._client) - self._keep]:
                    del self._client[old]
        if self.on_add is not None:
            for f, n in (("client_sent", sent), ("client_received", received)):
                if n > 0:
                    self.on_add(kind, f, int(n))

    def client_json(self) -> dict[str, dict[str, dict[str, int]]]:
        """``{round: {kind: {sent, received}}}`` of :meth:`count_client` (headers included)."""
        with self._lock:
            return {
                str(r): {k.value: dict(v) for k, v in sorted(kinds.items())}
                for r, kinds in sorted(self._client.items())
            }

    def node_json(self) -> dict[str, dict[str, int]]:
        """``{round: {sent, received}}``: every byte this node moved, headers included: what it served,
        what it fetched and posted as a client, its JSON-RPC and what its DHT daemon received (the figure
        to size a node's bandwidth by)."""
        with self._lock:
            out: dict[str, dict[str, int]] = {}
            for r in sorted(set(self._rows) | set(self._client)):
                sent = received = 0
                for row in self._rows.get(r, {}).values():
                    sent += row["sent"] + row["sent_overhead"]
                    received += row["received"] + row["received_overhead"]
                for row in self._client.get(r, {}).values():
                    sent += row["sent"]
                    received += row["received"]
                out[str(r)] = {"sent": sent, "received": received}
            return out

    def add_call(self, label: str, nbytes: int = 0) -> None:
        """Count one JSON-RPC request of this round (``label``: the method, ``eth_call:<function>`` for a
        contract read) and the ``nbytes`` it moved (both ways, headers included), so an operator sees which
        reads cost the node's RPC quota and bandwidth."""
        with self._lock:
            for table, n in ((self._calls, 1), (self._call_bytes, max(0, int(nbytes)))):
                row = table.setdefault(self.round, {})
                row[label] = row.get(label, 0) + n
                if len(table) > self._keep:
                    for old in sorted(table)[: len(table) - self._keep]:
                        del table[old]
        if self.on_call is not None:
            self.on_call(label)

    def sent_bytes(self, round: int) -> int:
        """Bytes this node sent in ``round`` over HTTP of the protocol's kinds, headers included (what it
        served its peers: updates, states, checkpoints, records; not RPC, not operators' API reads)."""
        with self._lock:
            kinds = self._rows.get(round, {})
            return sum(
                row["sent"] + row["sent_overhead"]
                for kind, row in kinds.items()
                if kind.protocol and kind is not Kind.RPC
            )

    def calls_json(self) -> dict[str, dict[str, int]]:
        """``{round: {label: requests}}`` of :meth:`add_call` (rounds as strings)."""
        with self._lock:
            return {str(r): dict(sorted(row.items())) for r, row in sorted(self._calls.items())}

    def call_bytes_json(self) -> dict[str, dict[str, int]]:
        """``{round: {label: bytes}}`` of :meth:`add_call`: each label's JSON-RPC bytes, bodies and headers
        both ways."""
        with self._lock:
            return {str(r): dict(sorted(row.items())) for r, row in sorted(self._call_bytes.items())}

    def to_json(self) -> dict[str, dict[str, dict[str, int]]]:
        """``{round: {kind: {field: bytes}}}`` (rounds as strings, as JSON keys are)."""
        with self._lock:
            return {
                str(r): {k.value: dict(v) for k, v in sorted(kinds.items())}
                for r, kinds in sorted(self._rows.items())
            }


def path_kind(path: str) -> Kind:
    """The kind of a request by its path (``/blobs/...`` is told apart by :func:`blob_kind` instead)."""
    first = path.strip("/").split("/", 1)[0]
    return {
        "updates": Kind.UPDATE,
        "states": Kind.STATE,
        "signatures": Kind.SIGNATURE,
        "verdicts": Kind.VERDICT,
        "records": Kind.RECORD,
        "evidence": Kind.EVIDENCE,
    }.get(first, Kind.API)


def blob_kind(head: bytes) -> Kind:
    """The kind of a stored blob from its first bytes: the update magic, or a safetensors header whose
    tensor names say what it holds (``ef/``: a residual; ``transcript/``: a transcript; ``exp_avg``: a transcript state; ``param/`` or
    ``momentum/`` alone: a checkpoint); anything else a miner publishes is attestation evidence."""
    if head.startswith(b"TSRUPD"):
        return Kind.UPDATE
    if len(head) >= 10 and head[8:10] == b'{"':
        if b'"ef/' in head:
            return Kind.RESIDUAL
        if b'"transcript/' in head:
            return Kind.TRANSCRIPT
        if b'"exp_avg' in head:
            return Kind.STATE
        if b'"param/' in head or b'"momentum/' in head:
            return Kind.CHECKPOINT
        return Kind.OTHER
    return Kind.EVIDENCE if head else Kind.OTHER


def _header_bytes(headers: Iterable[tuple[bytes, bytes]]) -> int:
    return sum(len(k) + len(v) + 4 for k, v in headers)  # "k: v\r\n"


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


#: Query parameter an operator's tool adds to a blob fetch so the server counts it as API, not protocol.
OPERATOR_QUERY = "reader=operator"


#: Headers the server (uvicorn) writes into every response that the app's messages do not hold, with their
#: bytes on the wire: ``date: <29 characters>\r\n`` and ``server: uvicorn\r\n`` (measured from
#: outside, 60 bytes of every exchange were in no ledger).
SERVER_HEADERS = {b"date": 37, b"server": 17}


def request_head_bytes(scope: Scope) -> int:
    """An HTTP/1.1 request's line and headers on the wire: ``METHOD /path?query HTTP/1.1\r\n``, the
    headers, the blank line."""
    path = scope.get("raw_path") or str(scope.get("path", "")).encode()
    query = scope.get("query_string", b"")
    line = len(scope.get("method", "")) + len(path) + (len(query) + 1 if query else 0) + 12
    return line + _header_bytes(scope.get("headers", [])) + 2


def response_head_bytes(start: Message, method: str, closing: bool = False) -> tuple[int, bool]:
    """An ASGI response start's status line, headers and blank line on the wire, with the headers the
    server adds (:data:`SERVER_HEADERS`, ``transfer-encoding: chunked`` where the app gives no length,
    ``connection: close`` where the request asked to close); and whether the body goes out chunked."""
    status = int(start.get("status", 200))
    headers = list(start.get("headers", []))
    names = {bytes(k).lower() for k, _ in headers}
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    head = len(f"HTTP/1.1 {status} {phrase}\r\n") + _header_bytes(headers) + 2
    head += sum(n for name, n in SERVER_HEADERS.items() if name not in names)
    chunked = (
        b"content-length" not in names and status >= 200 and status not in (204, 304) and method != "HEAD"
    )
    head += 19 if closing and b"connection" not in names else 0  # "connection: close\r\n"
    return head + (28 if chunked else 0), chunked


class TrafficMiddleware:
    """ASGI middleware counting each HTTP exchange into a ledger: the request (line, headers, body) as
    received and the response (status line, headers, streamed body) as sent, under the request's kind."""

    def __init__(self, app: ASGIApp, ledger: TrafficLedger, blob: Callable[[str], Kind]) -> None:
        self.app = app
        self.ledger = ledger
        self.blob = blob

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        kind = path_kind(path)
        if OPERATOR_QUERY.encode() in scope.get("query_string", b""):
            kind = Kind.API  # an operator's read (a model export, the devnet's samples): not the protocol's
        elif path.startswith("/blobs/"):
            try:
                kind = self.blob(path.removeprefix("/blobs/"))
            except Exception:  # a malformed digest: the route answers 4xx; its bytes count as other
                kind = Kind.OTHER
        counts = dict.fromkeys(FIELDS, 0)
        counts["received_overhead"] = request_head_bytes(scope)
        closing = any(
            k.lower() == b"connection" and b"close" in v.lower() for k, v in scope.get("headers", [])
        )
        chunked = False

        async def counted_receive() -> Message:
            msg = await receive()
            if msg.get("type") == "http.request":
                counts["received"] += len(msg.get("body", b""))
            return msg

        async def counted_send(msg: Message) -> None:
            nonlocal chunked
            if msg.get("type") == "http.response.start":
                head, chunked = response_head_bytes(msg, scope.get("method", "GET"), closing)
                counts["sent_overhead"] += head
            elif msg.get("type") == "http.response.body":
                body = len(msg.get("body", b""))
                counts["sent"] += body
                if chunked:  # "<size hex>\r\n<body>\r\n" per chunk, "0\r\n\r\n" at the end
                    counts["sent_overhead"] += (len(f"{body:x}") + 4 if body else 0) + (
                        0 if msg.get("more_body") else 5
                    )
            await send(msg)

        try:
            await self.app(scope, counted_receive, counted_send)
        finally:
            self.ledger.add(kind, **counts)


def rpc_label(body: bytes | str | None, functions: Mapping[str, str]) -> str:
    """The label a JSON-RPC request is counted under: its method, ``eth_call:<name>`` (and the same for
    ``eth_estimateGas``) where ``functions`` maps the call data's 4-byte selector (``0x`` + 8 hex digits) to a
    function name, ``eth_getLogs:<events>`` where it maps the first topic's event signatures (``0x`` + 64
    hex digits) to event names, ``batch`` for a JSON array, ``?`` for a body that is not a JSON-RPC request."""
    try:
        req = json.loads(body or b"")
    except ValueError:
        return "?"
    if isinstance(req, list):
        return "batch"
    if not isinstance(req, dict) or not isinstance(req.get("method"), str):
        return "?"
    method = str(req["method"])[:64]
    params = req.get("params")
    first = params[0] if isinstance(params, list) and params else None
    if method in ("eth_call", "eth_estimateGas") and isinstance(first, dict):
        data = first.get("data") or first.get("input")
        if isinstance(data, str):
            return f"{method}:{functions.get(data[:10].lower(), data[:10])}"
    if method == "eth_getLogs" and isinstance(first, dict) and isinstance(first.get("topics"), list):
        sig = (first["topics"] or [None])[0]  # the event signature(s): which events the query is for
        sigs = sig if isinstance(sig, list) else [sig]
        if sigs and all(isinstance(t, str) for t in sigs):
            return f"{method}:{','.join(sorted(functions.get(t.lower(), '?') for t in sigs))}"
    return method


def rpc_session(ledger: TrafficLedger, functions: Mapping[str, str] | None = None) -> Any:
    """A ``requests.Session`` that counts every JSON-RPC exchange (body and headers both ways) as
    :attr:`Kind.RPC` in ``ledger``, and each request by :func:`rpc_label` (``functions``: selector ->
    contract function name); pass it to ``web3.HTTPProvider(session=...)``."""
    names = dict(functions or {})

    def count(resp: requests.Response, *_: Any, **__: Any) -> requests.Response:
        req = resp.request
        body = req.body
        raw = body.encode() if isinstance(body, str) else body if isinstance(body, bytes) else b""
        # the wire's request and status lines, headers and blank lines; http.client adds the Host header
        host = 0 if "host" in {k.lower() for k in req.headers} else len(urlsplit(req.url or "").netloc) + 8
        counts = {
            "sent": len(raw),
            "sent_overhead": len(req.method or "")
            + len(req.path_url)
            + 14
            + host
            + sum(len(k) + len(v) + 4 for k, v in req.headers.items()),
            "received": len(resp.content),
            "received_overhead": len(f"HTTP/1.1 {resp.status_code} {resp.reason}\r\n")
            + 2
            + sum(len(k) + len(v) + 4 for k, v in resp.headers.items()),
        }
        label = rpc_label(body if isinstance(body, bytes | str) else None, names)
        ledger.add_call(label, sum(counts.values()))
        ledger.add(Kind.RPC, **counts)
        return resp

    s = requests.Session()
    s.hooks["response"].append(count)
    return s
