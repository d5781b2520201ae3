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

The fixed-layout header and report bodies are in :mod:`attestation.intel.layouts` (re-exported here).
"""

from __future__ import annotations

from dataclasses import dataclass

from attestation.bytereader import ByteReader
from attestation.errors import MalformedEvidenceError, UnsupportedVersionError
from attestation.intel.layouts import (
    SGX_REPORT_LEN,
    TD10_REPORT_LEN,
    TD15_REPORT_LEN,
    TEE_TYPE_SGX,
    EnclaveReport,
    QuoteHeader,
    TdReport,
)

INTEL_QE_VENDOR_ID = bytes.fromhex("939a7233f79c4ca9940a0db3957f0607")
BODY_SGX = 1
BODY_TD10 = 2
BODY_TD15 = 3
CERT_PCK_CHAIN = 5
CERT_QE_REPORT = 6

__all__ = [
    "BODY_SGX",
    "BODY_TD10",
    "BODY_TD15",
    "CERT_PCK_CHAIN",
    "CERT_QE_REPORT",
    "INTEL_QE_VENDOR_ID",
    "CertificationData",
    "QeReportCertificationData",
    "Quote",
]


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
