"""A node's DHT identity survives restarts (others' ``--dht-peers`` stay valid) and a second instance with
the same key on one machine is refused at start, in the same process or another (issue 16)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from protocol.p2p.dht import DHTConfig, DHTNode, DHTStartError


def _peer_id(node: DHTNode) -> str:
    return node.visible_maddrs()[0].split("/p2p/")[1]


def test_peer_id_survives_a_restart_and_a_second_instance_is_refused(tmp_path: Path) -> None:
    boot = DHTNode(DHTConfig()).start()
    try:
        cfg = DHTConfig(initial_peers=tuple(boot.visible_maddrs()), identity_path=str(tmp_path / "dht.key"))
        first = DHTNode(cfg).start()
        before = _peer_id(first)
        first.shutdown()
        again = DHTNode(cfg).start()
        try:
            assert _peer_id(again) == before and (tmp_path / "dht.key").exists()
            with pytest.raises(DHTStartError, match="already taken by a running node on this machine"):
                DHTNode(cfg).start()
        finally:
            again.shutdown()
        third = DHTNode(cfg).start()  # the refused start left nothing held; the shutdown freed the key
        assert _peer_id(third) == before
        third.shutdown()
        assert (
            _peer_id(DHTNode(DHTConfig(initial_peers=cfg.initial_peers)).start()) != before
        )  # no key: fresh
    finally:
        boot.shutdown()


_HOLDER = """
import sys, time
from protocol.p2p.dht import DHTConfig, DHTNode
node = DHTNode(DHTConfig(identity_path=sys.argv[1])).start()
print("up", flush=True)
sys.stdin.readline()
node.shutdown()
"""


def test_a_key_held_by_another_process_is_refused_and_freed_when_it_dies(tmp_path: Path) -> None:
    key = str(tmp_path / "dht.key")
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, key],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "up"
        with pytest.raises(DHTStartError, match=rf"already taken .*\(pid {holder.pid}\)"):
            DHTNode(DHTConfig(identity_path=key)).start()
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # killed, not shut down (its DHT child and p2pd too)
        holder.wait(timeout=30)
    deadline = time.monotonic() + 30
    while True:  # the killed holder's DHT child may take a moment to go
        try:
            node = DHTNode(DHTConfig(identity_path=key)).start()
            break
        except DHTStartError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    node.shutdown()
