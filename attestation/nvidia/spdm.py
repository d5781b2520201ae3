"""SPDM 1.1 GET_MEASUREMENTS request and MEASUREMENTS response, as an H100 attestation report.

DMTF DSP0274 1.1.x: GET_MEASUREMENTS (section 10.11, table "GET_MEASUREMENTS request message"):
SPDMVersion u8 (0x11), RequestResponseCode u8 (0xE0), Param1 u8 (bit 0: signature requested),
Param2 u8 (0xFF: all blocks), Nonce 32 (when a signature is requested), SlotIDParam u8.
MEASUREMENTS response (table "Successful MEASUREMENTS response message"): SPDMVersion u8,
RequestResponseCode u8 (0x60), Param1 u8, Param2 u8, NumberOfBlocks u8, MeasurementRecordLength u24,
MeasurementRecord, Nonce 32, OpaqueLength u16, OpaqueData, Signature (96 bytes for ECDSA P-384).
Measurement block (table "Measurement block format"): Index u8, MeasurementSpecification u8 (bit 0
DMTF), MeasurementSize u16, Measurement; DMTF measurement: ValueType u8, ValueSize u16, Value.
NVIDIA opaque data: TLVs of u16 type, u16 length, value (type 3 driver version, 6 VBIOS version).

The signature (SPDM 1.1: no signing-context prefix) is ECDSA P-384 / SHA-384 over
request || response up to (not including) the signature. Bytes after the signature are kept as
``trailing``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from attestation.bytereader import ByteReader
from attestation.errors import MalformedEvidenceError, UnsupportedKeyTypeError, UnsupportedVersionError

SPDM_VERSION_11 = 0x11
GET_MEASUREMENTS = 0xE0
MEASUREMENTS = 0x60
REQUEST_LEN = 37
NONCE_LEN = 32
SIGNATURE_LEN = 96
OPAQUE_DRIVER_VERSION = 3
OPAQUE_VBIOS_VERSION = 6


class MeasurementBlock(NamedTuple):
    """One measurement block (DMTF format)."""

    idx: int
    spec: int
    value_type: int
    value: bytes

    def to_bytes(self) -> bytes:
        """The block bytes."""
        inner = bytes([self.value_type]) + len(self.value).to_bytes(2, "little") + self.value
        return bytes([self.idx, self.spec]) + len(inner).to_bytes(2, "little") + inner


@dataclass(frozen=True)
class SpdmRequest:
    """GET_MEASUREMENTS request."""

    version: int
    param1: int
    param2: int
    nonce: bytes
    slot_id: int

    def to_bytes(self) -> bytes:
        """The request bytes."""
        return (
            bytes([self.version, GET_MEASUREMENTS, self.param1, self.param2])
            + self.nonce
            + bytes([self.slot_id])
        )


@dataclass(frozen=True)
class SpdmResponse:
    """MEASUREMENTS response."""

    version: int
    param1: int
    param2: int
    blocks: tuple[MeasurementBlock, ...]
    nonce: bytes
    opaque: bytes
    signature: bytes

    def body(self) -> bytes:
        """Response bytes without the signature."""
        record = b"".join(b.to_bytes() for b in self.blocks)
        return (
            bytes([self.version, MEASUREMENTS, self.param1, self.param2, len(self.blocks)])
            + len(record).to_bytes(3, "little")
            + record
            + self.nonce
            + len(self.opaque).to_bytes(2, "little")
            + self.opaque
        )


@dataclass(frozen=True)
class GpuReport:
    """An H100 attestation report: request then response; ``GpuReport.parse(b).to_bytes() == b``."""

    request: SpdmRequest
    response: SpdmResponse
    opaque_fields: tuple[tuple[int, bytes], ...]
    signed: bytes
    trailing: bytes = b""

    @classmethod
    def parse(cls, data: bytes) -> GpuReport:
        """Parse binary report bytes (see :func:`decode_report_text` for the hex text form)."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise MalformedEvidenceError("a GPU report is bytes")
        data = bytes(data)
        r = ByteReader(data, "GPU attestation report")
        version = r.u8("request SPDMVersion")
        if version != SPDM_VERSION_11:
            raise UnsupportedVersionError(
                f"SPDM version 0x{version:02x} is not supported (0x11, SPDM 1.1 as H100 firmware speaks it)"
            )
        if r.u8("request code") != GET_MEASUREMENTS:
            raise MalformedEvidenceError("the report does not start with a GET_MEASUREMENTS request (0xE0)")
        p1 = r.u8("request Param1")
        p2 = r.u8("request Param2")
        if not p1 & 1:
            raise MalformedEvidenceError(
                "the GET_MEASUREMENTS request did not ask for a signature (Param1 bit 0): the report is "
                "unsigned; request signed measurements"
            )
        nonce = r.take(NONCE_LEN, "request nonce")
        slot = r.u8("request SlotIDParam")
        request = SpdmRequest(version, p1, p2, nonce, slot)
        rv = r.u8("response SPDMVersion")
        if rv != version:
            raise MalformedEvidenceError(f"response SPDM version 0x{rv:02x} differs from the request's")
        if r.u8("response code") != MEASUREMENTS:
            raise MalformedEvidenceError("the response is not a MEASUREMENTS response (0x60)")
        rp1 = r.u8("response Param1")
        rp2 = r.u8("response Param2")
        nblocks = r.u8("NumberOfBlocks")
        rec_len = r.u24("MeasurementRecordLength")
        blocks = _parse_record(r.take(rec_len, "measurement record"), nblocks)
        if p2 == 0xFF and nblocks == 0:
            raise MalformedEvidenceError("all measurements were requested but none were returned")
        rnonce = r.take(NONCE_LEN, "response nonce")
        opaque = r.take(r.u16("OpaqueLength"), "opaque data")
        signed = data[: r.pos]
        signature = r.take(SIGNATURE_LEN, "signature")
        trailing = r.rest()
        response = SpdmResponse(rv, rp1, rp2, blocks, rnonce, opaque, signature)
        return cls(request, response, _opaque_fields(opaque), signed, trailing)

    def to_bytes(self) -> bytes:
        """Serialize; equal to the parsed bytes."""
        return self.request.to_bytes() + self.response.body() + self.response.signature + self.trailing

    @property
    def nonce(self) -> bytes:
        """The verifier's nonce: the request nonce."""
        return self.request.nonce

    def opaque(self, kind: int) -> bytes | None:
        """The first opaque field of ``kind``."""
        for t, v in self.opaque_fields:
            if t == kind:
                return v
        return None


def _parse_record(record: bytes, nblocks: int) -> tuple[MeasurementBlock, ...]:
    """Split the measurement record into exactly ``nblocks`` DMTF blocks that tile it."""
    blocks = []
    pos, n = 0, len(record)
    for _ in range(nblocks):
        if pos + 4 > n:
            raise MalformedEvidenceError("the measurement record is truncated (block header)")
        idx, spec = record[pos], record[pos + 1]
        size = record[pos + 2] | (record[pos + 3] << 8)
        pos += 4
        if pos + size > n or size < 3:
            raise MalformedEvidenceError(f"measurement block {idx} runs past the record or is too short")
        if spec != 1:
            raise MalformedEvidenceError(f"measurement block {idx} is not in DMTF format")
        vtype = record[pos]
        vsize = record[pos + 1] | (record[pos + 2] << 8)
        if vsize != size - 3:
            raise MalformedEvidenceError(
                f"measurement block {idx}: DMTF value size disagrees with block size"
            )
        blocks.append(MeasurementBlock(idx, spec, vtype, record[pos + 3 : pos + size]))
        pos += size
    if pos != n:
        raise MalformedEvidenceError("the measurement record has bytes after its last block")
    return tuple(blocks)


def _opaque_fields(opaque: bytes) -> tuple[tuple[int, bytes], ...]:
    out = []
    pos, n = 0, len(opaque)
    while pos < n:
        if pos + 4 > n:
            raise MalformedEvidenceError("NVIDIA opaque data is truncated (field header)")
        kind = opaque[pos] | (opaque[pos + 1] << 8)
        size = opaque[pos + 2] | (opaque[pos + 3] << 8)
        if pos + 4 + size > n:
            raise MalformedEvidenceError(f"NVIDIA opaque field {kind} runs past the opaque data")
        out.append((kind, opaque[pos + 4 : pos + 4 + size]))
        pos += 4 + size
    return tuple(out)


def decode_report_text(text: str | bytes) -> bytes:
    """Decode the hex text form NVIDIA tools write (whitespace ignored)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("ascii")
        except UnicodeDecodeError:
            raise MalformedEvidenceError("the GPU report text is not ASCII hex") from None
    try:
        return bytes.fromhex("".join(text.split()))
    except ValueError:
        raise MalformedEvidenceError("the GPU report text is not hex") from None


def check_signature_size(key_size_bits: int) -> None:
    """Only P-384 (96-byte signatures) is supported."""
    if key_size_bits != 384:
        raise UnsupportedKeyTypeError(
            f"the GPU attestation key is {key_size_bits}-bit; only P-384 is supported"
        )
