"""The kernel's own TCP counters per socket (Linux ``sock_diag``), read from outside the process that owns
the socket: what a node's DHT daemon moved, which no HTTP handler sees.

:func:`dump_tcp` asks the kernel for every TCP socket of this network namespace with its ``tcp_info``
(bytes acked and received, segments in and out), as ``ss -ti`` does; :func:`socket_inodes` and
:func:`descendants` tell which of them a process (and its children) holds, as ``ss -p`` does;
:class:`SocketMeter` turns repeated dumps into byte deltas per socket, so a counter survives its socket
only until the next sample (long-lived connections, such as libp2p's, are counted whole). Off Linux, or
where the kernel refuses, the functions raise :class:`SockStatsError`.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from protocol.errors import ProtocolError

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
INET_DIAG_INFO = 2
#: Every TCP state (the request's bitmask); listening sockets carry no bytes but cost nothing.
ALL_STATES = 0xFFFFFFFF
_NLMSG = struct.Struct("=IHHII")
_REQ = struct.Struct("=BBBBI48s")
#: ``inet_diag_msg``: family, state, timer, retrans, then the socket id (ports big-endian, addresses,
#: interface, cookie), expires, rqueue, wqueue, uid, inode.
_MSG = struct.Struct("=BBBBHH16s16sIQIIIII")
_INFO_BYTES = struct.Struct("=QQII")  # tcp_info: bytes_acked, bytes_received, segs_out, segs_in
_INFO_BYTES_AT = 120
#: Bytes of IP and TCP header per segment on a loopback with TCP timestamps (20 + 20 + 12 of options);
#: ``/proc/net/dev`` counts them (no link header on ``lo``).
TCP_IP_HEADER = 52


class SockStatsError(ProtocolError):
    """The kernel's socket counters could not be read (not Linux, no ``sock_diag``, a process gone)."""


@dataclass(frozen=True)
class TcpSocket:
    """One TCP socket's identity and counters (``sent``: bytes the peer acknowledged)."""

    inode: int
    cookie: int
    local: tuple[str, int]
    remote: tuple[str, int]
    state: int
    sent: int
    received: int
    segs_out: int
    segs_in: int

    @property
    def key(self) -> int:
        """The kernel's cookie: one socket's for the namespace's life (an inode or a port is reused; a
        socket destroyed after its process closed it reports inode 0)."""
        return self.cookie


def _addr(family: int, raw: bytes) -> str:
    return socket.inet_ntop(family, raw[:4] if family == socket.AF_INET else raw)


def parse_diag(buf: bytes) -> Iterator[TcpSocket | None]:
    """The sockets in one ``recv`` of netlink messages; ``None`` marks the dump's end. A socket whose
    answer carries no ``tcp_info`` (a listener in some kernels) counts zero bytes."""
    off = 0
    while off + _NLMSG.size <= len(buf):
        length, kind, _flags, _seq, _pid = _NLMSG.unpack_from(buf, off)
        if length < _NLMSG.size:
            raise SockStatsError(f"malformed netlink message of {length} bytes")
        if kind == NLMSG_DONE:
            yield None
            return
        if kind == NLMSG_ERROR:
            (err,) = struct.unpack_from("=i", buf, off + _NLMSG.size)
            raise SockStatsError(f"sock_diag refused the dump: {os.strerror(-err)}")
        if kind == SOCK_DIAG_BY_FAMILY:
            yield _socket(buf[off + _NLMSG.size : off + length])
        off += (length + 3) & ~3


def _socket(body: bytes) -> TcpSocket:
    fam, state, _t, _r, sport, dport, src, dst, _if, cookie, *_, inode = _MSG.unpack_from(body)
    counts = (0, 0, 0, 0)
    off = (_MSG.size + 3) & ~3
    while off + 4 <= len(body):
        alen, atype = struct.unpack_from("=HH", body, off)
        if alen < 4:
            break
        if atype == INET_DIAG_INFO and alen - 4 >= _INFO_BYTES_AT + _INFO_BYTES.size:
            counts = _INFO_BYTES.unpack_from(body, off + 4 + _INFO_BYTES_AT)
        off += (alen + 3) & ~3
    return TcpSocket(
        inode=inode,
        cookie=cookie,
        local=(_addr(fam, src), socket.ntohs(sport)),
        remote=(_addr(fam, dst), socket.ntohs(dport)),
        state=state,
        sent=counts[0],
        received=counts[1],
        segs_out=counts[2],
        segs_in=counts[3],
    )


def dump_tcp(families: Iterable[int] = (socket.AF_INET, socket.AF_INET6)) -> list[TcpSocket]:
    """Every TCP socket of this network namespace, with its counters (one ``sock_diag`` dump per family)."""
    out: list[TcpSocket] = []
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as nl:
            for seq, fam in enumerate(families, 1):
                req = _REQ.pack(fam, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), 0, ALL_STATES, b"")
                head = _NLMSG.pack(
                    _NLMSG.size + len(req), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq, 0
                )
                nl.send(head + req)
                done = False
                while not done:
                    for s in parse_diag(nl.recv(1 << 20)):
                        if s is None:
                            done = True
                        else:
                            out.append(s)
    except (OSError, AttributeError) as exc:  # AttributeError: no AF_NETLINK off Linux
        raise SockStatsError(f"cannot read the kernel's TCP counters: {exc}") from exc
    return out


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets process ``pid`` holds open (empty when it is gone or not readable)."""
    out: set[int] = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return out
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(int(target[8:-1]))
    return out


def descendants(root: int, comm: str | None = None, max_depth: int = 1 << 30) -> list[int]:
    """The processes under ``root`` (children, grandchildren... down to ``max_depth`` generations), those
    named ``comm`` where given."""
    parent: dict[int, int] = {}
    names: dict[int, str] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        name_end = stat.rfind(")")
        names[int(d.name)] = stat[stat.find("(") + 1 : name_end]
        parent[int(d.name)] = int(stat[name_end + 2 :].split()[1])
    out = []
    for pid in parent:
        p, depth = parent[pid], 1
        while p > 1 and p != root and depth < max_depth:
            p, depth = parent.get(p, 0), depth + 1
        if p == root and pid != root and (comm is None or names.get(pid) == comm):
            out.append(pid)
    return sorted(out)


class SocketMeter:
    """Byte and segment deltas of a changing set of sockets between calls of :meth:`sample`."""

    def __init__(self) -> None:
        self._last: dict[int, TcpSocket] = {}

    def sample(self, inodes: set[int]) -> dict[str, int]:
        """Counters gained since the last call by the sockets with these inodes: ``sent``, ``received``,
        ``segs_out``, ``segs_in`` (a socket first seen counts from zero: all it moved so far)."""
        now = {s.key: s for s in dump_tcp() if s.inode in inodes and s.inode != 0}
        gained = dict.fromkeys(("sent", "received", "segs_out", "segs_in"), 0)
        for key, s in now.items():
            before = self._last.get(key)
            for f in gained:
                gained[f] += max(0, getattr(s, f) - (getattr(before, f) if before else 0))
        self._last = now
        return gained
