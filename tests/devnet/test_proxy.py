"""The fault harness's proxy against a real node API: pass, corrupt, stall and block (tessera faults)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.node.api import NodeMetrics, NodeServer, create_node_app
from protocol.p2p import transfer
from protocol.p2p.blobs import BlobStore, DigestMismatchError, FetchTimeoutError, PeerUnavailableError
from protocol.p2p.transfer import FetchPolicy, fetch_blob
from tessera.devnet.proxy import FaultProxy, ProxyMode

POLICY = FetchPolicy(timeout=1.0, attempts=2, backoff=0.05)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[FaultProxy, str]]:
    store = BlobStore(tmp_path)
    app = create_node_app(role="miner", status=dict, store=store, metrics=NodeMetrics.create("miner"))
    server = NodeServer(app).start()
    proxy = FaultProxy("test").start()
    proxy.set_target(int(server.url.rsplit(":", 1)[1]))
    yield proxy, store.put(os.urandom(5000))
    proxy.stop()
    server.stop()


def test_modes(served: tuple[FaultProxy, str], monkeypatch: pytest.MonkeyPatch) -> None:
    proxy, digest = served
    assert len(fetch_blob(proxy.url, digest, policy=POLICY)) == 5000

    proxy.set_mode(ProxyMode.CORRUPT)
    with pytest.raises(DigestMismatchError):
        fetch_blob(proxy.url, digest, policy=POLICY)
    assert proxy.stats.corrupted >= 1

    proxy.set_mode(ProxyMode.STALL)
    t0 = time.monotonic()
    with pytest.raises(FetchTimeoutError):
        fetch_blob(proxy.url, digest, policy=POLICY)
    assert time.monotonic() - t0 < 2.5 and proxy.stats.stalled >= 1
    monkeypatch.setattr(transfer, "STALL_COOLDOWN_S", 0.0)  # forget the stall for the next modes

    proxy.set_mode(ProxyMode.BLOCK)
    with pytest.raises(PeerUnavailableError, match="refused"):
        fetch_blob(proxy.url, digest, policy=POLICY)

    proxy.set_mode(ProxyMode.PASS)
    assert len(fetch_blob(proxy.url, digest, policy=POLICY)) == 5000
