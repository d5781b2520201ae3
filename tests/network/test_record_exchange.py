"""Signed records over HTTP (``GET /records/{round}``, ``POST /records``): discovery when the DHT is poisoned.

Real node apps on 127.0.0.1 and, for the poisoned case, real hivemind DHT nodes: the reader's only DHT
neighbour is a stranger's node that stores anything and answers the round key with junk.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from protocol.node.api import NodeMetrics, NodeServer, create_node_app
from protocol.p2p import recordbook
from protocol.p2p.blobs import BlobStore, NotModifiedError
from protocol.p2p.dht import DHTConfig, DHTNode, record_key
from protocol.p2p.discovery import Discovery
from protocol.p2p.recordbook import (
    KEEP_ROUNDS,
    MAX_PER_ROUND,
    RecordBook,
    RecordBookFullError,
    RecordExchange,
    fetch_records,
    mount_record_routes,
    records_etag,
)
from protocol.wire.records import BadSignatureError, NodeRecord, make_record

CHAIN = 31337
KEYS = ["0x" + f"{i + 0x41:02x}" * 32 for i in range(4)]


def _record(key: str, round: int, url: str = "http://127.0.0.1:9000", ttl: int = 600) -> NodeRecord:
    return make_record(key, chain_id=CHAIN, role="miner", round=round, url=url, ttl=ttl)


def _serve(discovery: Discovery, tmp: Path) -> NodeServer:
    app = create_node_app(
        role="validator", status=lambda: {}, store=BlobStore(tmp), metrics=NodeMetrics.create("validator")
    )
    mount_record_routes(app, discovery.book)
    return NodeServer(app).start()


@pytest.fixture
def validator(tmp_path: Path) -> Iterator[tuple[Discovery, str]]:
    d = Discovery(CHAIN, KEYS[0])
    server = _serve(d, tmp_path)
    yield d, server.url
    server.stop()


def _until(cond: object, seconds: float = 5.0) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_book_keeps_newest_per_signer_and_is_bounded() -> None:
    book = RecordBook(CHAIN)
    old, new = _record(KEYS[1], 5, ttl=100), _record(KEYS[1], 5, url="http://127.0.0.1:9001", ttl=200)
    assert book.add(new) and not book.add(old)
    assert book.records(5) == [new]
    book.note_round(20)
    assert book.records(5) == []  # dropped: too far behind the round the node works on
    with pytest.raises(RecordBookFullError):
        book.add(_record(KEYS[1], 20 + 3))  # too far ahead
    with pytest.raises(RecordBookFullError):
        book.add(_record(KEYS[1], 20 - KEEP_ROUNDS - 1))
    book.note_round(30)
    for i in range(MAX_PER_ROUND):
        book.add(
            make_record(
                "0x" + (i + 1).to_bytes(32, "big").hex(),
                chain_id=CHAIN,
                role="miner",
                round=30,
                url="http://127.0.0.1:1",
            )
        )
    with pytest.raises(RecordBookFullError):
        book.add(_record(KEYS[2], 30))
    forged = NodeRecord(**{**_record(KEYS[2], 30).__dict__, "url": "http://127.0.0.1:6666"})
    with pytest.raises(BadSignatureError):
        book.add_bytes(forged.encode())


def test_push_serve_and_pull(validator: tuple[Discovery, str]) -> None:
    v, url = validator
    miner = Discovery(CHAIN, KEYS[1], record_urls=(url,))
    rec = miner.announce(7, "miner", "http://127.0.0.1:9100", [])
    _until(lambda: v.book.records(7) == [rec])  # pushed to the validator
    other = Discovery(CHAIN, KEYS[2], fallback_urls=(url,))
    assert rec in other.find(7)  # pulled from the validator (fallback URLs double as record peers)
    forged = NodeRecord(**{**rec.__dict__, "url": "http://127.0.0.1:6666"})
    json_type = {"content-type": "application/json"}
    r = httpx.post(f"{url}/records", content=forged.encode(), headers=json_type)
    assert (
        r.status_code == 200 and r.json()["accepted"] is False and "BadSignatureError" in r.json()["reason"]
    )
    assert httpx.post(f"{url}/records", content=b"{" * 10_000, headers=json_type).status_code == 413
    assert httpx.post(f"{url}/records", content=b"[1]", headers=json_type).status_code == 422
    assert httpx.post(f"{url}/records", content=rec.encode()).status_code == 415
    assert httpx.get(f"{url}/records/{2**63}").status_code == 422
    assert v.book.records(7) == [rec]


def test_a_pull_of_unchanged_records_moves_no_records(validator: tuple[Discovery, str]) -> None:
    """A puller names the last answer's tag (``If-None-Match``): while the peer's records are the same it
    answers 304 with no body and the puller keeps what it verified; a new record changes the tag (issue 26:
    repeated pulls were most of the records a validator served)."""
    v, url = validator
    for key in KEYS[1:3]:
        v.book.add(_record(key, 7))
    first = httpx.get(f"{url}/records/7")
    tag = first.headers["etag"]
    assert tag == records_etag(first.content)
    again = httpx.get(f"{url}/records/7", headers={"If-None-Match": tag})
    assert again.status_code == 304 and again.content == b""
    exchange = RecordExchange(CHAIN)
    got = exchange.pull([url], 7)
    assert sorted(r.address for r in got) == sorted(r.address for r in v.book.records(7))
    assert exchange.pull([url], 7) == got and exchange.errors == 0  # the 304: the records kept
    with pytest.raises(NotModifiedError):
        fetch_records(url, CHAIN, 7, timeout=2.0, etag=tag)
    v.book.add(_record(KEYS[3], 7))
    assert len(exchange.pull([url], 7)) == 3  # a new tag, the new answer
    assert httpx.get(f"{url}/records/7", headers={"If-None-Match": tag}).status_code == 200


def test_a_304_does_not_bring_back_a_record_expired_on_this_clock(
    validator: tuple[Discovery, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The records a 304 re-uses were verified when they came; one that has expired since, on the puller's
    clock (here ahead of the peer's), is dropped, not handed on as current."""
    v, url = validator
    v.book.add(_record(KEYS[1], 7, ttl=60))
    v.book.add(_record(KEYS[2], 7, ttl=3600))
    exchange = RecordExchange(CHAIN)
    assert len(exchange.pull([url], 7)) == 2
    now = time.time()
    served = v.book.records
    monkeypatch.setattr(
        v.book, "records", lambda round, now=None, t=now: served(round, now=t)
    )  # peer's clock
    monkeypatch.setattr(recordbook, "time", SimpleNamespace(time=lambda: now + 600, monotonic=time.monotonic))
    assert httpx.get(f"{url}/records/7", headers={"If-None-Match": records_etag(
        httpx.get(f"{url}/records/7").content)}).status_code == 304  # fmt: skip
    got = exchange.pull([url], 7)  # answered 304
    assert [r.address for r in got] == [_record(KEYS[2], 7).address] and exchange.errors == 0


def test_discovery_works_when_the_dht_answers_junk(validator: tuple[Discovery, str]) -> None:
    v, url = validator
    # the stranger's node stores anything (no validator); the reader knows no other DHT node
    stranger = DHTNode(DHTConfig(start_timeout=30, validate_records=False)).start()
    reader_dht = DHTNode(
        DHTConfig(initial_peers=tuple(stranger.visible_maddrs()), start_timeout=30, chain_id=CHAIN)
    ).start()
    try:
        honest = Discovery(CHAIN, KEYS[3], record_urls=(url,))
        rec = honest.announce(8, "miner", "http://127.0.0.1:9200", [])
        _until(lambda: v.book.records(8) == [rec])
        stranger.store_raw(record_key(CHAIN, 8), "junk", b"\x80junk", time.time() + 3600)
        dht_only = Discovery(CHAIN, KEYS[2], dht=reader_dht, record_urls=())
        assert dht_only.find(8) == []  # poisoned: the DHT alone finds nothing
        both = Discovery(CHAIN, KEYS[2], dht=reader_dht, record_urls=(url,))
        assert both.find(8) == [rec]
    finally:
        reader_dht.shutdown()
        stranger.shutdown()
