"""A node's DHT identity survives restarts (others' ``--dht-peers`` stay valid) and a second instance on the
same data dir is refused at start (issue 16)."""

from __future__ import annotations

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
            with pytest.raises(DHTStartError, match="already taken"):
                DHTNode(DHTConfig(**{**cfg.__dict__, "start_attempts": 1})).start()
        finally:
            again.shutdown()
        assert (
            _peer_id(DHTNode(DHTConfig(initial_peers=cfg.initial_peers)).start()) != before
        )  # no key: fresh
    finally:
        boot.shutdown()
