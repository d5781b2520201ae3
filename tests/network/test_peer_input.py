"""Issue 11: one peer's input cannot stop a node.

- A record announcing a URL that clients parse differently (``http://127.0.0.1:abc``, ``h:80:90``, control
  bytes, other schemes, no host, bad ports) is refused with :class:`BadURLError` when it is decoded.
- ``fetch_blob`` moves on to the next peer on any failure of one peer (a URL the client refuses, bytes the
  digest function cannot parse, an exception of any type from the transport), so ``fetch_blob([bad,
  good])`` returns the good peer's blob.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from eth_account import Account

from protocol.node.api import NodeMetrics, NodeServer, create_node_app
from protocol.p2p.blobs import BlobStore, PeerUnavailableError, TransferError
from protocol.p2p.transfer import FetchPolicy, fetch_blob, get_capped, peer_failure_counts
from protocol.wire.records import (
    BadURLError,
    MalformedRecordError,
    NodeRecord,
    RecordError,
    Served,
    check_url,
    decode_record,
    make_record,
    sign_record,
)
from protocol.wire.tensorblob import encode_tensors, tensor_blob_digest

NOW = 1_800_000_000
FAST = FetchPolicy(max_bytes=1 << 20, timeout=2.0, attempts=2, backoff=0.01)

BAD_URLS = [
    "http://127.0.0.1:abc",  # the issue's reproducer: passed decode_record, then httpx.InvalidURL killed the miner
    "http://h:80:90",
    "http://127.0.0.1:8000\x00",
    "http://a\x00b:80",
    "http://a\x08b:80",
    "http://a\x7fb:80",
    "http://h:80/\x7f",
    "http://h :80",
    "http://h:80 /",
    "ftp://h:21",
    "file:///etc/passwd",
    "javascript://h/",
    "HTTP://h:80",
    "h:80",
    "//h:80",
    "http://",
    "http://:80",
    "http:///x",
    "http://h:0",
    "http://h:65536",
    "http://h:99999",
    "http://h:-1",
    "http://h:+80",
    "http://h:",
    "http://999.1.1.1:80",
    "http://[::1:80",
    "http://[zz]:80",
    "http://u:p@h:80",
    "http://h:80?q=1",
    "http://h:80#f",
    "http://h:80/%zz",
    "http://-h:80",
    "http://h_1:80",
    "http://" + "a" * 64 + ":80",
    "http://h/" + "x" * 300,
    "http://h\u00e9:80",
]
GOOD_URLS = [
    "http://127.0.0.1:8000",
    "https://node.example:443/x",
    "http://localhost",
    "http://[::1]:8080/a/b",
    "https://n-1.example.org/p%20q",
]


def _signed_record_with_url(url: str) -> bytes:
    """A record with ``url``, signed by a fresh key (anyone can make one), bypassing ``make_record``'s check."""
    acct = Account.create()
    rec = NodeRecord(31337, acct.address, "validator", 3, url, NOW + 600, (Served("checkpoint", "ab" * 32),))
    return sign_record(rec, acct.key).encode()


@pytest.mark.parametrize("url", BAD_URLS)
def test_bad_urls_are_refused_when_a_record_is_decoded(url: str) -> None:
    with pytest.raises(BadURLError):
        check_url(url)
    data = _signed_record_with_url(url)
    with pytest.raises(MalformedRecordError):  # BadURLError, or the record is not ASCII JSON at all
        decode_record(data, now=NOW)
    with pytest.raises(RecordError):
        make_record("0x" + "42" * 32, chain_id=31337, role="miner", round=1, url=url, now=NOW)


@pytest.mark.parametrize("url", GOOD_URLS)
def test_good_urls_pass_and_parse_in_httpx(url: str) -> None:
    assert check_url(url) == url
    assert decode_record(_signed_record_with_url(url), now=NOW).url == url
    httpx.URL(url)


def test_the_invalid_port_record_of_the_issue_is_refused_as_a_bad_url() -> None:
    with pytest.raises(BadURLError, match="port"):
        decode_record(_signed_record_with_url("http://127.0.0.1:abc"), now=NOW)


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeServer, BlobStore]]:
    store = BlobStore(tmp_path_factory.mktemp("blobs"))
    app = create_node_app(
        role="miner", status=lambda: {"round": 1}, store=store, metrics=NodeMetrics.create("miner")
    )
    server = NodeServer(app).start()
    yield server, store
    server.stop()


@pytest.mark.parametrize(
    "bad", ["http://127.0.0.1:abc", "http://h:80:90", "http://a\x00b", "http://a\x7f", "ftp://h"]
)
def test_fetch_moves_past_a_url_the_client_refuses(good: tuple[NodeServer, BlobStore], bad: str) -> None:
    server, store = good
    digest = store.put(b"the good blob " + bad.encode("unicode_escape"))
    assert fetch_blob([bad, server.url], digest, policy=FAST, sleep=lambda s: None) == store.get(digest)
    with pytest.raises(TransferError):
        fetch_blob([bad], digest, policy=FAST, sleep=lambda s: None)
    with pytest.raises(TransferError):
        get_capped(bad + "/health", max_bytes=1000, timeout=1.0)


def test_fetch_moves_past_bytes_the_digest_function_cannot_parse(good: tuple[NodeServer, BlobStore]) -> None:
    server, store = good
    import torch

    blob = encode_tensors({"param/w": torch.arange(6, dtype=torch.float32)})
    digest = tensor_blob_digest(blob)
    store.put(blob, digest, digest_fn=tensor_blob_digest)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "junk.example":
            return httpx.Response(
                200, content=b"\xff" * 100
            )  # not a tensor blob: TensorBlobError in digest_fn
        return httpx.Response(200, content=httpx.get(f"{server.url}{request.url.path}").content)

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        got = fetch_blob(
            ["http://junk.example", "http://good.example"], digest, policy=FAST, digest_fn=tensor_blob_digest,
            client=client, sleep=lambda s: None,
        )  # fmt: skip
    assert got == blob


@pytest.mark.parametrize("exc", [KeyError("k"), ValueError("v"), UnicodeError("u"), httpx.InvalidURL("bad")])
def test_fetch_moves_past_an_error_of_any_type_from_one_peer(
    good: tuple[NodeServer, BlobStore], exc: Exception
) -> None:
    server, store = good
    digest = store.put(b"any-type " + repr(exc).encode())

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "evil.example":
            raise exc
        return httpx.Response(200, content=store.get(digest))

    before = sum(peer_failure_counts().values())
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        got = fetch_blob(
            ["http://evil.example", "http://good.example"], digest, policy=FAST, client=client, sleep=lambda s: None
        )  # fmt: skip
        assert got == store.get(digest)
        with pytest.raises(PeerUnavailableError):
            fetch_blob(["http://evil.example"], digest, policy=FAST, client=client, sleep=lambda s: None)
    if not isinstance(exc, httpx.InvalidURL):  # typed inside _stream_one; the others are counted
        assert sum(peer_failure_counts().values()) > before


def test_fetch_skips_peer_entries_that_are_not_strings(good: tuple[NodeServer, BlobStore]) -> None:
    server, store = good
    digest = store.put(b"not-a-string peers")
    assert fetch_blob([None, 5, server.url], digest, policy=FAST) == store.get(digest)  # type: ignore[list-item]


class _Found:
    def __init__(self, value: object) -> None:
        self.value = value


class _Future:
    def __init__(self, value: object) -> None:
        self._value = value

    def result(self, timeout: float | None = None) -> object:
        return self._value


class _Weird:
    """A subkey whose ``str`` raises: any value a stranger stores must be refused, not crash the reader."""

    def __str__(self) -> str:
        raise UnicodeError("no text for you")


def test_dht_lookup_refuses_bad_url_records_and_odd_values_one_by_one() -> None:
    from types import SimpleNamespace

    from protocol.p2p.dht import DHTConfig, DHTNode

    acct = Account.create()
    good = sign_record(
        NodeRecord(31337, acct.address, "validator", 3, "http://127.0.0.1:8000", NOW + 600), acct.key
    )
    bad_acct = Account.create()
    bad = _signed_record_with_url("http://127.0.0.1:abc")
    entries = {
        acct.address: _Found(good.encode()),
        bad_acct.address: _Found(bad),
        "zz": _Found(b"\x00not json"),
        "yy": _Found(12),
        _Weird(): _Found(b"{}"),
    }
    node = DHTNode(DHTConfig())
    node._dht = SimpleNamespace(get=lambda *a, **k: _Future(_Found(entries)))
    try:
        res = node.lookup(31337, 3, now=NOW)
    finally:
        node._dht = None
    assert [r.address for r in res.records] == [acct.address]
    assert len(res.refused) == 4 and all(isinstance(e, RecordError) for _, e in res.refused)


def test_discovery_survives_an_untyped_error_from_the_dht() -> None:
    from protocol.p2p.discovery import Discovery

    class _Broken:
        running = True

        def lookup(self, chain_id: int, round: int) -> object:
            raise TypeError("a value the DHT client cannot handle")

    d = Discovery(31337, "0x" + "42" * 32, dht=_Broken(), fallback_urls=("http://127.0.0.1:9",))  # type: ignore[arg-type]
    assert d.find(3) == []
    assert d.urls_for(3, "checkpoint", "ab" * 32) == ["http://127.0.0.1:9"]
    assert d.errors and "TypeError" in d.errors[-1]
