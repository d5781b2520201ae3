"""The fixed-layout parts of an Intel DCAP quote: the 48-byte header, the SGX enclave report (384 bytes)
and the TD report 1.0 (584) or 1.5 (648), each read and written by one field spec.

The quote around them (body descriptor, signature data, certification data) is in
:mod:`attestation.intel.quote`, which re-exports everything here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, fields
from typing import Any

from attestation.bytereader import ByteReader
from attestation.errors import MalformedEvidenceError, UnsupportedKeyTypeError, UnsupportedVersionError

HEADER_LEN = 48
SGX_REPORT_LEN = 384
TD10_REPORT_LEN = 584
TD15_REPORT_LEN = 648
ATT_KEY_TYPE_ECDSA_P256 = 2
TEE_TYPE_SGX = 0x00000000
TEE_TYPE_TDX = 0x00000081
SUPPORTED_VERSIONS = (3, 4, 5)


_INT_CODES = {-1: "B", -2: "H", -4: "I", -8: "Q"}
_STRUCTS: dict[tuple[tuple[str, int], ...], struct.Struct] = {}


def _compiled(spec: tuple[tuple[str, int], ...]) -> struct.Struct:
    st = _STRUCTS.get(spec)
    if st is None:
        fmt = "<" + "".join(_INT_CODES[size] if size < 0 else f"{size}s" for _, size in spec)
        st = _STRUCTS[spec] = struct.Struct(fmt)
    return st


def parse_fields(r: ByteReader, spec: tuple[tuple[str, int], ...], what: str) -> dict[str, Any]:
    """Read ``spec`` (name, size; negative size = little-endian unsigned int of -size bytes)."""
    st = _compiled(spec)
    values = st.unpack(r.take(st.size, what))
    return {name: v for (name, _), v in zip(spec, values, strict=True)}


def dump_fields(obj: object, spec: tuple[tuple[str, int], ...]) -> bytes:
    """Write the fields ``spec`` names from ``obj`` (the inverse of :func:`parse_fields`)."""
    return _compiled(spec).pack(*(getattr(obj, name) for name, _ in spec))


_HEADER_SPEC = (
    ("version", -2),
    ("att_key_type", -2),
    ("tee_type", -4),
    ("qe_svn", -2),
    ("pce_svn", -2),
    ("qe_vendor_id", 16),
    ("user_data", 20),
)


@dataclass(frozen=True)
class QuoteHeader:
    """The 48-byte quote header."""

    version: int
    att_key_type: int
    tee_type: int
    qe_svn: int
    pce_svn: int
    qe_vendor_id: bytes
    user_data: bytes

    @classmethod
    def read(cls, r: ByteReader) -> QuoteHeader:
        """Read and check the header: supported version, key type and TEE type."""
        h = cls(**parse_fields(r, _HEADER_SPEC, "quote header"))
        if h.version not in SUPPORTED_VERSIONS:
            raise UnsupportedVersionError(
                f"Intel quote version {h.version} is not supported (supported: 3, 4, 5); "
                f"update the quote generation library (DCAP QPL/QGS) on the miner"
            )
        if h.att_key_type != ATT_KEY_TYPE_ECDSA_P256:
            raise UnsupportedKeyTypeError(
                f"attestation key type {h.att_key_type} is not supported (only 2, ECDSA-256 with P-256)"
            )
        if h.tee_type not in (TEE_TYPE_SGX, TEE_TYPE_TDX) or (h.version == 3 and h.tee_type != TEE_TYPE_SGX):
            raise UnsupportedVersionError(
                f"TEE type 0x{h.tee_type:x} is not valid for a version {h.version} quote (0 SGX, 0x81 TDX)"
            )
        return h

    def to_bytes(self) -> bytes:
        """The 48 header bytes."""
        return dump_fields(self, _HEADER_SPEC)


_SGX_SPEC = (
    ("cpu_svn", 16),
    ("misc_select", -4),
    ("reserved1", 28),
    ("attributes", 16),
    ("mr_enclave", 32),
    ("reserved2", 32),
    ("mr_signer", 32),
    ("reserved3", 96),
    ("isv_prod_id", -2),
    ("isv_svn", -2),
    ("reserved4", 60),
    ("report_data", 64),
)


@dataclass(frozen=True)
class EnclaveReport:
    """An SGX enclave report (384 bytes): the ISV enclave's body, or the QE report."""

    cpu_svn: bytes
    misc_select: int
    reserved1: bytes
    attributes: bytes
    mr_enclave: bytes
    reserved2: bytes
    mr_signer: bytes
    reserved3: bytes
    isv_prod_id: int
    isv_svn: int
    reserved4: bytes
    report_data: bytes

    @classmethod
    def read(cls, r: ByteReader) -> EnclaveReport:
        """Read 384 bytes."""
        return cls(**parse_fields(r, _SGX_SPEC, "SGX report"))

    @classmethod
    def from_bytes(cls, data: bytes) -> EnclaveReport:
        """Parse exactly 384 bytes."""
        if len(data) != SGX_REPORT_LEN:
            raise MalformedEvidenceError(f"an SGX report is 384 bytes, got {len(data)}")
        return cls.read(ByteReader(data, "SGX report"))

    def to_bytes(self) -> bytes:
        """The 384 report bytes."""
        return dump_fields(self, _SGX_SPEC)

    @property
    def debug(self) -> bool:
        """ATTRIBUTES.DEBUG (flags bit 1)."""
        return bool(self.attributes[0] & 0x02)


_TD10_SPEC = (
    ("tee_tcb_svn", 16),
    ("mr_seam", 48),
    ("mr_signer_seam", 48),
    ("seam_attributes", 8),
    ("td_attributes", 8),
    ("xfam", 8),
    ("mr_td", 48),
    ("mr_config_id", 48),
    ("mr_owner", 48),
    ("mr_owner_config", 48),
    ("rtmr0", 48),
    ("rtmr1", 48),
    ("rtmr2", 48),
    ("rtmr3", 48),
    ("report_data", 64),
)
_TD15_EXTRA = (("tee_tcb_svn2", 16), ("mr_service_td", 48))


@dataclass(frozen=True)
class TdReport:
    """A TD report as carried in a quote: 1.0 (584 bytes) or 1.5 (648 bytes, two more fields)."""

    tee_tcb_svn: bytes
    mr_seam: bytes
    mr_signer_seam: bytes
    seam_attributes: bytes
    td_attributes: bytes
    xfam: bytes
    mr_td: bytes
    mr_config_id: bytes
    mr_owner: bytes
    mr_owner_config: bytes
    rtmr0: bytes
    rtmr1: bytes
    rtmr2: bytes
    rtmr3: bytes
    report_data: bytes
    tee_tcb_svn2: bytes | None = None
    mr_service_td: bytes | None = None

    @classmethod
    def read(cls, r: ByteReader, v15: bool) -> TdReport:
        """Read a TD report 1.0 or 1.5."""
        kw = parse_fields(r, _TD10_SPEC, "TD report")
        if v15:
            kw.update(parse_fields(r, _TD15_EXTRA, "TD report 1.5 fields"))
        return cls(**kw)

    @property
    def is_v15(self) -> bool:
        """Whether this is a TD report 1.5."""
        return self.tee_tcb_svn2 is not None

    def to_bytes(self) -> bytes:
        """The 584 or 648 report bytes."""
        out = dump_fields(self, _TD10_SPEC)
        if self.is_v15:
            out += dump_fields(self, _TD15_EXTRA)
        return out

    @property
    def rtmrs(self) -> tuple[bytes, bytes, bytes, bytes]:
        """RTMR0..RTMR3."""
        return (self.rtmr0, self.rtmr1, self.rtmr2, self.rtmr3)

    @property
    def debug(self) -> bool:
        """TD attributes TUD bits (7:0): DEBUG or any reserved under-debug bit set means untrusted."""
        return self.td_attributes[0] != 0


def field_names(cls: type) -> list[str]:
    """The field names of a report dataclass (for printing)."""
    return [f.name for f in fields(cls)]
