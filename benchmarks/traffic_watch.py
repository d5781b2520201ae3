"""Every TCP connection of a network namespace, watched from outside its processes (outside count).

:class:`SocketWatch` samples the loopback's counters and every TCP socket (:func:`dump_tcp`, with the
process holding it, found as ``ss -p`` does through ``/proc/PID/fd``) every ``every`` seconds, and
listens to ``sock_diag``'s destroy events, which carry each socket's final counters (short-lived
connections that no sample saw included). :meth:`SocketWatch.stop` puts every socket's bytes under the
process listening on its connection's server port and the process at the client end.
"""

from __future__ import annotations

import fcntl
import socket
import struct
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from protocol.node.sockstats import NETLINK_SOCK_DIAG, SockStatsError, TcpSocket, dump_tcp, parse_diag

#: sock_diag's multicast groups of destroyed TCP sockets (SKNLGRP_INET_TCP_DESTROY, ..._INET6_...).
DESTROY_GROUPS = (1 << 0) | (1 << 2)
TCP_LISTEN = 10
SO_RCVBUFFORCE = 33
COUNTERS = ("sent", "received", "segs_out", "segs_in")
#: A direction of a connection: (sending address, receiving address).
Flow = tuple[tuple[str, int], tuple[str, int]]


def loopback_up() -> None:
    """Bring ``lo`` up (a new network namespace starts with it down)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    flags = struct.unpack("16sh", fcntl.ioctl(s, 0x8913, struct.pack("16sh", b"lo", 0)))[1]
    fcntl.ioctl(s, 0x8914, struct.pack("16sh", b"lo", flags | 1))
    s.close()


def loopback_counters() -> tuple[int, int]:
    """``lo``'s received bytes and packets (on a loopback every packet sent is received once)."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == "lo":
            f = rest.split()
            return int(f[0]), int(f[1])
    raise SockStatsError("no loopback in /proc/net/dev")


def role(pid: int) -> str:
    """What a process is, by its command line: anvil, dht (``p2pd``), validator, miner, deploy, driver."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    line = b" ".join(argv).decode(errors="replace")
    exe = Path(argv[0].decode(errors="replace")).name
    for name, test in (
        ("anvil", exe == "anvil"),
        ("dht", exe == "p2pd"),
        ("validator", "validator run" in line),
        ("miner", "miner run" in line),
        ("deploy", "contracts deploy" in line),
        ("driver", "devnet" in line),
    ):
        if test:
            return name
    return "other"


def socket_owners() -> dict[int, int]:
    """Socket inode -> the pid holding it, for every process of this machine that can be read."""
    out: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fds = list((d / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                t = str(fd.readlink())
            except OSError:
                continue
            if t.startswith("socket:["):
                out[int(t[8:-1])] = int(d.name)
    return out


class SocketWatch:
    """Samples and destroy events of every TCP socket, and the loopback's counters (see the module)."""

    def __init__(self, every: float = 1.0) -> None:
        self.every = every
        self.base = loopback_counters()
        self.snmp = protocol_counters()
        self.last_lo = self.base
        self.sockets: dict[int, TcpSocket] = {}
        self.destroyed: dict[int, TcpSocket] = {}
        self.roles: dict[int, str] = {}  # socket cookie -> the role of the process holding it
        self.listeners: dict[int, str] = {}  # port -> the role of the process listening on it
        self.samples = 0
        self.lost_events = 0
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._sample, name="sock-sample", daemon=True),
            threading.Thread(target=self._listen, name="sock-destroy", daemon=True),
        ]
        self._nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
        self._nl.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
        self._nl.bind((0, DESTROY_GROUPS))
        self._nl.settimeout(0.5)

    def start(self) -> SocketWatch:
        """Start sampling and listening."""
        for t in self._threads:
            t.start()
        return self

    def _sample(self) -> None:
        roles: dict[int, str] = {}
        while not self._stop.wait(self.every):
            try:
                live = dump_tcp()
            except SockStatsError:
                continue
            owners = socket_owners()
            for s in live:
                pid = owners.get(s.inode)
                if pid is not None and s.cookie not in self.roles:
                    self.roles[s.cookie] = roles.setdefault(pid, role(pid))
                if s.state == TCP_LISTEN and s.cookie in self.roles:
                    self.listeners[s.local[1]] = self.roles[s.cookie]
                self.sockets[s.key] = s
            self.last_lo = loopback_counters()
            self.samples += 1

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                buf = self._nl.recv(1 << 20)
            except TimeoutError:
                continue
            except OSError:  # ENOBUFS: the kernel dropped events; the samples still hold those sockets
                self.lost_events += 1
                continue
            for s in parse_diag(buf):
                if s is not None:
                    self.destroyed[s.key] = s

    def stop(self) -> dict[str, Any]:
        """Stop; every connection's bytes under its server's and its client's roles (:meth:`split`)."""
        self.last_lo = loopback_counters()
        snmp = protocol_counters()
        self._stop.set()
        for t in self._threads:
            t.join(timeout=10)
        self._nl.close()
        final = self.final()
        moved, roles = flows(final, self.roles)
        return {
            "loopback": {"bytes": self.last_lo[0] - self.base[0], "packets": self.last_lo[1] - self.base[1]},
            "protocols": {k: n - self.snmp.get(k, 0) for k, n in snmp.items()},
            "sockets": {
                "received": sum(s.received for s in final),
                "flows": sum(moved.values()),
                "segs_in": sum(s.segs_in for s in final),
                "connections": len({frozenset(f) for f in moved}),
                "samples": self.samples,
                "destroy_events": len(self.destroyed),
                "destroy_events_lost": self.lost_events,
            },
            "by_server": split(moved, roles, self.listeners),
        }

    def final(self) -> list[TcpSocket]:
        """Each socket's counters: the larger of its last sample's and its destroy event's, field by field
        (a socket closed with SO_LINGER 0, as libp2p's are, is disconnected first, which zeroes its
        counters and its peer's port in the event), with the addresses the sample saw."""
        out = []
        for cookie in self.sockets.keys() | self.destroyed.keys():
            a, b = self.sockets.get(cookie), self.destroyed.get(cookie)
            s = a or b
            if a is not None and b is not None:
                s = replace(a, **{f: max(getattr(a, f), getattr(b, f)) for f in COUNTERS})
            if s is not None and s.state != TCP_LISTEN:
                out.append(s)
        return out


def flows(final: list[TcpSocket], owners: dict[int, str]) -> tuple[dict[Flow, int], dict[Flow, str]]:
    """Bytes from one address to another, each the larger of what the sending sockets had acknowledged
    (less the SYN and FIN each acknowledgement counts) and what the receiving sockets had received: one
    end's counters suffice where the other's were zeroed. Also the role (``owners``: socket cookie -> role)
    of each sending end."""
    sent: dict[Flow, int] = {}
    received: dict[Flow, int] = {}
    roles: dict[Flow, str] = {}
    for s in final:
        if s.remote[1] == 0:  # disconnected before any sample: its counters are gone
            continue
        flow = (s.local, s.remote)
        sent[flow] = sent.get(flow, 0) + max(0, s.sent - 2)
        back = (s.remote, s.local)
        received[back] = received.get(back, 0) + s.received
        if s.cookie in owners:
            roles[flow] = owners[s.cookie]
    return {f: max(sent.get(f, 0), received.get(f, 0)) for f in sent.keys() | received.keys()}, roles


def split(
    moved: dict[Flow, int], roles: dict[Flow, str], listeners: dict[int, str]
) -> dict[str, dict[str, Any]]:
    """Each flow's bytes under the role listening on its connection's server port (the lower port
    where both ends listen, as libp2p's do) and per the role at the connection's client end."""
    out: dict[str, dict[str, Any]] = {}
    for (src, dst), n in moved.items():
        ports = [p for p in (src[1], dst[1]) if p in listeners]
        server_port = min(ports) if ports else min(src[1], dst[1])
        client = (src, dst) if dst[1] == server_port else (dst, src)
        row = out.setdefault(listeners.get(server_port, "unseen"), {"bytes": 0, "by_client": {}})
        row["bytes"] += n
        who = roles.get(client, "unseen")
        row["by_client"][who] = row["by_client"].get(who, 0) + n
    return out


def protocol_counters() -> dict[str, int]:
    """The namespace's packet counters by protocol (``/proc/net/snmp``): IP, TCP and UDP in."""
    keys = ("Ip:InReceives", "Tcp:InSegs", "Udp:InDatagrams", "Icmp:InMsgs")
    out: dict[str, int] = {}
    lines = Path("/proc/net/snmp").read_text().splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        head, *cols = names.split()
        for k, v in zip(cols, values.split()[1:], strict=False):
            if head + k in keys:
                out[head + k] = int(v)
    return out
