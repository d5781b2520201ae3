"""Verification of Intel DCAP quotes (SGX v3/v4/v5, TDX v4/v5) against collateral and a policy.

Order of checks (the first failure is reported): sizes and certificate counts (before any parsing);
(1) quote layout, QE vendor, certification data type; (2) the PCK chain the quote carries, to a pinned
root: certificate count, each certificate's window, signature by signature, then RFC 5280 path
validation; (3) QE report signature by the PCK key, QE report data = SHA-256(attestation key || QE auth
data), quote signature by the attestation key; (4) collateral: TCB info and QE identity issuer chains
(windows, signatures) and their ECDSA signatures over the exact text, before the JSON is parsed, then
their windows and freshness; (5) CRLs (root CA CRL and PCK CRL: issuers, signatures, windows) and
revocation of every certificate used; (6) FMSPC/PCE-ID, QE identity, TCB level, TDX module identity and
the merged status against the policy (without collateral: TCB unknown, which the policy decides);
(7) debug, measurements, report-data binding. The evidence is checked before the collateral: an expired
PCK certificate is reported as such (``CertificateExpiredError``) even when the collateral expired too.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes

from attestation.binding import Binding, check_raw, check_report_data
from attestation.certchain import (
    MEMO_BYTES,
    _chain_root,
    check_cert_window,
    check_window,
    crl_signed_by,
    is_revoked,
    load_der_cert,
    load_pem_chain,
    subject_of,
    verify_chain,
    verify_path_rfc5280,
)
from attestation.collateral import PARSE_FACTOR, IntelCollateral
from attestation.errors import (
    BadChainError,
    CollateralExpiredError,
    CollateralSignatureError,
    DebugError,
    MeasurementNotAllowedError,
    QeReportDataMismatchError,
    QeReportSignatureError,
    QuoteSignatureError,
    RevocationUnknownError,
    RevokedError,
    TcbMismatchError,
    TcbNotAcceptableError,
    TcbUnknownError,
    UnknownQeVendorError,
    UnsupportedCertificationDataError,
)
from attestation.intel.pck import PckExtension, parse_pck_extension
from attestation.intel.quote import CERT_PCK_CHAIN, INTEL_QE_VENDOR_ID, EnclaveReport, Quote, TdReport
from attestation.intel.tcb import QeIdentity, TcbInfo, converge, masked_equal
from attestation.limits import check_evidence_size
from attestation.memo import bytes_memo, deep_cost
from attestation.policy import Policy, TcbStatus
from attestation.signatures import ecdsa_ok, p256_key_from_raw
from attestation.verdict import Verdict

_REFRESH = "fetch current collateral (Intel PCS or your PCCS) and ship it with the quote"


def verify_intel(
    evidence: bytes | Quote,
    collateral: IntelCollateral | None,
    policy: Policy,
    now: dt.datetime,
    expected: Binding | bytes | None = None,
) -> Verdict:
    """Verify an Intel DCAP quote; return the verdict or raise a typed ``AttestationError``.

    ``collateral=None``: the quote itself is checked (layout, PCK chain, QE report, quote signature);
    its TCB status and revocation are then unknown, refused with ``TcbUnknownError`` unless
    ``policy.accept_unknown_tcb``, which gives a verdict with ``tcb_status="Unknown"``.
    """
    limits = policy.limits
    if isinstance(evidence, Quote):
        quote = evidence
    else:
        check_evidence_size(evidence, limits)
        quote = Quote.parse(evidence)
    if collateral is not None:
        collateral.check_limits(limits)

    # 1. The quote: QE vendor and certification data.
    if quote.header.qe_vendor_id != INTEL_QE_VENDOR_ID:
        raise UnknownQeVendorError(
            f"QE vendor id {quote.header.qe_vendor_id.hex()} is not Intel's "
            f"({INTEL_QE_VENDOR_ID.hex()}); only quotes from Intel's quoting enclave are accepted"
        )
    if quote.pck_certification.cert_type != CERT_PCK_CHAIN:
        raise UnsupportedCertificationDataError(
            f"certification data type {quote.pck_certification.cert_type} cannot be verified offline; "
            f"configure the quote provider (QPL) to embed the PCK certificate chain (type 5)"
        )
    roots = [load_der_cert(r, "pinned Intel root") for r in policy.intel_roots]

    # 2. The PCK chain the quote carries (count and size capped before it is decoded), to a pinned root.
    chain = load_pem_chain(
        quote.pck_certification.data,
        "PCK certificate chain",
        max_certs=limits.pck_chain_certs,
        max_bytes=limits.max_pem_chain_bytes,
        max_cert_bytes=limits.max_certificate_bytes,
    )
    if len(chain) != limits.pck_chain_certs:
        raise BadChainError(
            f"PCK certificate chain: {len(chain)} certificates, the quote must carry "
            f"{limits.pck_chain_certs} (PCK certificate, PCK CA, root)"
        )
    root = verify_chain(chain, roots, now, "PCK certificate chain")
    verify_path_rfc5280(chain[0], chain[1:], root, now, "PCK certificate chain")

    # 3. QE report, attestation key, quote signature.
    pck_leaf = chain[0]
    if not ecdsa_ok(
        pck_leaf.public_key(), quote.qe.qe_report_signature, quote.qe.qe_report_raw, hashes.SHA256()
    ):
        raise QeReportSignatureError(
            "the QE report is not signed by the PCK certificate: the quote was altered or assembled from "
            "parts of different quotes; generate a new quote"
        )
    qe_report = quote.qe.qe_report
    want = hashlib.sha256(quote.attestation_key + quote.qe.qe_auth_data).digest()
    if qe_report.report_data[:32] != want or any(qe_report.report_data[32:]):
        raise QeReportDataMismatchError(
            "the QE report data is not SHA-256(attestation key || QE auth data): the attestation key is not "
            "certified by the quoting enclave; generate a new quote"
        )
    att_key = p256_key_from_raw(quote.attestation_key)
    if att_key is None or not ecdsa_ok(att_key, quote.signature, quote.signed, hashes.SHA256()):
        raise QuoteSignatureError(
            "the quote signature does not verify with its attestation key: the quote body or header was "
            "altered after signing; send the quote bytes exactly as the quoting enclave produced them"
        )
    ext = parse_pck_extension(pck_leaf)

    # 4-6. Collateral (signatures before parsing), revocation, TCB evaluation; or TCB unknown.
    tcb: _Tcb | None = None
    if collateral is None:
        if not policy.accept_unknown_tcb:
            raise TcbUnknownError(
                "no collateral: the quote's signature, QE report and PCK chain verify, but its TCB status and "
                "revocation are unknown and the policy requires them; ship the collateral (Intel PCS/PCCS)"
            )
    else:
        tcb = _evaluate_tcb(quote, qe_report, ext, chain, collateral, roots, policy, now)

    # 7. Debug, measurements, binding.
    body = quote.body
    if body.debug and not policy.dangerous_allow_debug:
        raise DebugError(
            "the TD/enclave runs in debug mode (its memory is readable by the host); launch it without "
            "debug (TD attributes DEBUG=0 / SGX ATTRIBUTES.DEBUG=0)"
        )
    measurements = _measurements(body)
    _check_measurements(body, policy)
    if isinstance(expected, Binding):
        check_report_data(body.report_data, expected)
    elif expected is not None:
        check_raw(body.report_data, expected)

    details: dict[str, object] = {
        "quote_version": quote.version,
        "tee": "TDX" if quote.is_tdx else "SGX",
        "fmspc": ext.fmspc.hex(),
        "pce_id": ext.pce_id.hex(),
        "pce_svn": ext.pce_svn,
        "cpu_svn": ext.cpu_svn.hex(),
        "qe_svn": qe_report.isv_svn,
        "trailing_bytes": len(quote.trailing),
    }
    if tcb is None:
        details["not_checked"] = ["TCB info", "QE identity", "CRLs (revocation)", "TCB level"]
    else:
        details.update(tcb.details)
    if isinstance(body, TdReport):
        details["tee_tcb_svn"] = body.tee_tcb_svn.hex()
        details["td_attributes"] = body.td_attributes.hex()
        details["xfam"] = body.xfam.hex()
    else:
        details["attributes"] = body.attributes.hex()
        details["isv_prod_id"] = body.isv_prod_id
        details["isv_svn"] = body.isv_svn
    return Verdict(
        format="intel-tdx" if quote.is_tdx else "intel-sgx",
        report_data=body.report_data,
        measurements=measurements,
        root=subject_of(root),
        policy=policy.name,
        debug=body.debug,
        tcb_status=TCB_UNKNOWN if tcb is None else tcb.status.value,
        advisory_ids=() if tcb is None else tcb.advisories,
        binding_checked=expected is not None,
        details=details,
    )


TCB_UNKNOWN = "Unknown"
"""``Verdict.tcb_status`` of a quote verified without collateral under ``accept_unknown_tcb``."""


@dataclass(frozen=True)
class _Tcb:
    status: TcbStatus
    advisories: tuple[str, ...]
    details: dict[str, object]


def _evaluate_tcb(
    quote: Quote,
    qe_report: EnclaveReport,
    ext: PckExtension,
    chain: list[x509.Certificate],
    collateral: IntelCollateral,
    roots: list[x509.Certificate],
    policy: Policy,
    now: dt.datetime,
) -> _Tcb:
    # Collateral issuer chains and signatures over the raw text, before the JSON is parsed.
    for certs, what in (
        (collateral.tcb_info_chain, "TCB info"),
        (collateral.qe_identity_chain, "QE identity"),
    ):
        for cert in certs:
            check_cert_window(cert, now, f"the {what} issuer chain")
    _check_collateral_signatures(collateral, tuple(roots))
    tcb_info = collateral.tcb_info_parsed
    qe_identity = collateral.qe_identity_parsed
    _check_collateral_windows(tcb_info, qe_identity, policy, now)

    # Revocation.
    _check_revocation(collateral, chain, roots, now)

    # TCB evaluation.
    if ext.fmspc != tcb_info.fmspc or ext.pce_id != tcb_info.pce_id:
        raise TcbMismatchError(
            f"the TCB info is for FMSPC {tcb_info.fmspc.hex()} / PCE {tcb_info.pce_id.hex()}, the platform is "
            f"FMSPC {ext.fmspc.hex()} / PCE {ext.pce_id.hex()}: ship the TCB info of this platform's FMSPC"
        )
    want_ids = ("TDX", "TD_QE") if quote.is_tdx else ("SGX", "QE")
    if tcb_info.id != want_ids[0] or qe_identity.id != want_ids[1]:
        raise TcbMismatchError(
            f"a {'TDX' if quote.is_tdx else 'SGX'} quote needs {want_ids[0]} TCB info and {want_ids[1]} "
            f"identity, got {tcb_info.id} and {qe_identity.id}"
        )
    qe_status, qe_adv = _qe_status(qe_report, qe_identity)
    status, advisories, module_status = _platform_status(quote, ext, tcb_info)
    merged = converge(status, qe_status)
    if module_status is not None:
        merged = converge(merged, module_status[0])
        advisories = advisories + module_status[1]
    all_adv = tuple(dict.fromkeys(advisories + qe_adv))
    if not merged.at_least(policy.min_tcb_status):
        raise TcbNotAcceptableError(
            f"TCB status {merged.value} (platform {status.value}, QE {qe_status.value}"
            f"{', TDX module ' + module_status[0].value if module_status else ''}; advisories "
            f"{', '.join(all_adv) or 'none'}) is below the policy's lowest acceptable "
            f"{policy.min_tcb_status.value}: update the BIOS/microcode/TDX module as the advisories say"
        )
    refused = sorted(set(all_adv) & policy.refused_advisories)
    if refused:
        raise TcbNotAcceptableError(f"the platform is affected by refused advisories {refused}; patch it")
    details: dict[str, object] = {
        "platform_tcb_status": status.value,
        "qe_tcb_status": qe_status.value,
        "tcb_evaluation_data_number": tcb_info.tcb_evaluation_data_number,
        "collateral_window": [
            max(tcb_info.issue_date, qe_identity.issue_date).isoformat(),
            min(tcb_info.next_update, qe_identity.next_update).isoformat(),
        ],
    }
    if module_status is not None:
        details["tdx_module_tcb_status"] = module_status[0].value
    return _Tcb(merged, all_adv, details)


def _check_collateral_windows(
    tcb_info: TcbInfo, qe_identity: QeIdentity, policy: Policy, now: dt.datetime
) -> None:
    check_window(tcb_info.issue_date, tcb_info.next_update, now, "the TCB info", _REFRESH)
    check_window(qe_identity.issue_date, qe_identity.next_update, now, "the QE identity", _REFRESH)
    if policy.max_collateral_age is not None:
        for doc, name in ((tcb_info, "TCB info"), (qe_identity, "QE identity")):
            if now - doc.issue_date > policy.max_collateral_age:
                raise CollateralExpiredError(
                    f"the {name} was issued at {doc.issue_date.isoformat()}, older than the policy's "
                    f"{policy.max_collateral_age}; {_REFRESH}"
                )
    if policy.min_tcb_evaluation_data_number is not None:
        for doc2, name in ((tcb_info, "TCB info"), (qe_identity, "QE identity")):
            if doc2.tcb_evaluation_data_number < policy.min_tcb_evaluation_data_number:
                raise CollateralExpiredError(
                    f"the {name} has tcbEvaluationDataNumber {doc2.tcb_evaluation_data_number}, the policy "
                    f"needs {policy.min_tcb_evaluation_data_number} or later; {_REFRESH}"
                )


def _collateral_cost(c: IntelCollateral, *rest: object, result: object) -> int:
    return PARSE_FACTOR * c.size() + deep_cost(rest)


@bytes_memo(MEMO_BYTES, _collateral_cost)
def _check_collateral_signatures(c: IntelCollateral, roots: tuple[x509.Certificate, ...]) -> None:
    """Signature checks of TCB info and QE identity over their raw text, before either is parsed.

    Time-independent, so done once per loaded collateral (memoized, bounded in bytes).
    """
    _check_signed_doc(c.tcb_info_chain, roots, c.tcb_info, c.tcb_info_signature, "TCB info")
    _check_signed_doc(c.qe_identity_chain, roots, c.qe_identity, c.qe_identity_signature, "QE identity")


def _check_signed_doc(
    chain: list[x509.Certificate],
    roots: Sequence[x509.Certificate],
    text: str,
    signature: bytes,
    what: str,
) -> None:
    root = _chain_root(tuple(chain), tuple(roots), f"{what} issuer chain", True)
    verify_path_rfc5280(chain[0], chain[1:], root, root.not_valid_before_utc, f"{what} issuer chain")
    if not ecdsa_ok(chain[0].public_key(), signature, text.encode("utf-8"), hashes.SHA256()):
        raise CollateralSignatureError(
            f"the {what} signature does not verify over its exact text: the collateral was edited or "
            f"re-serialized; ship Intel's JSON text byte for byte"
        )


@bytes_memo(MEMO_BYTES, _collateral_cost)
def _crl_signatures(
    c: IntelCollateral, root: x509.Certificate, pck_ca: x509.Certificate
) -> tuple[bool, bool]:
    """Whether the root CA CRL is signed by ``root`` and the PCK CRL by ``pck_ca`` (memoized: pure)."""
    return crl_signed_by(c.root_crl, root), crl_signed_by(c.pck_crl_parsed, pck_ca)


def _revoked(crl: x509.CertificateRevocationList, cert: x509.Certificate) -> bool:
    return is_revoked(crl, cert, "a CRL")


def _check_revocation(
    c: IntelCollateral, pck_chain: list[x509.Certificate], roots: Sequence[x509.Certificate], now: dt.datetime
) -> None:
    root_crl, pck_crl = c.root_crl, c.pck_crl_parsed
    issuer_by_name = {r.subject: r for r in roots}
    root = issuer_by_name.get(root_crl.issuer)
    if root is None:
        raise RevocationUnknownError(
            f"the root CA CRL is issued by '{root_crl.issuer.rfc4514_string()}', not by a pinned root: "
            f"revocation of the intermediate CAs is unknown; {_REFRESH}"
        )
    root_ok, pck_ok = _crl_signatures(c, root, pck_chain[1])
    if not root_ok:
        raise CollateralSignatureError(f"the root CA CRL is not signed by the pinned root; {_REFRESH}")
    pck_ca = pck_chain[1]
    if pck_crl.issuer != pck_ca.subject:
        raise RevocationUnknownError(
            f"the PCK CRL is issued by '{pck_crl.issuer.rfc4514_string()}', but the PCK certificate is "
            f"issued by '{subject_of(pck_ca)}': revocation status unknown; ship the CRL of the PCK's CA "
            f"(Intel PCS /pckcrl?ca={'platform' if 'Platform' in subject_of(pck_ca) else 'processor'})"
        )
    if not pck_ok:
        raise CollateralSignatureError(f"the PCK CRL is not signed by the PCK CA; {_REFRESH}")
    for crl, name in ((root_crl, "the root CA CRL"), (pck_crl, "the PCK CRL")):
        check_window(crl.last_update_utc, crl.next_update_utc, now, name, _REFRESH)
        if crl.next_update_utc is None:
            raise CollateralExpiredError(f"{name} has no nextUpdate; {_REFRESH}")
    crl_chain = c.pck_crl_chain
    verify_chain(crl_chain, roots, now, "PCK CRL issuer chain")
    for cert in pck_chain[1:] + c.tcb_info_chain + c.qe_identity_chain + crl_chain:
        if cert.issuer == root.subject and cert.subject != root.subject and _revoked(root_crl, cert):
            raise RevokedError(f"'{subject_of(cert)}' is revoked by the Intel root CA CRL")
    if _revoked(pck_crl, pck_chain[0]):
        raise RevokedError(
            f"the PCK certificate (serial {pck_chain[0].serial_number:x}) is revoked by its CA: this "
            f"platform's keys are no longer trusted; the operator must replace or re-provision it"
        )


def _qe_status(report: EnclaveReport, ident: QeIdentity) -> tuple[TcbStatus, tuple[str, ...]]:
    if (report.misc_select & ident.miscselect_mask) != (ident.miscselect & ident.miscselect_mask):
        raise TcbMismatchError("the QE's MISCSELECT does not match Intel's QE identity: not a genuine QE")
    if not masked_equal(report.attributes, ident.attributes_mask, ident.attributes):
        raise TcbMismatchError("the QE's ATTRIBUTES do not match Intel's QE identity: not a genuine QE")
    if report.mr_signer != ident.mrsigner:
        raise TcbMismatchError("the QE's MRSIGNER is not Intel's: not a genuine quoting enclave")
    if report.isv_prod_id != ident.isvprodid:
        raise TcbMismatchError(
            f"the QE's ISVPRODID {report.isv_prod_id} is not {ident.isvprodid}: not the expected QE"
        )
    for isvsvn, status, adv in ident.levels:
        if report.isv_svn >= isvsvn:
            return status, adv
    raise TcbNotAcceptableError(
        f"the QE's ISVSVN {report.isv_svn} is below every QE TCB level: update the DCAP quoting enclave"
    )


def _platform_status(
    quote: Quote, ext: PckExtension, info: TcbInfo
) -> tuple[TcbStatus, tuple[str, ...], tuple[TcbStatus, tuple[str, ...]] | None]:
    body = quote.body
    tee_svn = body.tee_tcb_svn if isinstance(body, TdReport) else None
    start = 2 if tee_svn is not None and tee_svn[1] > 0 else 0
    for level in info.levels:
        if ext.pce_svn < level.pce_svn:
            continue
        if any(a < b for a, b in zip(ext.cpu_svn_components, level.sgx_components, strict=True)):
            continue
        if tee_svn is not None:
            if level.tdx_components is None:
                raise TcbMismatchError("the TDX TCB info has levels without tdxtcbcomponents")
            if any(tee_svn[i] < level.tdx_components[i] for i in range(start, 16)):
                continue
        module = _module_status(body, info) if isinstance(body, TdReport) else None
        return level.status, level.advisory_ids, module
    raise TcbNotAcceptableError(
        "no TCB level of the TCB info matches this platform (its SVNs are below every level): update "
        "the BIOS/microcode and re-provision the PCK certificate"
    )


def _module_status(body: TdReport, info: TcbInfo) -> tuple[TcbStatus, tuple[str, ...]] | None:
    svn, major = body.tee_tcb_svn[0], body.tee_tcb_svn[1]
    if major == 0:
        mod = info.tdx_module
        if mod is None:
            return None
        if body.mr_signer_seam != mod.mrsigner or not masked_equal(
            body.seam_attributes, mod.attributes_mask, mod.attributes
        ):
            raise TcbMismatchError("the TDX module's MRSIGNERSEAM/SEAMATTRIBUTES do not match the TCB info")
        return None
    if not info.tdx_module_identities:
        return None
    ident_id = f"TDX_{major:02X}"
    for ident in info.tdx_module_identities:
        if ident.id != ident_id:
            continue
        if body.mr_signer_seam != ident.mrsigner or not masked_equal(
            body.seam_attributes, ident.attributes_mask, ident.attributes
        ):
            raise TcbMismatchError(f"the TDX module does not match the TCB info's {ident_id} identity")
        for isvsvn, status, adv in ident.levels:
            if svn >= isvsvn:
                return status, adv
        raise TcbNotAcceptableError(
            f"the TDX module {ident_id} SVN {svn} is below every level in the TCB info: update the TDX module"
        )
    raise TcbNotAcceptableError(
        f"the TCB info has no identity for TDX module {ident_id}: this module version is not supported"
    )


def _measurements(body: EnclaveReport | TdReport) -> dict[str, str]:
    if isinstance(body, TdReport):
        out = {"mrtd": body.mr_td.hex(), "mrseam": body.mr_seam.hex(), "mrconfigid": body.mr_config_id.hex()}
        for i, r in enumerate(body.rtmrs):
            out[f"rtmr{i}"] = r.hex()
        return out
    return {"mrenclave": body.mr_enclave.hex(), "mrsigner": body.mr_signer.hex()}


def _check_measurements(body: EnclaveReport | TdReport, policy: Policy) -> None:
    def check(name: str, value: bytes, allowed: frozenset[bytes] | None) -> None:
        if allowed is not None and value not in allowed:
            raise MeasurementNotAllowedError(
                f"{name} {value.hex()} is not in the policy's allowed list: run the published image "
                f"(or ask the network to allow this build)"
            )

    if isinstance(body, TdReport):
        check("MRTD", body.mr_td, policy.allowed_mrtd)
        for i, (value, allowed) in enumerate(zip(body.rtmrs, policy.allowed_rtmr, strict=False)):
            check(f"RTMR{i}", value, allowed)
    else:
        check("MRENCLAVE", body.mr_enclave, policy.allowed_mrenclave)
        check("MRSIGNER", body.mr_signer, policy.allowed_mrsigner)
