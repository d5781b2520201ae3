"""The DHT's bytes in the traffic ledger: what hivemind's ``p2pd`` daemon moves, which no HTTP
handler of the node sees, read from the kernel's counters of the daemon's own sockets.

hivemind runs the DHT in a child process of the node, which runs ``p2pd``; libp2p keeps its connections
open, so sampling the daemon's sockets every few seconds (:class:`protocol.node.sockstats.SocketMeter`)
counts them whole; what a connection moved after the last sample before it closed is lost.

Each DHT byte is counted once, by the node whose daemon *received* it (``received`` of
:attr:`Kind.DHT`; ``sent`` stays 0), as the HTTP kinds are counted once, by their server: the sum over
all nodes' ledgers is the DHT traffic the nodes received (a devnet's bootstrap peer counts its own in the
driver's ledger). Payload only: TCP/IP headers are in no kind of the ledger.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from protocol.node.sockstats import SocketMeter, SockStatsError, descendants, socket_inodes
from protocol.node.traffic import Kind, TrafficLedger

log = logging.getLogger(__name__)

#: The DHT daemon's process name (hivemind's ``p2pd``).
DAEMON = "p2pd"
#: Generations between a node and its daemon: the node, hivemind's DHT process, ``p2pd``.
DAEMON_DEPTH = 2
#: Seconds between samples of the daemon's sockets.
EVERY_S = 5.0
#: Seconds between looks for the daemon's process when it is not known (it starts, or restarts, later).
FIND_EVERY_S = 30.0


class DhtTraffic:
    """Samples the sockets of the ``p2pd`` under process ``root`` (default: this one) every ``every``
    seconds in a thread and adds the bytes they received to ``ledger`` as :attr:`Kind.DHT`. It never
    raises: where the kernel's counters cannot be read (not Linux), it logs once and stops."""

    def __init__(self, ledger: TrafficLedger, root: int | None = None, every: float = EVERY_S) -> None:
        self.ledger = ledger
        self.root = os.getpid() if root is None else root
        self.every = every
        self.meter = SocketMeter()
        self.pids: list[int] = []
        self._found_at = -FIND_EVERY_S
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dht-traffic", daemon=True)

    def start(self) -> DhtTraffic:
        """Start sampling."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Take a last sample and stop."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.poll()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            if not self.poll():
                return

    def poll(self) -> bool:
        """One sample: add what the daemon's sockets received since the last one; False once the
        counters cannot be read."""
        try:
            now = time.monotonic()
            if not self.pids or now - self._found_at > FIND_EVERY_S:
                self.pids = descendants(self.root, DAEMON, DAEMON_DEPTH)
                self._found_at = now
            inodes: set[int] = set()
            for pid in self.pids:
                inodes |= socket_inodes(pid)
            gained = self.meter.sample(inodes)
        except (SockStatsError, OSError, ValueError) as exc:
            log.info("the DHT's traffic is not counted: %s", exc)
            return False
        if gained["received"]:
            self.ledger.add(Kind.DHT, received=gained["received"])
        return True
