"""Issue 26: the ledger counts the DHT's bytes from the kernel's counters of the daemon's own sockets (real
TCP sockets, a real two-peer hivemind DHT whose p2pd daemons run under this process)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

from protocol.node.dhttraffic import DAEMON, DhtTraffic
from protocol.node.sockstats import SocketMeter, descendants, dump_tcp, socket_inodes
from protocol.node.traffic import Kind, TrafficLedger
from protocol.node.trafficsums import kind_totals, merge_ledgers
from protocol.p2p.dht import DHTConfig, DHTNode
from protocol.wire.records import make_record

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="Linux's /proc and sock_diag")


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    srv = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(srv.getsockname())
    server, _ = srv.accept()
    srv.close()
    yield client, server
    client.close()
    server.close()


def _move(src: socket.socket, dst: socket.socket, n: int) -> None:
    src.sendall(b"x" * n)
    got = 0
    while got < n:
        got += len(dst.recv(1 << 16))


def test_the_kernel_counts_each_sockets_bytes_both_ways(pair: tuple[socket.socket, socket.socket]) -> None:
    client, server = pair
    _move(client, server, 100_000)
    _move(server, client, 5_000)
    time.sleep(0.05)  # the last ACKs
    # By inode: a TIME_WAIT socket of an earlier connection can hold the same local port (CI saw one).
    ends = {s.inode: s for s in dump_tcp()}
    c, s = ends[os.fstat(client.fileno()).st_ino], ends[os.fstat(server.fileno()).st_ino]
    assert (c.received, s.received) == (5_000, 100_000)
    assert c.remote == s.local and s.remote == c.local
    assert c.sent >= 100_000 and s.sent >= 5_000  # acknowledged (the SYN counts one)
    assert c.segs_out >= 3 and s.segs_in >= 3
    assert {c.inode, s.inode} <= socket_inodes(os.getpid())


def test_a_meter_counts_what_was_moved_since_its_last_sample(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    client, server = pair
    mine = {os.fstat(server.fileno()).st_ino}
    meter = SocketMeter()
    _move(client, server, 70_000)
    assert meter.sample(mine)["received"] == 70_000  # first sight: all the socket moved so far
    _move(client, server, 1_234)
    assert meter.sample(mine)["received"] == 1_234
    assert meter.sample(mine)["received"] == 0
    assert meter.sample(set())["received"] == 0  # sockets not asked for count nothing


def test_descendants_are_found_by_name_down_to_a_depth() -> None:
    proc = subprocess.Popen(["bash", "-c", "sleep 30 & wait"])
    try:
        deadline = time.time() + 10
        while not descendants(os.getpid(), "sleep") and time.time() < deadline:
            time.sleep(0.05)
        (sleeper,) = descendants(os.getpid(), "sleep")
        assert proc.pid in descendants(os.getpid(), max_depth=1)
        assert descendants(os.getpid(), "sleep", max_depth=1) == []
        assert descendants(proc.pid, "sleep", max_depth=1) == [sleeper]
    finally:
        proc.kill()
        proc.wait()


def test_a_process_without_a_daemon_counts_no_dht_bytes() -> None:
    proc = subprocess.Popen(["sleep", "30"])  # a process with no DHT daemon under it
    try:
        ledger = TrafficLedger()
        meter = DhtTraffic(ledger, root=proc.pid, every=0.05).start()
        time.sleep(0.2)
        meter.stop()
        assert meter.pids == []
        assert "dht" not in kind_totals(merge_ledgers([ledger.to_json()]))
    finally:
        proc.kill()
        proc.wait()


def test_the_dht_daemons_received_bytes_enter_the_ledger_once() -> None:
    a = DHTNode(DHTConfig(start_timeout=30, validate_records=False)).start()
    b = DHTNode(DHTConfig(initial_peers=tuple(a.visible_maddrs()), start_timeout=30, validate_records=False))
    b.start()
    try:
        daemons = descendants(os.getpid(), DAEMON, max_depth=2)
        assert len(daemons) >= 2  # under hivemind's DHT process each
        ledger = TrafficLedger()
        ledger.round = 4
        meter = DhtTraffic(ledger)
        assert meter.poll()
        before = ledger.to_json()["4"]["dht"]["received"] if "4" in ledger.to_json() else 0
        rec = make_record("0x" + "33" * 32, chain_id=31337, role="miner", round=4, url="http://127.0.0.1:1")
        a.announce(rec)
        assert b.lookup(31337, 4).records == [rec]
        assert meter.poll()
        row = ledger.to_json()["4"][Kind.DHT.value]
        assert row["received"] - before > len(rec.encode())  # the record went over the DHT, at least once
        assert row["sent"] == 0  # each byte once, by its receiver
        # what the two daemons received is what the kernel says their sockets received, and nothing else
        inodes = set().union(*(socket_inodes(p) for p in daemons))
        kernel = sum(s.received for s in dump_tcp() if s.inode in inodes)
        assert 0 < row["received"] <= kernel
    finally:
        b.shutdown()
        a.shutdown()
