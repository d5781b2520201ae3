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

Steps (1)-(3) and (7) are here; (4) and (5) in :mod:`attestation.intel.collateral_checks`, (6) in
:mod:`attestation.intel.evaluate`.
"""

from __future__ import annotations

import datetime as dt
import hashlib

from cryptography import x509
from cryptography.hazmat.primitives import hashes

from attestation.binding import Binding, check_raw, check_report_data
from attestation.certchain import (
    load_der_cert,
    load_pem_chain,
    subject_of,
    verify_chain,
    verify_path_rfc5280,
)
from attestation.collateral import IntelCollateral
from attestation.errors import (
    BadChainError,
    DebugError,
    MeasurementNotAllowedError,
    QeReportDataMismatchError,
    QeReportSignatureError,
    QuoteSignatureError,
    TcbUnknownError,
    UnknownQeVendorError,
    UnsupportedCertificationDataError,
)
from attestation.intel.evaluate import TcbResult, evaluate_tcb
from attestation.intel.layouts import EnclaveReport, TdReport
from attestation.intel.pck import PckExtension, parse_pck_extension
from attestation.intel.quote import CERT_PCK_CHAIN, INTEL_QE_VENDOR_ID, Quote
from attestation.limits import Limits, check_evidence_size
from attestation.policy import Policy
from attestation.signatures import ecdsa_ok, p256_key_from_raw
from attestation.verdict import AttestationVerdict

TCB_UNKNOWN = "Unknown"
"""``AttestationVerdict.tcb_status`` of a quote verified without collateral under ``accept_unknown_tcb``."""


def verify_intel(
    evidence: bytes | Quote,
    collateral: IntelCollateral | None,
    policy: Policy,
    now: dt.datetime,
    expected: Binding | bytes | None = None,
) -> AttestationVerdict:
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

    # 1-3. The quote: its source, its PCK chain to a pinned root, QE report and quote signatures.
    _check_quote_source(quote)
    roots = [load_der_cert(r, "pinned Intel root") for r in policy.intel_roots]
    chain, root = _check_pck_chain(quote, roots, limits, now)
    _check_quote_signatures(quote, chain[0])
    ext = parse_pck_extension(chain[0])

    # 4-6. Collateral (signatures before parsing), revocation, TCB evaluation; or TCB unknown.
    tcb: TcbResult | None = None
    if collateral is None:
        if not policy.accept_unknown_tcb:
            raise TcbUnknownError(
                "no collateral: the quote's signature, QE report and PCK chain verify, but its TCB status and "
                "revocation are unknown and the policy requires them; ship the collateral (Intel PCS/PCCS)"
            )
    else:
        tcb = evaluate_tcb(quote, quote.qe.qe_report, ext, chain, collateral, roots, policy, now)

    # 7. Debug, measurements, binding.
    body = quote.body
    _check_body(body, policy, expected)
    return AttestationVerdict(
        format="intel-tdx" if quote.is_tdx else "intel-sgx",
        report_data=body.report_data,
        measurements=_measurements(body),
        root=subject_of(root),
        policy=policy.name,
        debug=body.debug,
        tcb_status=TCB_UNKNOWN if tcb is None else tcb.status.value,
        advisory_ids=() if tcb is None else tcb.advisories,
        binding_checked=expected is not None,
        details=_details(quote, ext, tcb),
    )


def _check_quote_source(quote: Quote) -> None:
    """Step (1): the quote comes from Intel's quoting enclave and carries its PCK chain (type 5)."""
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


def _check_pck_chain(
    quote: Quote, roots: list[x509.Certificate], limits: Limits, now: dt.datetime
) -> tuple[list[x509.Certificate], x509.Certificate]:
    """Step (2): the PCK chain the quote carries (count and size capped before it is decoded), to a
    pinned root; returns the chain (leaf first) and that root."""
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
    return chain, root


def _check_quote_signatures(quote: Quote, pck_leaf: x509.Certificate) -> None:
    """Step (3): the QE report is signed by the PCK key and certifies the attestation key, which signed
    the quote."""
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


def _check_body(body: EnclaveReport | TdReport, policy: Policy, expected: Binding | bytes | None) -> None:
    """Step (7): no debug mode (unless the policy allows it), allowed measurements, report-data binding."""
    if body.debug and not policy.dangerous_allow_debug:
        raise DebugError(
            "the TD/enclave runs in debug mode (its memory is readable by the host); launch it without "
            "debug (TD attributes DEBUG=0 / SGX ATTRIBUTES.DEBUG=0)"
        )
    _check_measurements(body, policy)
    if isinstance(expected, Binding):
        check_report_data(body.report_data, expected)
    elif expected is not None:
        check_raw(body.report_data, expected)


def _details(quote: Quote, ext: PckExtension, tcb: TcbResult | None) -> dict[str, object]:
    """The verdict's details: platform identity, TCB evaluation (or what was not checked), TEE fields."""
    body = quote.body
    details: dict[str, object] = {
        "quote_version": quote.version,
        "tee": "TDX" if quote.is_tdx else "SGX",
        "fmspc": ext.fmspc.hex(),
        "pce_id": ext.pce_id.hex(),
        "pce_svn": ext.pce_svn,
        "cpu_svn": ext.cpu_svn.hex(),
        "qe_svn": quote.qe.qe_report.isv_svn,
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
    return details


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
