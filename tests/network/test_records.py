"""Signed DHT records: round trip and strict refusal of malformed or badly signed records."""

from __future__ import annotations

import json

import pytest
from eth_account import Account

from protocol.wire.canonical import dumps_canonical
from protocol.wire.records import (
    BadSignatureError,
    ExpiredRecordError,
    MalformedRecordError,
    NodeRecord,
    RecordError,
    Served,
    decode_record,
    make_record,
)

KEY = "0x" + "11" * 32
OTHER = "0x" + "22" * 32
NOW = 1_800_000_000.0


def _rec(**kw: object) -> NodeRecord:
    args: dict = dict(chain_id=31337, role="miner", round=3, url="http://127.0.0.1:8000", now=NOW)
    args.update(kw)
    return make_record(KEY, serves=[Served("update", "0x" + "ab" * 32, 123)], **args)


def test_round_trip() -> None:
    rec = _rec()
    back = decode_record(rec.encode(), now=NOW, chain_id=31337)
    assert back == rec
    assert back.address == Account.from_key(KEY).address
    assert back.digest_of("update") == "0x" + "ab" * 32
    assert back.digest_of("checkpoint") is None


def test_wrong_signer_refused() -> None:
    rec = _rec()
    forged = NodeRecord(**{**rec.__dict__, "address": Account.from_key(OTHER).address})
    with pytest.raises(BadSignatureError):
        decode_record(forged.encode(), now=NOW)


def test_tampered_field_refused() -> None:
    doc = json.loads(_rec().encode())
    doc["url"] = "http://evil.example:1"
    with pytest.raises(BadSignatureError):
        decode_record(dumps_canonical(doc), now=NOW)


def test_expired_and_too_long_lived() -> None:
    rec = _rec(ttl=10)
    with pytest.raises(ExpiredRecordError):
        decode_record(rec.encode(), now=NOW + 11)
    with pytest.raises(ExpiredRecordError):
        decode_record(_rec(ttl=10**7).encode(), now=NOW)


def test_wrong_chain() -> None:
    with pytest.raises(MalformedRecordError):
        decode_record(_rec().encode(), now=NOW, chain_id=1)


@pytest.mark.parametrize(
    "junk",
    [
        b"",
        b"\x80\x81",
        b"[]",
        b"null",
        b"{}",
        b"x" * 5000,
        b'{"v":1}',
        b"\x93\x01\x02\x03",  # msgpack, not JSON
        b"cos\nsystem\n(S'echo hi'\ntR.",  # a pickle: must never be unpickled
    ],
)
def test_junk_refused(junk: bytes) -> None:
    with pytest.raises(MalformedRecordError):
        decode_record(junk, now=NOW)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("role", "king"),
        ("round", -1),
        ("round", True),
        ("round", "3"),
        ("url", "file:///etc/passwd"),
        ("url", "http://user:pw@host/"),
        ("address", "0xabc"),
        ("signature", "0x00"),
        ("serves", [{"kind": "update", "digest": "zz", "size": 1}]),
        ("serves", [{"kind": "weights", "digest": "ab" * 32, "size": 1}]),
        ("serves", "nope"),
        ("v", 2),
    ],
)
def test_bad_field_refused(field: str, value: object) -> None:
    doc = json.loads(_rec().encode())
    doc[field] = value
    with pytest.raises(RecordError):
        decode_record(dumps_canonical(doc), now=NOW)


def test_extra_key_and_noncanonical_refused() -> None:
    doc = json.loads(_rec().encode())
    with pytest.raises(MalformedRecordError):
        decode_record(dumps_canonical({**doc, "x": 1}), now=NOW)
    with pytest.raises(MalformedRecordError):
        decode_record(json.dumps(doc, indent=1).encode(), now=NOW)


def test_sign_with_wrong_key_refused() -> None:
    with pytest.raises(RecordError):
        from protocol.wire.records import sign_record

        sign_record(_rec(), OTHER)
