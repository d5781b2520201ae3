"""A TCP proxy the fault harness puts in front of a node's port: the "blocked port" and the bad peer.

``tessera faults`` cannot use a firewall here (no iptables/nft), and a network namespace cannot be
entered by a process that already runs, so a participant's network is cut at a proxy the harness owns:
the node is started with its chain RPC (``--rpc-url``) and/or its public HTTP address (``--public-url``,
and the URL its peers are given) pointing at a :class:`FaultProxy`, which forwards bytes both ways until
the harness switches its :class:`ProxyMode`:

- ``pass``: forward (the normal state);
- ``block``: the port is closed: the listener is shut (new connections are refused, as with a REJECT
  rule) and every open connection is torn down, so keep-alive sessions break too;
- ``stall``: connections are accepted and the request read, then the answer trickles out one header
  byte per second and never completes (a peer that stalls while keeping per-read timeouts happy);
- ``corrupt``: forwarded, but one byte of each connection's first response body is flipped (a peer that
  serves corrupted bytes);
- ``drip``: forwarded request by request, but every answer whose body is a transcript state (a
  safetensors blob of parameters or optimizer moments, as :func:`protocol.node.traffic.blob_kind` tells)
  is held back :attr:`FaultProxy.drip_s` seconds before it goes out (issue 27's sybils: a peer that serves
  the states a validator samples, slowly enough to use up the validator's phase);
- ``rule``: forwarded request by request, but each request's body is first offered to
  :attr:`FaultProxy.rule`, which may answer it itself (a JSON body sent back as ``200 OK``) instead of
  letting it through; :meth:`FaultProxy.post` sends a body on to the target later (the
  ``slow-certificate`` scenario's rule holds every ``certify`` transaction at a validator's chain RPC:
  :class:`tessera.devnet.faults.slowcert.CertifyHold`).

Everything is plain sockets and threads in the harness process; the node processes are untouched.
"""

from __future__ import annotations

import http.client
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from protocol.node.traffic import SNIFF_BYTES, Kind, blob_kind
from protocol.rounds.anvil import free_port
from tessera.errors import TesseraError

log = logging.getLogger(__name__)

#: Offset into a response body of the byte ``corrupt`` flips (past any chunked-encoding size line).
CORRUPT_OFFSET = 64
#: Largest response body ``drip`` holds in memory (a state of the devnet's models is far smaller).
DRIP_MAX_BODY = 256 * 1024 * 1024

RequestRule = Callable[[bytes], bytes | None]
"""``rule`` mode's rule: a request's body -> the JSON body to answer it with, or None to forward it."""


class ProxyError(TesseraError):
    """The proxy could not bind or has no target."""


class ProxyMode(StrEnum):
    """What the proxy does with traffic."""

    PASS = "pass"
    BLOCK = "block"
    STALL = "stall"
    CORRUPT = "corrupt"
    DRIP = "drip"
    RULE = "rule"


@dataclass
class ProxyStats:
    """Counters for the report."""

    accepted: int = 0
    torn_down: int = 0
    stalled: int = 0
    corrupted: int = 0
    dripped: int = 0
    answered: int = 0
    """Requests ``rule`` answered itself."""
    modes: list[tuple[float, str]] = field(default_factory=list)


class FaultProxy:
    """A TCP forwarder on 127.0.0.1 with a switchable fault mode (see the module docstring)."""

    def __init__(self, name: str, port: int | None = None) -> None:
        self.name = name
        self.port = port or free_port()
        self.target: tuple[str, int] | None = None
        self.mode = ProxyMode.PASS
        self.drip_s = 25.0
        """Seconds ``drip`` holds each transcript state back."""
        self.rule: RequestRule | None = None
        """What ``rule`` offers each request to (None: every request forwarded)."""
        self.stats = ProxyStats()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._stopped = threading.Event()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` of the proxy."""
        return f"http://127.0.0.1:{self.port}"

    def set_target(self, port: int, host: str = "127.0.0.1") -> None:
        """Where ``pass`` and ``corrupt`` forward to."""
        self.target = (host, port)

    def post(self, body: bytes, timeout: float = 30.0) -> bytes:
        """POST ``body`` (JSON) to the target's ``/`` on a connection of its own; the answer's body.
        Raises :class:`ProxyError` without a target, ``OSError`` when it cannot be reached."""
        if self.target is None:
            raise ProxyError(f"proxy {self.name}: no target to post to")
        conn = http.client.HTTPConnection(*self.target, timeout=timeout)
        try:
            conn.request("POST", "/", body=body, headers={"Content-Type": "application/json"})
            return conn.getresponse().read()
        finally:
            conn.close()

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        """Listen (in ``pass`` mode)."""
        self._listen()
        self.stats.modes.append((time.time(), self.mode.value))
        return self

    def stop(self) -> None:
        """Close the listener and every connection."""
        self._stopped.set()
        self._close_listener()
        self._tear_down()

    def set_mode(self, mode: ProxyMode) -> None:
        """Switch the fault mode; ``block`` closes the port and every open connection at once."""
        mode = ProxyMode(mode)
        if mode == self.mode:
            return
        log.warning("proxy %s (%s): %s -> %s", self.name, self.url, self.mode.value, mode.value)
        prev, self.mode = self.mode, mode
        self.stats.modes.append((time.time(), mode.value))
        if mode == ProxyMode.BLOCK:
            self._close_listener()
            self._tear_down()
        elif prev == ProxyMode.BLOCK:
            self._listen()
        elif mode in (ProxyMode.STALL, ProxyMode.CORRUPT, ProxyMode.RULE) or prev == ProxyMode.STALL:
            self._tear_down()  # pooled connections must meet the new behaviour too

    # -- internals -------------------------------------------------------------------------------------
    def _listen(self) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        deadline = time.time() + 10
        while True:
            try:
                s.bind(("127.0.0.1", self.port))
                break
            except OSError as exc:
                if time.time() > deadline:
                    s.close()
                    raise ProxyError(f"proxy {self.name}: cannot bind port {self.port}: {exc}") from exc
                time.sleep(0.2)
        s.listen(64)
        self._listener = s
        threading.Thread(target=self._accept_loop, args=(s,), name=f"proxy-{self.name}", daemon=True).start()

    def _close_listener(self) -> None:
        s, self._listener = self._listener, None
        if s is not None:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _tear_down(self) -> None:
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
        self.stats.torn_down += len(conns)

    def _track(self, c: socket.socket) -> None:
        with self._lock:
            self._conns.add(c)

    def _accept_loop(self, listener: socket.socket) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return  # listener closed (block or stop)
            self.stats.accepted += 1
            self._track(client)
            mode = self.mode
            if mode == ProxyMode.STALL:
                threading.Thread(target=self._stall, args=(client,), daemon=True).start()
            elif mode in (ProxyMode.DRIP, ProxyMode.RULE):
                threading.Thread(target=self._by_request, args=(client, mode), daemon=True).start()
            else:
                threading.Thread(target=self._forward, args=(client, mode), daemon=True).start()

    def _stall(self, client: socket.socket) -> None:
        self.stats.stalled += 1
        try:
            client.settimeout(30)
            client.recv(65536)
            for b in b"HTTP/1.1 200 OK\r\nX-Tessera-Fault: stall" + b"-" * 100_000:
                if self.mode != ProxyMode.STALL or self._stopped.is_set():
                    break
                client.sendall(bytes([b]))
                time.sleep(1.0)
        except OSError:
            pass
        finally:
            client.close()

    def _upstream(self, client: socket.socket) -> socket.socket | None:
        """A tracked connection to the target for ``client``'s traffic; None (``client`` closed) when
        there is no target or it cannot be reached."""
        if self.target is None:
            client.close()
            return None
        try:
            upstream = socket.create_connection(self.target, timeout=10)
        except OSError:
            client.close()
            return None
        upstream.settimeout(None)
        self._track(upstream)
        return upstream

    def _splice(self, client: socket.socket, upstream: socket.socket, corrupt: bool) -> None:
        """Pump both ways until either side closes (requests in a thread, answers here, ``corrupt``: the
        first answer's body gets its byte flipped)."""
        threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
        self._pump(upstream, client, corrupt)

    def _forward(self, client: socket.socket, mode: ProxyMode) -> None:
        upstream = self._upstream(client)
        if upstream is not None:
            self._splice(client, upstream, mode == ProxyMode.CORRUPT)

    def _by_request(self, client: socket.socket, mode: ProxyMode) -> None:
        """Forward one request and its answer at a time: ``drip`` holds back answers that carry a
        transcript state, ``rule`` answers the requests its rule answers; a chunked message (none of a
        node's blobs or JSON-RPC calls) ends the inspection and is pumped through."""
        upstream = self._upstream(client)
        if upstream is None:
            return
        req, resp = _HttpReader(client), _HttpReader(upstream)
        try:
            while not self._stopped.is_set():
                head = req.message()
                if head is None:
                    break
                own = self._own_answer(head) if mode == ProxyMode.RULE and not req.chunked else None
                if own is not None:
                    client.sendall(own)
                    continue
                upstream.sendall(head)
                if req.chunked:
                    self._splice(client, upstream, False)
                    return
                answer = resp.message(max_body=DRIP_MAX_BODY)
                if answer is None:
                    break
                body = answer[answer.find(b"\r\n\r\n") + 4 :]
                if mode == ProxyMode.DRIP and blob_kind(body[:SNIFF_BYTES]) in (Kind.STATE, Kind.CHECKPOINT):
                    self.stats.dripped += 1
                    self._stopped.wait(self.drip_s)
                client.sendall(answer)
                if resp.chunked:
                    self._splice(client, upstream, False)
                    return
        except OSError:
            pass
        for s in (client, upstream):
            s.close()

    def _own_answer(self, message: bytes) -> bytes | None:
        """The HTTP answer :attr:`rule` gives the request ``message`` (head and body), or None."""
        rule = self.rule
        got = rule(message[message.find(b"\r\n\r\n") + 4 :]) if rule is not None else None
        if got is None:
            return None
        self.stats.answered += 1
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(got)}\r\n\r\n"
        return head.encode() + got

    def _pump(self, src: socket.socket, dst: socket.socket, corrupt: bool) -> None:
        """Copy src -> dst; with ``corrupt``, flip the byte at CORRUPT_OFFSET of the first body."""
        seen = b""
        body_at: int | None = None  # stream offset where the first body starts
        pos = 0
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if corrupt:
                    if body_at is None and len(seen) < 65536:
                        seen += data  # everything from the stream's start until the headers end
                        end = seen.find(b"\r\n\r\n")
                        if end >= 0:
                            body_at = end + 4
                    if body_at is not None:
                        i = body_at + CORRUPT_OFFSET - pos
                        if 0 <= i < len(data):
                            buf = bytearray(data)
                            buf[i] ^= 0xFF
                            data = bytes(buf)
                            self.stats.corrupted += 1
                            corrupt = False
                pos += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()


class _HttpReader:
    """Reads whole HTTP/1.1 messages (head and a ``content-length`` body) off a socket, for ``drip`` and
    ``rule``."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.chunked = False
        """The last message's body is chunked: only its head (and what was read of it) was returned."""

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        self.buf += data
        return bool(data)

    def message(self, max_body: int = 1 << 20) -> bytes | None:
        """The next message, whole (None at the end of the stream or past ``max_body``)."""
        while b"\r\n\r\n" not in self.buf:
            if not self._fill():
                return None
        end = self.buf.find(b"\r\n\r\n") + 4
        head = self.buf[:end].lower()
        self.chunked = b"transfer-encoding: chunked" in head
        length = 0
        for line in head.split(b"\r\n"):
            if line.startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1].strip() or 0)
        if self.chunked or length > max_body:
            out, self.buf = self.buf, b""
            self.chunked = True
            return out
        while len(self.buf) < end + length:
            if not self._fill():
                return None
        out, self.buf = self.buf[: end + length], self.buf[end + length :]
        return out
