"""Verification of AMD SEV-SNP reports: VCEK signature, ARK -> ASK -> VCEK chain, VCEK TCB extensions.

The chain is checked signature by signature (RSASSA-PSS, MGF1-SHA-384, salt 48 for ARK and ASK), since
the certificates do not fit a WebPKI profile (no AKI, PSS parameters). The VCEK's extensions
(AMD "Versioned Chip Endorsement Key (VCEK) Certificate and KDS Interface Specification", pub. 57230,
table "VCEK Certificate Extensions": 1.3.6.1.4.1.3704.1.3.1 blSPL, .3.2 teeSPL, .3.3 snpSPL, .3.8 ucodeSPL,
.3.9 fmcSPL (Turin), .1.4 hwID) must equal the report's REPORTED_TCB and CHIP_ID.
"""

from __future__ import annotations

import datetime as dt

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from attestation.amd.report import SnpReport, SnpTcb
from attestation.binding import Binding, check_raw, check_report_data
from attestation.certchain import (
    check_window,
    crl_signed_by,
    is_revoked,
    load_der_cert,
    subject_of,
    verify_chain,
)
from attestation.collateral import SnpCollateral
from attestation.der import TAG_INTEGER, TAG_OCTET_STRING, decode_integer, read_one, read_tlvs
from attestation.errors import (
    BadChainError,
    DebugError,
    MalformedEvidenceError,
    MeasurementNotAllowedError,
    QuoteSignatureError,
    RevocationUnknownError,
    RevokedError,
    TcbMismatchError,
    TcbNotAcceptableError,
    UnsupportedKeyTypeError,
)
from attestation.limits import check_evidence_size
from attestation.policy import Policy
from attestation.verdict import AttestationVerdict

_SPL_OIDS = {
    "bootloader": "1.3.6.1.4.1.3704.1.3.1",
    "tee": "1.3.6.1.4.1.3704.1.3.2",
    "snp": "1.3.6.1.4.1.3704.1.3.3",
    "microcode": "1.3.6.1.4.1.3704.1.3.8",
    "fmc": "1.3.6.1.4.1.3704.1.3.9",
}
_HWID_OID = "1.3.6.1.4.1.3704.1.4"


def _ext_bytes(cert: x509.Certificate, oid: str) -> bytes | None:
    try:
        ext = cert.extensions.get_extension_for_oid(x509.ObjectIdentifier(oid))
    except x509.ExtensionNotFound:
        return None
    except ValueError as exc:
        raise MalformedEvidenceError(f"VCEK extensions cannot be decoded ({exc})") from None
    value = ext.value
    return value.value if isinstance(value, x509.UnrecognizedExtension) else None


def vcek_tcb(cert: x509.Certificate, turin: bool) -> SnpTcb:
    """The TCB the VCEK was issued for, from its SPL extensions."""
    spl: dict[str, int] = {}
    for name, oid in _SPL_OIDS.items():
        raw = _ext_bytes(cert, oid)
        if raw is None:
            if name == "fmc" and not turin:
                continue
            raise MalformedEvidenceError(f"the VCEK lacks its {name} SPL extension ({oid}): not an AMD VCEK")
        spl[name] = decode_integer(read_one(raw, TAG_INTEGER, "VCEK SPL"), "VCEK SPL")
    return SnpTcb(
        spl["bootloader"], spl["tee"], spl["snp"], spl["microcode"], spl.get("fmc") if turin else None
    )


def vcek_hwid(cert: x509.Certificate) -> bytes | None:
    """The hwID extension (the chip id): raw 64 bytes, or an OCTET STRING around them."""
    raw = _ext_bytes(cert, _HWID_OID)
    if raw is None:
        return None
    if len(raw) == 64:
        return raw
    try:
        tlvs = read_tlvs(raw, "VCEK hwID")
    except MalformedEvidenceError:
        return raw
    if len(tlvs) == 1 and tlvs[0].tag == TAG_OCTET_STRING:
        return tlvs[0].value
    return raw


def verify_snp(
    evidence: bytes | SnpReport,
    collateral: SnpCollateral,
    policy: Policy,
    now: dt.datetime,
    expected: Binding | bytes | None = None,
) -> AttestationVerdict:
    """Verify an SEV-SNP report; return the verdict or raise a typed ``AttestationError``.

    In order: sizes, VCEK signing key, the VCEK chain to a pinned ARK, the report signature, the CRL,
    the VCEK's TCB and chip against the report, the policy's minimum TCB, then the guest (debug, VMPL,
    measurement) and the report-data binding.
    """
    if not isinstance(evidence, SnpReport):
        check_evidence_size(evidence, policy.limits)
    collateral.check_limits(policy.limits)
    report = evidence if isinstance(evidence, SnpReport) else SnpReport.parse(evidence)
    if report.signing_key != 0:
        raise UnsupportedKeyTypeError(
            f"the report is signed by key kind {report.signing_key} (1 VLEK, 7 none); only VCEK-signed "
            f"reports are accepted: request the report with the VCEK"
        )
    vcek = collateral.vcek_cert
    chain = [vcek, *collateral.chain]
    root = _check_vcek_chain(chain, policy, now)
    _check_report_signature(report, vcek)
    if collateral.crl_parsed is not None:
        _check_revocation(collateral.crl_parsed, chain, root, now)
    _check_tcb(report, vcek, policy)
    _check_guest(report, policy)
    if isinstance(expected, Binding):
        check_report_data(report.report_data, expected)
    elif expected is not None:
        check_raw(report.report_data, expected)
    return AttestationVerdict(
        format="amd-sev-snp",
        report_data=report.report_data,
        measurements={"measurement": report.measurement.hex(), "host_data": report.host_data.hex()},
        root=subject_of(root),
        policy=policy.name,
        debug=report.debug,
        tcb_status="matches VCEK",
        binding_checked=expected is not None,
        details={
            "report_version": report.version,
            "policy": f"0x{report.policy:016x}",
            "vmpl": report.vmpl,
            "guest_svn": report.guest_svn,
            "reported_tcb": report.reported.as_dict(),
            "chip_id": report.chip_id.hex(),
            "vcek_valid": [vcek.not_valid_before_utc.isoformat(), vcek.not_valid_after_utc.isoformat()],
            "trailing_bytes": len(report.trailing),
        },
    )


def _check_vcek_chain(chain: list[x509.Certificate], policy: Policy, now: dt.datetime) -> x509.Certificate:
    """VCEK -> ASK -> ARK, signature by signature, to a pinned AMD root (returned); the ASK is present and
    the VCEK's key is P-384."""
    roots = [load_der_cert(r, "pinned AMD root") for r in policy.amd_roots]
    vcek = chain[0]
    root = verify_chain(chain, roots, now, "VCEK chain (VCEK, ASK, ARK)", require_ca=False)
    if len(chain) < 2 or chain[1].subject == vcek.subject:
        raise BadChainError("VCEK chain: the ASK is missing; ship the ASK/ARK chain from AMD KDS")
    key = vcek.public_key()
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp384r1":
        raise BadChainError("the VCEK's key is not a P-384 key: not an AMD VCEK")
    return root


def _check_report_signature(report: SnpReport, vcek: x509.Certificate) -> None:
    """The report's ECDSA P-384 / SHA-384 signature over its first 0x2A0 bytes verifies with the VCEK."""
    key = vcek.public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey)  # checked by _check_vcek_chain
    sig = encode_dss_signature(report.r, report.s)
    signed = report.to_bytes()[:0x2A0]
    try:
        key.verify(sig, signed, ec.ECDSA(hashes.SHA384()))
    except (InvalidSignature, ValueError):
        raise QuoteSignatureError(
            "the SEV-SNP report signature does not verify with the VCEK: the report was altered, or the "
            "VCEK is for another chip or TCB; fetch the VCEK for this report's CHIP_ID and REPORTED_TCB"
        ) from None


def _check_revocation(
    crl: x509.CertificateRevocationList,
    chain: list[x509.Certificate],
    root: x509.Certificate,
    now: dt.datetime,
) -> None:
    """The AMD CRL is the pinned ARK's and current, and revokes neither the VCEK nor the ASK."""
    if crl.issuer != root.subject or not crl_signed_by(crl, root):
        raise RevocationUnknownError("the AMD CRL is not issued and signed by the pinned ARK")
    check_window(crl.last_update_utc, crl.next_update_utc, now, "the AMD CRL", "fetch it again from AMD KDS")
    for cert in chain[:-1]:
        if is_revoked(crl, cert, "the AMD CRL"):
            raise RevokedError(f"'{subject_of(cert)}' is revoked by AMD's CRL")


def _check_tcb(report: SnpReport, vcek: x509.Certificate, policy: Policy) -> None:
    """The VCEK was issued for the report's REPORTED_TCB and chip, and that TCB meets the policy's minimum."""
    reported = report.reported
    issued = vcek_tcb(vcek, report.is_turin)
    if issued != reported:
        raise TcbMismatchError(
            f"the VCEK was issued for TCB {issued.as_dict()}, the report says {reported.as_dict()}: fetch "
            f"the VCEK for the reported TCB from AMD KDS"
        )
    hwid = vcek_hwid(vcek)
    if not report.mask_chip_id and hwid is not None and hwid != report.chip_id:
        raise TcbMismatchError("the VCEK's hwID is not the report's CHIP_ID: the VCEK is for another chip")
    if policy.snp_min_tcb is not None:
        have = reported.as_dict()
        low = {k: v for k, v in policy.snp_min_tcb.items() if have.get(k, 0) < v}
        if low:
            raise TcbNotAcceptableError(
                f"REPORTED_TCB {have} is below the policy's minimum for {sorted(low)}: update the SEV "
                f"firmware/microcode"
            )


def _check_guest(report: SnpReport, policy: Policy) -> None:
    """The guest: no DEBUG (unless the policy allows it), an allowed VMPL, an allowed launch measurement."""
    if report.debug and not policy.dangerous_allow_debug:
        raise DebugError(
            f"the guest policy 0x{report.policy:x} has DEBUG (bit 19) set: the hypervisor can read the "
            f"guest's memory; launch the VM with a policy that clears bit 19"
        )
    if policy.snp_allowed_vmpls is not None and report.vmpl not in policy.snp_allowed_vmpls:
        raise MeasurementNotAllowedError(
            f"the report comes from VMPL {report.vmpl}, the policy allows {sorted(policy.snp_allowed_vmpls)}"
        )
    if (
        policy.allowed_snp_measurements is not None
        and report.measurement not in policy.allowed_snp_measurements
    ):
        raise MeasurementNotAllowedError(
            f"launch MEASUREMENT {report.measurement.hex()} is not in the policy's allowed list: boot the "
            f"published image"
        )


__all__ = [
    "verify_snp",
    "vcek_tcb",
    "vcek_hwid",
]
