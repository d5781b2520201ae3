"""A simulated TDX enclave for machines without TEE hardware (devnet, tests, benchmarks).

It produces REAL-format Intel TDX quote v4 bytes (header, TD report 1.0, ECDSA signature, QE report
certification data with a PEM PCK chain) and matching collateral (TCB info, QE identity, CRLs), all
signed by a locally generated *development* root CA. Every verification step of
``attestation.intel.verify`` runs unchanged; only the root differs. A production :class:`Policy` pins
Intel's root and refuses this evidence (BadChainError); ``SimulatedEnclave.policy()`` pins the
development root and accepts it.

Keys and certificates derive deterministically from a seed (RFC 6979 signatures, fixed serials and
validity: :mod:`attestation.devpki`), so two processes with the same seed share the same development root::

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
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from attestation.collateral import IntelCollateral, dumps_collateral
from attestation.devpki import (
    crl_der,
    derive_key,
    dev_name,
    iso_time,
    make_cert,
    pem,
    raw_signature,
    sgx_extension_der,
)
from attestation.intel.layouts import (
    ATT_KEY_TYPE_ECDSA_P256,
    TEE_TYPE_TDX,
    EnclaveReport,
    QuoteHeader,
    TdReport,
)
from attestation.intel.pck import SGX_EXTENSION_OID
from attestation.intel.quote import (
    BODY_TD10,
    BODY_TD15,
    CERT_PCK_CHAIN,
    CERT_QE_REPORT,
    INTEL_QE_VENDOR_ID,
    CertificationData,
    QeReportCertificationData,
    Quote,
)
from attestation.policy import Policy

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
        root_key = derive_key(seed, "root")
        root_name = dev_name("Tessera Development SGX Root CA")
        root = make_cert(root_name, root_key, root_name, root_key, 1, ca=True)
        ca_key = derive_key(seed, "pck-ca")
        ca_name = dev_name("Tessera Development SGX PCK Platform CA")
        ca = make_cert(ca_name, ca_key, root_name, root_key, 2, ca=True)
        pck_key = derive_key(seed, "pck")
        ppid = hashlib.sha256(b"ppid" + seed).digest()[:16]
        ext = x509.UnrecognizedExtension(
            x509.ObjectIdentifier(SGX_EXTENSION_OID),
            sgx_extension_der(SIM_FMSPC, SIM_PCE_ID, SIM_CPU_SVN, SIM_PCE_SVN, ppid),
        )
        pck = make_cert(
            dev_name("Tessera Development SGX PCK Certificate"), pck_key, ca_name, ca_key, 3, False, [ext]
        )
        tcb_key = derive_key(seed, "tcb-signing")
        tcb = make_cert(
            dev_name("Tessera Development SGX TCB Signing"), tcb_key, root_name, root_key, 4, ca=False
        )
        return cls(
            seed, root_key, root, ca_key, ca, pck_key, pck, tcb_key, tcb, derive_key(seed, "attestation")
        )

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
        header = QuoteHeader(
            version, ATT_KEY_TYPE_ECDSA_P256, TEE_TYPE_TDX, 0, 0, INTEL_QE_VENDOR_ID, bytes(20)
        )
        body = _td_report(report_data, mrtd, rtmrs, debug, td15)
        body_type = BODY_TD15 if td15 else BODY_TD10
        descriptor = b""
        if version == 5:
            descriptor = body_type.to_bytes(2, "little") + len(body.to_bytes()).to_bytes(4, "little")
        signed = header.to_bytes() + descriptor + body.to_bytes()
        pub = self.attestation_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )[1:]
        qe = self._qe_certification(pub)
        outer = CertificationData(CERT_QE_REPORT, qe.to_bytes(), qe)
        quote = Quote(
            header, body_type, body, raw_signature(self.attestation_key, signed), pub, qe, outer, signed, b""
        )
        return quote.to_bytes()

    def _qe_certification(self, attestation_pub: bytes) -> QeReportCertificationData:
        """The quoting enclave's part: its report certifying the attestation key, signed by the PCK key,
        with the PCK chain (type 5)."""
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
            report_data=hashlib.sha256(attestation_pub + auth).digest() + bytes(32),
        )
        qe_raw = qe_report.to_bytes()
        chain = CertificationData(
            CERT_PCK_CHAIN, pem(self.pck_cert, self.pck_ca_cert, self.root_cert) + b"\0"
        )
        return QeReportCertificationData(qe_report, qe_raw, raw_signature(self.pck_key, qe_raw), auth, chain)

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
        tcb_info = _tcb_info(issue, nxt, tcb_status)
        tcb_info.update(tcb_info_overrides or {})
        tcb_text = json.dumps(tcb_info, separators=(",", ":"))
        qe_text = json.dumps(_qe_identity(issue, nxt, qe_tcb_status), separators=(",", ":"))
        root_crl = crl_der(self.root_cert, self.root_key, issue, nxt, [])
        pck_crl = crl_der(
            self.pck_ca_cert, self.pck_ca_key, issue, nxt, [self.pck_cert] if revoke_pck else []
        )
        tcb_chain = pem(self.tcb_cert, self.root_cert).decode()
        return IntelCollateral(
            pck_crl_issuer_chain=pem(self.pck_ca_cert, self.root_cert).decode(),
            root_ca_crl=root_crl,
            pck_crl=pck_crl,
            tcb_info_issuer_chain=tcb_chain,
            tcb_info=tcb_text,
            tcb_info_signature=raw_signature(self.tcb_key, tcb_text.encode()),
            qe_identity_issuer_chain=tcb_chain,
            qe_identity=qe_text,
            qe_identity_signature=raw_signature(self.tcb_key, qe_text.encode()),
        )

    def evidence(self, report_data: bytes, now: dt.datetime) -> tuple[bytes, str]:
        """What a miner ships: the quote bytes and the collateral JSON text (wire format)."""
        return self.quote(report_data), dumps_collateral(self.collateral(now))


def _td_report(
    report_data: bytes,
    mrtd: bytes | None,
    rtmrs: tuple[bytes, bytes, bytes, bytes] | None,
    debug: bool,
    td15: bool,
) -> TdReport:
    """The simulated TD's report (1.0, or 1.5 with ``td15``): fixed module and SVNs, the given
    measurements (defaults: a fixed MRTD, zero RTMRs) and ``report_data``."""
    mrtd = mrtd if mrtd is not None else hashlib.sha384(b"tessera simulated TD image").digest()
    rt = rtmrs if rtmrs is not None else (bytes(48),) * 4
    attrs = bytearray(TD_ATTR_SEPT_VE_DISABLE)
    if debug:
        attrs[0] |= 0x01
    return TdReport(
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


def _tcb_info(issue: dt.datetime, nxt: dt.datetime, tcb_status: str) -> dict[str, object]:
    """The simulated platform's TDX TCB info (v3) for [issue, nxt]: one TCB level with ``tcb_status``."""
    return {
        "id": "TDX",
        "version": 3,
        "issueDate": iso_time(issue),
        "nextUpdate": iso_time(nxt),
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


def _qe_identity(issue: dt.datetime, nxt: dt.datetime, qe_tcb_status: str) -> dict[str, object]:
    """The simulated TD quoting enclave's identity (v2) for [issue, nxt]: one level with ``qe_tcb_status``."""
    return {
        "id": "TD_QE",
        "version": 2,
        "issueDate": iso_time(issue),
        "nextUpdate": iso_time(nxt),
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
