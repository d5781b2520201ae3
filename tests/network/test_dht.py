"""A real two-peer hivemind DHT on 127.0.0.1: signed records found, junk refused, errors typed."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from protocol.p2p.dht import DHTConfig, DHTNode, DHTNotRunningError, DHTStartError, record_key
from protocol.wire.records import BadSignatureError, MalformedRecordError, NodeRecord, Served, make_record

KEY_A = "0x" + "11" * 32
KEY_B = "0x" + "22" * 32


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[DHTNode, DHTNode]]:
    # without the storing-side record validator (like a stranger's nodes), so junk gets stored and these
    # tests show the reader refusing it; tests/network/test_dht_poisoning.py covers the validator
    a = DHTNode(DHTConfig(start_timeout=30, validate_records=False)).start()
    b = DHTNode(
        DHTConfig(initial_peers=tuple(a.visible_maddrs()), start_timeout=30, validate_records=False)
    ).start()
    yield a, b
    b.shutdown()
    a.shutdown()


def test_announce_and_lookup_across_peers(pair: tuple[DHTNode, DHTNode]) -> None:
    a, b = pair
    rec = make_record(
        KEY_A,
        chain_id=31337,
        role="miner",
        round=7,
        url="http://127.0.0.1:9000",
        serves=[Served("update", "0x" + "cd" * 32, 10)],
    )
    a.announce(rec)
    found = b.lookup(31337, 7)
    assert found.records == [rec]
    assert found.refused == []
    assert b.peer_count() >= 1


def test_malformed_and_forged_records_refused_node_keeps_running(pair: tuple[DHTNode, DHTNode]) -> None:
    a, b = pair
    good = make_record(KEY_B, chain_id=31337, role="validator", round=8, url="http://127.0.0.1:9001")
    b.announce(good)
    key = record_key(31337, 8)
    exp = time.time() + 60
    a.store_raw(key, "0xjunk", b"\x80not json", exp)
    other = make_record(KEY_A, chain_id=31337, role="miner", round=8, url="http://127.0.0.1:9002")
    forged = NodeRecord(**{**other.__dict__, "url": "http://127.0.0.1:6666"})
    a.store_raw(key, forged.address, forged.encode(), exp)
    res = b.lookup(31337, 8)
    assert res.records == [good]
    kinds = sorted(type(e).__name__ for _, e in res.refused)
    assert kinds == sorted([MalformedRecordError.__name__, BadSignatureError.__name__])
    # still serving afterwards
    assert a.lookup(31337, 8).records == [good]


def test_subkey_must_match_address(pair: tuple[DHTNode, DHTNode]) -> None:
    a, b = pair
    rec = make_record(KEY_A, chain_id=31337, role="miner", round=9, url="http://127.0.0.1:9000")
    a.store_raw(record_key(31337, 9), "0x" + "00" * 20, rec.encode(), time.time() + 60)
    res = b.lookup(31337, 9)
    assert res.records == [] and len(res.refused) == 1


def test_empty_round(pair: tuple[DHTNode, DHTNode]) -> None:
    assert pair[1].lookup(31337, 12345).records == []


def test_bad_bootstrap_peer_is_a_typed_error() -> None:
    bogus = "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWJujppa98TaguDCkNVYgQzkJKGWGgbPEJDgAj6dc4zTHg"
    node = DHTNode(
        DHTConfig(initial_peers=(bogus,), start_timeout=8, start_attempts=2, backoff=0.1, wait_timeout=1)
    )
    with pytest.raises(DHTStartError, match="bootstrap peers"):
        node.start()
    assert not node.running


def test_not_running() -> None:
    with pytest.raises(DHTNotRunningError):
        DHTNode(DHTConfig()).lookup(1, 1)


def test_rejoin_after_split(pair: tuple[DHTNode, DHTNode]) -> None:
    a, _ = pair
    c = DHTNode(DHTConfig(initial_peers=tuple(a.visible_maddrs()), start_timeout=30)).start()
    try:
        c.rejoin()  # the retry path for a node that lost its peers
        assert c.running and c.peer_count() >= 1
        rec = make_record(KEY_B, chain_id=31337, role="validator", round=21, url="http://127.0.0.1:9")
        c.announce(rec)
        assert a.lookup(31337, 21).records == [rec]
    finally:
        c.shutdown()
