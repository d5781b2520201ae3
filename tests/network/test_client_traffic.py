"""A node's ledger is whole (issue 35 item 6): what it fetches and posts as a client is counted where it is
made (``protocol.p2p.clientcount``), beside what it serves, and ``/traffic/node`` sums both: the bytes a
validator's link carries when it fetches transcript states, which its own server never sees."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch

from protocol.node.api import NodeMetrics, NodeServer, create_node_app
from protocol.node.traffic import Kind, TrafficLedger
from protocol.p2p.blobs import BlobNotFoundError, BlobStore
from protocol.p2p.clientcount import count_client_http
from protocol.p2p.transfer import fetch_blob
from protocol.wire.tensorblob import encode_tensors, tensor_blob_digest


@pytest.fixture
def counted() -> Iterator[TrafficLedger]:
    """A process-wide client counter into a fresh ledger (removed afterwards)."""
    ledger = TrafficLedger()
    count_client_http(ledger.count_client)
    try:
        yield ledger
    finally:
        count_client_http(None)


def test_a_fetch_is_counted_by_the_client_as_the_server_counts_it(
    tmp_path: Path, counted: TrafficLedger
) -> None:
    served = TrafficLedger()
    store = BlobStore(tmp_path / "blobs")
    state = encode_tensors({"param/w": torch.randn(64, 256), "exp_avg/w": torch.zeros(64, 256)})
    digest = store.put(state, digest_fn=tensor_blob_digest)
    blob = store.put(os.urandom(300_000))
    app = create_node_app(
        role="miner", status=dict, store=store, metrics=NodeMetrics.create("t"), traffic=served
    )
    server = NodeServer(app).start()
    try:
        served.round = counted.round = 5
        assert fetch_blob([server.url], digest, digest_fn=tensor_blob_digest) == state
        assert len(fetch_blob([server.url], blob)) == 300_000
        with pytest.raises(BlobNotFoundError):
            fetch_blob([server.url], "0x" + "ab" * 32)  # a 404 moves bytes too
    finally:
        server.stop()
    client = counted.client_json()["5"]
    assert set(client) == {Kind.STATE.value, Kind.EVIDENCE.value, Kind.OTHER.value}, client
    at_server = served.to_json()["5"]
    for kind in (Kind.STATE.value, Kind.EVIDENCE.value):
        s = at_server[kind]
        # the same exchange from both ends: bodies exactly, headers within a few bytes of each other
        assert abs(client[kind]["received"] - (s["sent"] + s["sent_overhead"])) <= 16, (client, s)
        assert abs(client[kind]["sent"] - (s["received"] + s["received_overhead"])) <= 16, (client, s)
        assert client[kind]["received"] >= s["sent"] > 0
    whole = counted.node_json()["5"]
    assert whole["received"] == sum(e["received"] for e in client.values()) > len(state) + 300_000
    # the server's own ledger is unchanged in shape: the network's sum still counts each exchange once
    assert "client" not in at_server and served.node_json()["5"]["sent"] >= len(state) + 300_000


def test_nothing_is_counted_without_a_registered_counter(tmp_path: Path) -> None:
    ledger = TrafficLedger()
    store = BlobStore(tmp_path / "blobs")
    digest = store.put(b"x" * 1000)
    app = create_node_app(
        role="miner", status=dict, store=store, metrics=NodeMetrics.create("t2"), traffic=ledger
    )
    server = NodeServer(app).start()
    try:
        assert fetch_blob([server.url], digest) == b"x" * 1000
        assert httpx.get(f"{server.url}/traffic/client").json() == {}
        node = httpx.get(f"{server.url}/traffic/node").json()
    finally:
        server.stop()
    assert ledger.client_json() == {} and node["0"]["sent"] > 1000  # what it served, and only that
