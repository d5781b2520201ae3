"""Signed node records: what a node announces in the DHT (who, which round, what it serves, where).

A record is canonical JSON bytes (never pickle) carrying an EIP-191 signature of its canonical body by
the node's Ethereum key. Readers validate strictly: exact key set, types, sizes, the URL (:func:`check_url`), expiry and
the signature recovering to the claimed address. Anything else is refused with a typed
:class:`RecordError` subclass; the reader carries on with the other records.
"""

from __future__ import annotations

import ipaddress
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from eth_account import Account
from eth_account.messages import encode_defunct
from eth_utils import is_checksum_address

from protocol.errors import ProtocolError
from protocol.wire.canonical import CanonicalJSONError, check_json_depth, dumps_canonical

#: Domain separator signed together with the body, so a record signature is good for nothing else.
RECORD_DOMAIN = "tessera-node-record-v1"
#: Largest encoded record accepted (bytes).
MAX_RECORD_BYTES = 4096
#: Longest lifetime a record may claim (seconds).
MAX_RECORD_TTL = 24 * 3600
#: Most served items in one record.
MAX_SERVED = 64
ROLES = ("miner", "validator")
#: What a node may say it serves.
SERVED_KINDS = ("update", "checkpoint", "transcript", "evidence")

#: Longest URL a record may carry.
MAX_URL_CHARS = 256
_DNS_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
_URL_PATH = re.compile(r"^(/([A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})*)*$")
_PORT = re.compile(r"^[0-9]{1,5}$")
_HEX_DIGEST = re.compile(r"^(0x)?[0-9a-f]{16,128}$")
_RECORD_KEYS = {"v", "chain_id", "address", "role", "round", "url", "serves", "expires", "signature"}


class RecordError(ProtocolError):
    """A DHT record was refused."""


class MalformedRecordError(RecordError):
    """The record bytes are not a well-formed record (size, encoding, keys, types, values)."""


class BadURLError(MalformedRecordError):
    """The record's URL is not an ``http(s)://host[:port][/path]`` URL every client parses the same way."""


class BadSignatureError(RecordError):
    """The record's signature does not recover to the address it claims."""


class ExpiredRecordError(RecordError):
    """The record expired, or claims a lifetime longer than allowed."""


@dataclass(frozen=True)
class Served:
    """One thing a node serves: its kind and its digest (lower-case hex)."""

    kind: str
    digest: str
    size: int = 0

    def to_json(self) -> dict[str, Any]:
        """The canonical JSON form."""
        return {"kind": self.kind, "digest": self.digest, "size": self.size}


@dataclass(frozen=True)
class NodeRecord:
    """A node's announcement. ``signature`` is empty until :func:`sign_record`."""

    chain_id: int
    address: str
    role: str
    round: int
    url: str
    expires: int
    serves: tuple[Served, ...] = field(default_factory=tuple)
    signature: str = ""

    def body(self) -> dict[str, Any]:
        """The signed part of the record."""
        return {
            "v": 1,
            "chain_id": self.chain_id,
            "address": self.address,
            "role": self.role,
            "round": self.round,
            "url": self.url,
            "serves": [s.to_json() for s in self.serves],
            "expires": self.expires,
        }

    def signing_bytes(self) -> bytes:
        """Canonical bytes the signature covers: the domain, a newline, the canonical body."""
        return RECORD_DOMAIN.encode() + b"\n" + dumps_canonical(self.body())

    def encode(self) -> bytes:
        """The record's wire bytes (canonical JSON including the signature)."""
        doc = self.body()
        doc["signature"] = self.signature
        return dumps_canonical(doc)

    def digest_of(self, kind: str) -> str | None:
        """The first served digest of a kind, if any."""
        for s in self.serves:
            if s.kind == kind:
                return s.digest
        return None


def sign_record(record: NodeRecord, private_key: str | bytes) -> NodeRecord:
    """Return ``record`` signed by ``private_key``; the key's address must be the record's address."""
    acct = Account.from_key(private_key)
    if acct.address != record.address:
        raise RecordError(f"key address {acct.address} does not match record address {record.address}")
    signed = acct.sign_message(encode_defunct(primitive=record.signing_bytes()))
    return NodeRecord(**{**record.__dict__, "signature": "0x" + bytes(signed.signature).hex()})


def make_record(
    private_key: str | bytes,
    *,
    chain_id: int,
    role: str,
    round: int,
    url: str,
    serves: list[Served] | tuple[Served, ...] = (),
    ttl: int = 3600,
    now: float | None = None,
) -> NodeRecord:
    """Build and sign a record for the key's address."""
    address = Account.from_key(private_key).address
    expires = int((time.time() if now is None else now) + ttl)
    rec = NodeRecord(chain_id, address, role, round, url, expires, tuple(serves))
    validate_fields(rec)
    return sign_record(rec, private_key)


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise MalformedRecordError(msg)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def validate_fields(rec: NodeRecord) -> None:
    """Check every field's type and range (not the signature or the clock)."""
    _require(_is_int(rec.chain_id) and 0 < rec.chain_id < 2**63, "chain_id must be a positive integer")
    _require(isinstance(rec.address, str) and is_checksum_address(rec.address), "address must be checksummed")
    _require(rec.role in ROLES, f"role must be one of {ROLES}")
    _require(_is_int(rec.round) and 0 <= rec.round < 2**63, "round must be a non-negative integer")
    _require(_is_int(rec.expires) and 0 < rec.expires < 2**40, "expires must be a unix time")
    check_url(rec.url)
    _require(len(rec.serves) <= MAX_SERVED, f"at most {MAX_SERVED} served items")
    for s in rec.serves:
        _require(s.kind in SERVED_KINDS, f"served kind must be one of {SERVED_KINDS}")
        _require(isinstance(s.digest, str) and bool(_HEX_DIGEST.match(s.digest)), "digest must be hex")
        _require(_is_int(s.size) and 0 <= s.size < 2**40, "size must be a non-negative integer")


def check_url(url: object) -> str:
    """``url`` if it is a peer URL this node will fetch from, else :class:`BadURLError`.

    Parsed strictly, so that what a record announces is what every client parses: printable ASCII only
    (no control bytes, no spaces, no DEL), at most :data:`MAX_URL_CHARS`; scheme ``http`` or ``https``;
    no credentials, query or fragment; a host that is a DNS name, an IPv4 address or a bracketed IPv6
    address; an optional decimal port in 1..65535; an optional path of RFC 3986 path characters; and
    ``httpx`` (the fetching client) must parse it too.
    """

    def bad(why: str) -> BadURLError:
        return BadURLError(f"url {str(url)[:80]!r}: {why}")

    if not isinstance(url, str):
        raise bad("not a string")
    if not 0 < len(url) <= MAX_URL_CHARS:
        raise bad(f"must be 1 to {MAX_URL_CHARS} characters")
    if not all(0x21 <= ord(c) <= 0x7E for c in url):
        raise bad("holds a control, space, DEL or non-ASCII character")
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("http", "https"):
        raise bad("scheme must be http or https")
    netloc, slash, path = rest.partition("/")
    path = slash + path
    if "?" in path or "#" in path or "?" in netloc or "#" in netloc:
        raise bad("must not carry a query or fragment")
    if "@" in netloc:
        raise bad("must not carry credentials")
    if not _URL_PATH.match(path):
        raise bad("path holds characters outside RFC 3986")
    port = _port_of(netloc, bad)
    if port is not None and (not _PORT.match(port) or not 0 < int(port) <= 65535):
        raise bad("port must be a decimal number in 1..65535")
    try:
        parsed = httpx.URL(url)
    except Exception as exc:  # httpx.InvalidURL, or whatever else its parser raises
        raise bad(f"httpx refuses it: {type(exc).__name__}: {exc}") from exc
    if parsed.scheme != scheme or not parsed.host:
        raise bad("httpx parses it differently")
    return url


def _port_of(netloc: str, bad: Callable[[str], BadURLError]) -> str | None:
    """The port of ``netloc`` (None if it names none), once its host is checked: a bracketed IPv6
    address, an IPv4 address or a DNS name; else ``bad(why)`` is raised."""
    port: str | None
    if netloc.startswith("["):
        host, close, after = netloc[1:].partition("]")
        if not close or (after and not after.startswith(":")):
            raise bad("malformed IPv6 host")
        port = after[1:] if after else None
        try:
            ipaddress.IPv6Address(host)
        except ValueError as exc:
            raise bad(f"bad IPv6 host: {exc}") from exc
    else:
        host, colon, port_s = netloc.partition(":")
        port = port_s if colon else None
        if not host:
            raise bad("has no host")
        if re.fullmatch(r"[0-9.]+", host):
            try:
                ipaddress.IPv4Address(host)
            except ValueError as exc:
                raise bad(f"bad IPv4 host: {exc}") from exc
        elif len(host) > 253 or not all(_DNS_LABEL.match(label) for label in host.split(".")):
            raise bad("host is not a DNS name or IP address")
    return port


def decode_record(
    data: bytes,
    *,
    now: float | None = None,
    chain_id: int | None = None,
    max_ttl: int = MAX_RECORD_TTL,
) -> NodeRecord:
    """Parse and strictly validate record bytes; raise a :class:`RecordError` subclass on any fault."""
    if not isinstance(data, bytes | bytearray):
        raise MalformedRecordError(f"record must be bytes, got {type(data).__name__}")
    if len(data) > MAX_RECORD_BYTES:
        raise MalformedRecordError(f"record of {len(data)} bytes exceeds {MAX_RECORD_BYTES}")
    try:
        check_json_depth(data)
        doc = json.loads(bytes(data).decode("ascii"))
    except (CanonicalJSONError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise MalformedRecordError(f"record is not ASCII JSON: {exc}") from exc
    _require(isinstance(doc, dict), "record must be a JSON object")
    _require(set(doc) == _RECORD_KEYS, f"record keys must be exactly {sorted(_RECORD_KEYS)}")
    _require(doc["v"] == 1 and _is_int(doc["v"]), "unsupported record version")
    _require(isinstance(doc["serves"], list), "serves must be a list")
    serves: list[Served] = []
    for item in doc["serves"]:
        _require(isinstance(item, dict) and set(item) == {"kind", "digest", "size"}, "bad served item")
        serves.append(Served(item["kind"], item["digest"], item["size"]))
    for key in ("signature", "address", "role", "url"):
        _require(isinstance(doc[key], str), f"{key} must be a string")
    rec = NodeRecord(
        chain_id=doc["chain_id"],
        address=doc["address"],
        role=doc["role"],
        round=doc["round"],
        url=doc["url"],
        expires=doc["expires"],
        serves=tuple(serves),
        signature=doc["signature"],
    )
    validate_fields(rec)
    try:
        canonical = dumps_canonical(doc)  # the one canonical JSON (protocol.wire.canonical): no floats
    except CanonicalJSONError as exc:
        raise MalformedRecordError(f"record is not canonical JSON: {exc}") from exc
    if canonical != bytes(data):
        raise MalformedRecordError("record is not in canonical form")
    if chain_id is not None and rec.chain_id != chain_id:
        raise MalformedRecordError(f"record is for chain {rec.chain_id}, expected {chain_id}")
    t = time.time() if now is None else now
    if rec.expires <= t:
        raise ExpiredRecordError(f"record expired at {rec.expires} (now {int(t)})")
    if rec.expires > t + max_ttl:
        raise ExpiredRecordError(f"record lifetime exceeds {max_ttl}s")
    sig = rec.signature
    _require(bool(re.fullmatch(r"0x[0-9a-f]{130}", sig)), "signature must be 65 bytes of 0x-hex")
    try:
        signer = Account.recover_message(encode_defunct(primitive=rec.signing_bytes()), signature=sig)
    except Exception as exc:  # eth-keys raises several types for junk signatures
        raise BadSignatureError(f"signature does not recover: {exc}") from exc
    if signer != rec.address:
        raise BadSignatureError(f"signed by {signer}, claims {rec.address}")
    return rec
