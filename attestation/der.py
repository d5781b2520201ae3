"""Minimal, bounds-checked DER decoding for the vendor X.509 extensions (Intel SGX, AMD VCEK).

Only what those extensions use: definite lengths, SEQUENCE, OID, INTEGER, OCTET STRING, ENUMERATED.
"""

from __future__ import annotations

from dataclasses import dataclass

from attestation.errors import MalformedEvidenceError

TAG_INTEGER = 0x02
TAG_OCTET_STRING = 0x04
TAG_OID = 0x06
TAG_ENUMERATED = 0x0A
TAG_SEQUENCE = 0x30


@dataclass(frozen=True)
class Tlv:
    """One DER element: its tag and the bytes of its contents."""

    tag: int
    value: bytes


def _fail(what: str, msg: str) -> MalformedEvidenceError:
    return MalformedEvidenceError(f"{what}: bad DER ({msg}); the certificate is not a genuine vendor one")


def read_tlvs(data: bytes, what: str) -> list[Tlv]:
    """Split ``data`` into consecutive DER elements; the elements must tile ``data`` exactly."""
    out: list[Tlv] = []
    pos = 0
    n = len(data)
    while pos < n:
        if pos + 2 > n:
            raise _fail(what, "truncated header")
        tag = data[pos]
        if tag & 0x1F == 0x1F:
            raise _fail(what, "multi-byte tags are not used here")
        length = data[pos + 1]
        pos += 2
        if length & 0x80:
            k = length & 0x7F
            if k == 0 or k > 4 or pos + k > n:
                raise _fail(what, "bad length")
            length = int.from_bytes(data[pos : pos + k], "big")
            if length < 0x80 or data[pos] == 0:
                raise _fail(what, "non-minimal length")
            pos += k
        if pos + length > n:
            raise _fail(what, "element runs past the end")
        out.append(Tlv(tag, data[pos : pos + length]))
        pos += length
    return out


def read_one(data: bytes, tag: int, what: str) -> bytes:
    """Decode exactly one element of ``tag`` and return its contents."""
    tlvs = read_tlvs(data, what)
    if len(tlvs) != 1 or tlvs[0].tag != tag:
        raise _fail(what, f"expected one element of tag 0x{tag:02x}")
    return tlvs[0].value


def decode_integer(value: bytes, what: str) -> int:
    """Decode the contents of a non-negative INTEGER or ENUMERATED."""
    if not value:
        raise _fail(what, "empty integer")
    if len(value) > 1 and (value[0] == 0 and value[1] < 0x80):
        raise _fail(what, "non-minimal integer")
    if value[0] & 0x80:
        raise _fail(what, "negative integer")
    return int.from_bytes(value, "big")


def decode_oid(value: bytes, what: str) -> str:
    """Decode the contents of an OBJECT IDENTIFIER into dotted form."""
    if not value or value[-1] & 0x80:
        raise _fail(what, "bad OID")
    arcs: list[int] = []
    acc = 0
    for b in value:
        acc = (acc << 7) | (b & 0x7F)
        if not b & 0x80:
            arcs.append(acc)
            acc = 0
    first = arcs[0]
    head = [0, first] if first < 40 else [1, first - 40] if first < 80 else [2, first - 80]
    return ".".join(str(a) for a in head + arcs[1:])
