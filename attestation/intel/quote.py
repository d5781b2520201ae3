"""Intel DCAP ECDSA quote v3, v4 and v5: strict, bounds-checked parsing that round-trips.

Layouts (Intel SGX ECDSA Quote Library API, appendix "Quote Format" for v3; Intel TDX DCAP Quoting
Library API, section "Quote Format" for v4 and v5):

* header, 48 bytes: version u16, attestation key type u16 (2 = ECDSA-256 with P-256), TEE type u32
  (0 SGX, 0x81 TDX; reserved and zero in v3), QE SVN u16, PCE SVN u16, QE vendor id 16, user data 20;
* v5 only: body type u16 (1 SGX report, 2 TD report 1.0, 3 TD report 1.5) and body size u32;
* body: SGX enclave report (384), TD report 1.0 (584) or TD report 1.5 (648);
* signature data length u32, then the signature data:
  v3: quote signature 64 (r||s), attestation key 64 (x||y), QE report 384, QE report signature 64,
  QE auth data (u16 size + bytes), certification data (u16 type, u32 size, bytes);
  v4/v5: quote signature 64, attestation key 64, certification data of type 6 whose bytes are
  QE report 384, QE report signature 64, QE auth data, and the inner certification data (type 5:
  the PEM PCK chain).

The quote signature covers header || (v5 body descriptor) || body. Bytes after the declared signature
data are kept in ``trailing`` and ignored by verification; the signature data itself must be tiled
exactly by its fields.
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
INTEL_QE_VENDOR_ID = bytes.fromhex("939a7233f79c4ca9940a0db3957f0607")
BODY_SGX = 1
BODY_TD10 = 2
BODY_TD15 = 3
CERT_PCK_CHAIN = 5
CERT_QE_REPORT = 6
SUPPORTED_VERSIONS = (3, 4, 5)


_INT_CODES = {-1: "B", -2: "H", -4: "I", -8: "Q"}
_STRUCTS: dict[tuple[tuple[str, int], ...], struct.Struct] = {}


def _compiled(spec: tuple[tuple[str, int], ...]) -> struct.Struct:
    st = _STRUCTS.get(spec)
    if st is None:
        fmt = "<" + "".join(_INT_CODES[size] if size < 0 else f"{size}s" for _, size in spec)
        st = _STRUCTS[spec] = struct.Struct(fmt)
    return st


def _parse_fields(r: ByteReader, spec: tuple[tuple[str, int], ...], what: str) -> dict[str, Any]:
    """Read ``spec`` (name, size; negative size = little-endian unsigned int of -size bytes)."""
    st = _compiled(spec)
    values = st.unpack(r.take(st.size, what))
    return {name: v for (name, _), v in zip(spec, values, strict=True)}


def _dump_fields(obj: object, spec: tuple[tuple[str, int], ...]) -> bytes:
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
        h = cls(**_parse_fields(r, _HEADER_SPEC, "quote header"))
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
        return _dump_fields(self, _HEADER_SPEC)


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
        return cls(**_parse_fields(r, _SGX_SPEC, "SGX report"))

    @classmethod
    def from_bytes(cls, data: bytes) -> EnclaveReport:
        """Parse exactly 384 bytes."""
        if len(data) != SGX_REPORT_LEN:
            raise MalformedEvidenceError(f"an SGX report is 384 bytes, got {len(data)}")
        return cls.read(ByteReader(data, "SGX report"))

    def to_bytes(self) -> bytes:
        """The 384 report bytes."""
        return _dump_fields(self, _SGX_SPEC)

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
        kw = _parse_fields(r, _TD10_SPEC, "TD report")
        if v15:
            kw.update(_parse_fields(r, _TD15_EXTRA, "TD report 1.5 fields"))
        return cls(**kw)

    @property
    def is_v15(self) -> bool:
        """Whether this is a TD report 1.5."""
        return self.tee_tcb_svn2 is not None

    def to_bytes(self) -> bytes:
        """The 584 or 648 report bytes."""
        out = _dump_fields(self, _TD10_SPEC)
        if self.is_v15:
            out += _dump_fields(self, _TD15_EXTRA)
        return out

    @property
    def rtmrs(self) -> tuple[bytes, bytes, bytes, bytes]:
        """RTMR0..RTMR3."""
        return (self.rtmr0, self.rtmr1, self.rtmr2, self.rtmr3)

    @property
    def debug(self) -> bool:
        """TD attributes TUD bits (7:0): DEBUG or any reserved under-debug bit set means untrusted."""
        return self.td_attributes[0] != 0


@dataclass(frozen=True)
class CertificationData:
    """Certification data: a type and its bytes (type 6 is parsed into ``qe``)."""

    cert_type: int
    data: bytes
    qe: QeReportCertificationData | None = None

    @classmethod
    def read(cls, r: ByteReader) -> CertificationData:
        """Read u16 type, u32 size and the bytes; type 6 is parsed and must tile its bytes exactly."""
        cert_type = r.u16("certification data type")
        size = r.u32("certification data size")
        data = r.take(size, "certification data")
        qe = None
        if cert_type == CERT_QE_REPORT:
            inner = ByteReader(data, "QE report certification data")
            qe = QeReportCertificationData.read(inner)
            if inner.remaining:
                raise MalformedEvidenceError(
                    f"QE report certification data has {inner.remaining} unexplained bytes at its end"
                )
        return cls(cert_type, data, qe)

    def to_bytes(self) -> bytes:
        """The encoded certification data."""
        body = self.qe.to_bytes() if self.qe is not None else self.data
        return self.cert_type.to_bytes(2, "little") + len(body).to_bytes(4, "little") + body


@dataclass(frozen=True)
class QeReportCertificationData:
    """Certification data type 6: the QE report, its PCK signature, QE auth data, inner cert data."""

    qe_report: EnclaveReport
    qe_report_raw: bytes
    qe_report_signature: bytes
    qe_auth_data: bytes
    certification_data: CertificationData

    @classmethod
    def read(cls, r: ByteReader) -> QeReportCertificationData:
        """Read the QE report block."""
        raw = r.take(SGX_REPORT_LEN, "QE report")
        report = EnclaveReport.from_bytes(raw)
        sig = r.take(64, "QE report signature")
        auth_len = r.u16("QE auth data size")
        auth = r.take(auth_len, "QE auth data")
        cert = CertificationData.read(r)
        if cert.cert_type == CERT_QE_REPORT:
            raise MalformedEvidenceError("nested QE report certification data (type 6 inside type 6)")
        return cls(report, raw, sig, auth, cert)

    def to_bytes(self) -> bytes:
        """The encoded block."""
        return (
            self.qe_report_raw
            + self.qe_report_signature
            + len(self.qe_auth_data).to_bytes(2, "little")
            + self.qe_auth_data
            + self.certification_data.to_bytes()
        )


@dataclass(frozen=True)
class Quote:
    """A parsed Intel DCAP ECDSA quote. ``Quote.parse(b).to_bytes() == b`` for every accepted ``b``."""

    header: QuoteHeader
    body_type: int
    """1 SGX, 2 TD 1.0, 3 TD 1.5 (carried in the bytes for v5, implied for v3/v4)."""
    body: EnclaveReport | TdReport
    signature: bytes
    attestation_key: bytes
    qe: QeReportCertificationData
    outer_certification: CertificationData | None
    """v4/v5: the outer certification data (type 6); v3: None (the QE block is inline)."""
    signed: bytes
    """The bytes the quote signature covers: header || (v5 body descriptor) || body."""
    trailing: bytes = b""

    @property
    def version(self) -> int:
        """Quote version (3, 4 or 5)."""
        return self.header.version

    @property
    def is_tdx(self) -> bool:
        """Whether the body is a TD report."""
        return isinstance(self.body, TdReport)

    @property
    def report_data(self) -> bytes:
        """The body's 64-byte report data."""
        return self.body.report_data

    @property
    def pck_certification(self) -> CertificationData:
        """The certification data that should hold the PCK chain (type 5)."""
        return self.qe.certification_data

    @classmethod
    def parse(cls, data: bytes) -> Quote:
        """Parse ``data``; raise MalformedEvidenceError or UnsupportedError on anything off-layout."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise MalformedEvidenceError("an Intel quote is bytes")
        data = bytes(data)
        r = ByteReader(data, "Intel quote")
        header = QuoteHeader.read(r)
        body: EnclaveReport | TdReport
        if header.version == 5:
            body_type = r.u16("body type")
            body_size = r.u32("body size")
            expected = {BODY_SGX: SGX_REPORT_LEN, BODY_TD10: TD10_REPORT_LEN, BODY_TD15: TD15_REPORT_LEN}
            if body_type not in expected:
                raise UnsupportedVersionError(
                    f"quote v5 body type {body_type} is not supported (1 SGX, 2 TD 1.0, 3 TD 1.5)"
                )
            if body_size != expected[body_type]:
                raise MalformedEvidenceError(
                    f"quote v5 body type {body_type} must be {expected[body_type]} bytes, header says {body_size}"
                )
            if (body_type == BODY_SGX) != (header.tee_type == TEE_TYPE_SGX):
                raise MalformedEvidenceError(
                    f"quote v5 body type {body_type} does not match TEE type 0x{header.tee_type:x}"
                )
        else:
            body_type = BODY_SGX if header.tee_type == TEE_TYPE_SGX else BODY_TD10
        if body_type == BODY_SGX:
            body = EnclaveReport.read(r)
        else:
            body = TdReport.read(r, v15=body_type == BODY_TD15)
        signed = data[: r.pos]
        sig_len = r.u32("signature data length")
        sig_data = r.take(sig_len, "signature data")
        trailing = r.rest()
        s = ByteReader(sig_data, "quote signature data")
        signature = s.take(64, "quote signature")
        att_key = s.take(64, "attestation key")
        outer: CertificationData | None
        if header.version == 3:
            qe = QeReportCertificationData.read(s)
            outer = None
        else:
            outer = CertificationData.read(s)
            if outer.qe is None:
                raise MalformedEvidenceError(
                    f"quote v{header.version} certification data must be type 6 (QE report certification "
                    f"data), got type {outer.cert_type}"
                )
            qe = outer.qe
        if s.remaining:
            raise MalformedEvidenceError(
                f"the quote's signature data has {s.remaining} unexplained bytes after its certification data"
            )
        return cls(header, body_type, body, signature, att_key, qe, outer, signed, trailing)

    def to_bytes(self) -> bytes:
        """Serialize; equal to the parsed bytes, trailing bytes included."""
        out = self.header.to_bytes()
        body = self.body.to_bytes()
        if self.header.version == 5:
            out += self.body_type.to_bytes(2, "little") + len(body).to_bytes(4, "little")
        out += body
        if self.outer_certification is None:
            sig_data = self.signature + self.attestation_key + self.qe.to_bytes()
        else:
            sig_data = self.signature + self.attestation_key + self.outer_certification.to_bytes()
        return out + len(sig_data).to_bytes(4, "little") + sig_data + self.trailing


def field_names(cls: type) -> list[str]:
    """The field names of a report dataclass (for printing)."""
    return [f.name for f in fields(cls)]
