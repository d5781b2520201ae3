"""A simulated TDX enclave for machines without TEE hardware (devnet, tests, benchmarks).

It produces REAL-format Intel TDX quote v4 bytes (header, TD report 1.0, ECDSA signature, QE report
certification data with a PEM PCK chain) and matching collateral (TCB info, QE identity, CRLs), all
signed by a locally generated *development* root CA. Every verification step of
``attestation.intel.verify`` runs unchanged; only the root differs. A production :class:`Policy` pins
Intel's root and refuses this evidence (BadChainError); ``SimulatedEnclave.policy()`` pins the
development root and accepts it.

Keys and certificates derive deterministically from a seed (RFC 6979 signatures, fixed serials and
validity), so two processes with the same seed share the same development root::

    enclave = SimulatedEnclave.from_seed(b"tessera-devnet")
    quote = enclave.quote(report_data(chain_id, round, miner, digest))
    collateral = enclave.collateral(now)
    verify(quote, collateral, enclave.policy(), now, expected=Binding(...))

Nothing here is secret or secure: the seed is the whole key material.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from attestation.collateral import IntelCollateral
from attestation.intel.pck import SGX_EXTENSION_OID
from attestation.intel.quote import (
    ATT_KEY_TYPE_ECDSA_P256,
    BODY_TD10,
    BODY_TD15,
    CERT_PCK_CHAIN,
    CERT_QE_REPORT,
    INTEL_QE_VENDOR_ID,
    TEE_TYPE_TDX,
    CertificationData,
    EnclaveReport,
    QeReportCertificationData,
    Quote,
    QuoteHeader,
    TdReport,
)
from attestation.policy import Policy

_NOT_BEFORE = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
_NOT_AFTER = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
_P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551

SIM_FMSPC = bytes.fromhex("00906ed50000")
SIM_PCE_ID = bytes(2)
SIM_PCE_SVN = 11
SIM_CPU_SVN = bytes([3, 3, 2, 2, 4, 1, 0, 5] + [0] * 8)
SIM_TEE_TCB_SVN = bytes([6, 1, 3] + [0] * 13)
SIM_QE_MRSIGNER = hashlib.sha256(b"tessera simulated TD quoting enclave").digest()
SIM_QE_PRODID = 2
SIM_QE_SVN = 4
SIM_QE_ATTRIBUTES = bytes.fromhex("11000000000000000000000000000000")
SIM_XFAM = bytes.fromhex("e702060000000000")
TD_ATTR_SEPT_VE_DISABLE = bytes.fromhex("0000001000000000")


# --- a minimal DER encoder for the SGX extension -----------------------------------------------------------


def _der(tag: int, body: bytes) -> bytes:
    n = len(body)
    if n < 0x80:
        return bytes([tag, n]) + body
    ln = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(ln)]) + ln + body


def _der_int(v: int, tag: int = 0x02) -> bytes:
    raw = v.to_bytes(max(1, (v.bit_length() + 8) // 8), "big")
    return _der(tag, raw)


def _der_oid(dotted: str) -> bytes:
    arcs = [int(a) for a in dotted.split(".")]
    out = bytearray([40 * arcs[0] + arcs[1]])
    for a in arcs[2:]:
        chunk = [a & 0x7F]
        a >>= 7
        while a:
            chunk.append(0x80 | (a & 0x7F))
            a >>= 7
        out += bytes(reversed(chunk))
    return _der(0x06, bytes(out))


def _pair(oid: str, value: bytes) -> bytes:
    return _der(0x30, _der_oid(oid) + value)


def sgx_extension_der(fmspc: bytes, pce_id: bytes, cpu_svn: bytes, pce_svn: int, ppid: bytes) -> bytes:
    """The DER value of a PCK certificate's SGX extension (OID 1.2.840.113741.1.13.1)."""
    base = SGX_EXTENSION_OID
    tcb = b"".join(_pair(f"{base}.2.{i + 1}", _der_int(cpu_svn[i])) for i in range(16))
    tcb += _pair(f"{base}.2.17", _der_int(pce_svn)) + _pair(f"{base}.2.18", _der(0x04, cpu_svn))
    body = (
        _pair(f"{base}.1", _der(0x04, ppid))
        + _pair(f"{base}.2", _der(0x30, tcb))
        + _pair(f"{base}.3", _der(0x04, pce_id))
        + _pair(f"{base}.4", _der(0x04, fmspc))
        + _pair(f"{base}.5", _der_int(0, tag=0x0A))
    )
    return _der(0x30, body)


# --- keys and certificates ----------------------------------------------------------------------------------


def _key(seed: bytes, label: str) -> ec.EllipticCurvePrivateKey:
    digest = hashlib.sha512(b"tessera/simulated-enclave/" + label.encode() + b"/" + seed).digest()
    return ec.derive_private_key(int.from_bytes(digest, "big") % (_P256_ORDER - 1) + 1, ec.SECP256R1())


def _name(cn: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, cn),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Tessera Development (NOT Intel)"),
            x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
        ]
    )


def _cert(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    serial: int,
    ca: bool,
    extra: list[x509.ExtensionType] | None = None,
) -> x509.Certificate:
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(_NOT_BEFORE)
        .not_valid_after(_NOT_AFTER)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=not ca,
                content_commitment=not ca,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
        )
    )
    for ext in extra or []:
        b = b.add_extension(ext, critical=False)
    return b.sign(issuer_key, hashes.SHA256(), ecdsa_deterministic=True)


def _raw_sig(key: ec.EllipticCurvePrivateKey, data: bytes) -> bytes:
    r, s = decode_dss_signature(key.sign(data, ec.ECDSA(hashes.SHA256(), deterministic_signing=True)))
    return r.to_bytes(32, "big") + s.to_bytes(32, "big")


def _pem(*certs: x509.Certificate) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def _iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class SimulatedEnclave:
    """A development TDX platform: root CA, PCK CA, PCK certificate, TCB signing key, attestation key."""

    seed: bytes
    root_key: ec.EllipticCurvePrivateKey
    root_cert: x509.Certificate
    pck_ca_key: ec.EllipticCurvePrivateKey
    pck_ca_cert: x509.Certificate
    pck_key: ec.EllipticCurvePrivateKey
    pck_cert: x509.Certificate
    tcb_key: ec.EllipticCurvePrivateKey
    tcb_cert: x509.Certificate
    attestation_key: ec.EllipticCurvePrivateKey

    @classmethod
    def from_seed(cls, seed: bytes) -> SimulatedEnclave:
        """Derive the whole development platform from ``seed`` (same seed, same root certificate)."""
        root_key = _key(seed, "root")
        root_name = _name("Tessera Development SGX Root CA")
        root = _cert(root_name, root_key, root_name, root_key, 1, ca=True)
        ca_key = _key(seed, "pck-ca")
        ca_name = _name("Tessera Development SGX PCK Platform CA")
        ca = _cert(ca_name, ca_key, root_name, root_key, 2, ca=True)
        pck_key = _key(seed, "pck")
        ppid = hashlib.sha256(b"ppid" + seed).digest()[:16]
        ext = x509.UnrecognizedExtension(
            x509.ObjectIdentifier(SGX_EXTENSION_OID),
            sgx_extension_der(SIM_FMSPC, SIM_PCE_ID, SIM_CPU_SVN, SIM_PCE_SVN, ppid),
        )
        pck = _cert(
            _name("Tessera Development SGX PCK Certificate"), pck_key, ca_name, ca_key, 3, False, [ext]
        )
        tcb_key = _key(seed, "tcb-signing")
        tcb = _cert(_name("Tessera Development SGX TCB Signing"), tcb_key, root_name, root_key, 4, ca=False)
        return cls(seed, root_key, root, ca_key, ca, pck_key, pck, tcb_key, tcb, _key(seed, "attestation"))

    @classmethod
    def generate(cls) -> SimulatedEnclave:
        """A development platform from a fresh random seed."""
        return cls.from_seed(os.urandom(32))

    @property
    def root_der(self) -> bytes:
        """The development root certificate (DER): what a development policy pins."""
        return self.root_cert.public_bytes(serialization.Encoding.DER)

    def policy(self, **overrides: object) -> Policy:
        """A policy pinning only this development root (plus any overrides)."""
        return Policy.development(self.root_der, **overrides)

    def quote(
        self,
        report_data: bytes,
        *,
        mrtd: bytes | None = None,
        rtmrs: tuple[bytes, bytes, bytes, bytes] | None = None,
        debug: bool = False,
        version: int = 4,
        td15: bool = False,
    ) -> bytes:
        """A TDX quote binding ``report_data`` (64 bytes), signed through the development chain.

        ``version`` 4 (default) or 5; ``td15`` puts a TD report 1.5 body in a version 5 quote.
        """
        if len(report_data) != 64:
            raise ValueError("report data must be 64 bytes")
        if version not in (4, 5) or (td15 and version != 5):
            raise ValueError("version must be 4 or 5, and a TD 1.5 body needs version 5")
        mrtd = mrtd if mrtd is not None else hashlib.sha384(b"tessera simulated TD image").digest()
        rt = rtmrs if rtmrs is not None else (bytes(48),) * 4
        attrs = bytearray(TD_ATTR_SEPT_VE_DISABLE)
        if debug:
            attrs[0] |= 0x01
        header = QuoteHeader(
            version, ATT_KEY_TYPE_ECDSA_P256, TEE_TYPE_TDX, 0, 0, INTEL_QE_VENDOR_ID, bytes(20)
        )
        body = TdReport(
            tee_tcb_svn=SIM_TEE_TCB_SVN,
            mr_seam=hashlib.sha384(b"tessera simulated TDX module").digest(),
            mr_signer_seam=bytes(48),
            seam_attributes=bytes(8),
            td_attributes=bytes(attrs),
            xfam=SIM_XFAM,
            mr_td=mrtd,
            mr_config_id=bytes(48),
            mr_owner=bytes(48),
            mr_owner_config=bytes(48),
            rtmr0=rt[0],
            rtmr1=rt[1],
            rtmr2=rt[2],
            rtmr3=rt[3],
            report_data=report_data,
            tee_tcb_svn2=SIM_TEE_TCB_SVN if td15 else None,
            mr_service_td=bytes(48) if td15 else None,
        )
        body_type = BODY_TD15 if td15 else BODY_TD10
        descriptor = b""
        if version == 5:
            descriptor = body_type.to_bytes(2, "little") + len(body.to_bytes()).to_bytes(4, "little")
        signed = header.to_bytes() + descriptor + body.to_bytes()
        pub = self.attestation_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )[1:]
        auth = bytes(range(32))
        qe_report = EnclaveReport(
            cpu_svn=SIM_CPU_SVN,
            misc_select=0,
            reserved1=bytes(28),
            attributes=SIM_QE_ATTRIBUTES,
            mr_enclave=hashlib.sha256(b"tessera simulated QE").digest(),
            reserved2=bytes(32),
            mr_signer=SIM_QE_MRSIGNER,
            reserved3=bytes(96),
            isv_prod_id=SIM_QE_PRODID,
            isv_svn=SIM_QE_SVN,
            reserved4=bytes(60),
            report_data=hashlib.sha256(pub + auth).digest() + bytes(32),
        )
        qe_raw = qe_report.to_bytes()
        chain = CertificationData(
            CERT_PCK_CHAIN, _pem(self.pck_cert, self.pck_ca_cert, self.root_cert) + b"\0"
        )
        qe = QeReportCertificationData(qe_report, qe_raw, _raw_sig(self.pck_key, qe_raw), auth, chain)
        outer = CertificationData(CERT_QE_REPORT, qe.to_bytes(), qe)
        quote = Quote(
            header, body_type, body, _raw_sig(self.attestation_key, signed), pub, qe, outer, signed, b""
        )
        return quote.to_bytes()

    def collateral(
        self,
        now: dt.datetime,
        *,
        validity: dt.timedelta = dt.timedelta(days=30),
        revoke_pck: bool = False,
        tcb_status: str = "UpToDate",
        qe_tcb_status: str = "UpToDate",
        tcb_info_overrides: dict[str, object] | None = None,
    ) -> IntelCollateral:
        """Collateral valid from an hour before ``now`` for ``validity``, signed by the development root.

        ``tcb_status`` / ``qe_tcb_status`` set the platform and QE TCB levels' statuses and
        ``tcb_info_overrides`` replaces top-level TCB info fields (to exercise TCB evaluation in tests).
        """
        issue = now - dt.timedelta(hours=1)
        nxt = now + validity
        tcb_info = {
            "id": "TDX",
            "version": 3,
            "issueDate": _iso(issue),
            "nextUpdate": _iso(nxt),
            "fmspc": SIM_FMSPC.hex().upper(),
            "pceId": SIM_PCE_ID.hex().upper(),
            "tcbType": 0,
            "tcbEvaluationDataNumber": 17,
            "tdxModuleIdentities": [
                {
                    "id": "TDX_01",
                    "mrsigner": "00" * 48,
                    "attributes": "0000000000000000",
                    "attributesMask": "FFFFFFFFFFFFFFFF",
                    "tcbLevels": [
                        {"tcb": {"isvsvn": 4}, "tcbDate": "2024-03-13T00:00:00Z", "tcbStatus": "UpToDate"}
                    ],
                }
            ],
            "tcbLevels": [
                {
                    "tcb": {
                        "sgxtcbcomponents": [{"svn": v} for v in SIM_CPU_SVN],
                        "pcesvn": SIM_PCE_SVN,
                        "tdxtcbcomponents": [{"svn": v} for v in [5, 0, 2] + [0] * 13],
                    },
                    "tcbDate": "2024-03-13T00:00:00Z",
                    "tcbStatus": tcb_status,
                }
            ],
        }
        tcb_info.update(tcb_info_overrides or {})
        qe_identity = {
            "id": "TD_QE",
            "version": 2,
            "issueDate": _iso(issue),
            "nextUpdate": _iso(nxt),
            "tcbEvaluationDataNumber": 17,
            "miscselect": "00000000",
            "miscselectMask": "FFFFFFFF",
            "attributes": SIM_QE_ATTRIBUTES.hex().upper(),
            "attributesMask": "FBFFFFFFFFFFFFFF0000000000000000",
            "mrsigner": SIM_QE_MRSIGNER.hex().upper(),
            "isvprodid": SIM_QE_PRODID,
            "tcbLevels": [
                {"tcb": {"isvsvn": SIM_QE_SVN}, "tcbDate": "2024-03-13T00:00:00Z", "tcbStatus": qe_tcb_status}
            ],
        }
        tcb_text = json.dumps(tcb_info, separators=(",", ":"))
        qe_text = json.dumps(qe_identity, separators=(",", ":"))
        root_crl = self._crl(self.root_cert, self.root_key, issue, nxt, [])
        pck_crl = self._crl(
            self.pck_ca_cert, self.pck_ca_key, issue, nxt, [self.pck_cert] if revoke_pck else []
        )
        tcb_chain = _pem(self.tcb_cert, self.root_cert).decode()
        return IntelCollateral(
            pck_crl_issuer_chain=_pem(self.pck_ca_cert, self.root_cert).decode(),
            root_ca_crl=root_crl,
            pck_crl=pck_crl,
            tcb_info_issuer_chain=tcb_chain,
            tcb_info=tcb_text,
            tcb_info_signature=_raw_sig(self.tcb_key, tcb_text.encode()),
            qe_identity_issuer_chain=tcb_chain,
            qe_identity=qe_text,
            qe_identity_signature=_raw_sig(self.tcb_key, qe_text.encode()),
        )

    def evidence(self, report_data: bytes, now: dt.datetime) -> tuple[bytes, str]:
        """What a miner ships: the quote bytes and the collateral JSON text (wire format)."""
        from attestation.collateral import dumps_collateral

        return self.quote(report_data), dumps_collateral(self.collateral(now))

    @staticmethod
    def _crl(
        issuer: x509.Certificate,
        key: ec.EllipticCurvePrivateKey,
        issue: dt.datetime,
        nxt: dt.datetime,
        revoked: list[x509.Certificate],
    ) -> bytes:
        b = (
            x509.CertificateRevocationListBuilder()
            .issuer_name(issuer.subject)
            .last_update(issue)
            .next_update(nxt)
        )
        for cert in revoked:
            b = b.add_revoked_certificate(
                x509.RevokedCertificateBuilder()
                .serial_number(cert.serial_number)
                .revocation_date(issue)
                .build()
            )
        return b.sign(key, hashes.SHA256(), ecdsa_deterministic=True).public_bytes(serialization.Encoding.DER)
