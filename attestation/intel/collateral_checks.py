"""Whether Intel collateral is authentic and current: steps (4) and (5) of :mod:`attestation.intel.verify`.

(4) The TCB info and QE identity: their issuer chains (windows, signatures to a pinned root) and their
ECDSA signatures over the exact text, checked before the JSON is parsed, then their validity windows,
age and TCB evaluation data number against the policy. (5) The CRLs (root CA CRL and PCK CRL: issuers,
signatures, windows) and the revocation of every certificate the quote and the collateral use.

The signature checks are time-independent and memoized per loaded collateral (bounded in bytes).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes

from attestation.certchain import (
    MEMO_BYTES,
    chain_root,
    check_cert_window,
    check_window,
    crl_signed_by,
    is_revoked,
    subject_of,
    verify_chain,
    verify_path_rfc5280,
)
from attestation.collateral import PARSE_FACTOR, IntelCollateral
from attestation.errors import (
    CollateralExpiredError,
    CollateralSignatureError,
    RevocationUnknownError,
    RevokedError,
)
from attestation.intel.tcb import QeIdentity, TcbInfo
from attestation.memo import bytes_memo, deep_cost
from attestation.policy import Policy
from attestation.signatures import ecdsa_ok

REFRESH = "fetch current collateral (Intel PCS or your PCCS) and ship it with the quote"
"""What every collateral refusal tells the operator to do."""


def check_collateral(
    collateral: IntelCollateral, roots: Sequence[x509.Certificate], policy: Policy, now: dt.datetime
) -> tuple[TcbInfo, QeIdentity]:
    """Step (4): the TCB info and QE identity, authenticated before they are parsed, then their windows.

    Returns the two parsed documents; raises the first failure (an expired issuer certificate, a bad
    signature, a document out of its window or older than the policy allows).
    """
    for certs, what in (
        (collateral.tcb_info_chain, "TCB info"),
        (collateral.qe_identity_chain, "QE identity"),
    ):
        for cert in certs:
            check_cert_window(cert, now, f"the {what} issuer chain")
    check_collateral_signatures(collateral, tuple(roots))
    tcb_info = collateral.tcb_info_parsed
    qe_identity = collateral.qe_identity_parsed
    check_collateral_windows(tcb_info, qe_identity, policy, now)
    return tcb_info, qe_identity


def check_collateral_windows(
    tcb_info: TcbInfo, qe_identity: QeIdentity, policy: Policy, now: dt.datetime
) -> None:
    """The two documents are within their windows, no older than ``policy.max_collateral_age`` and at
    least at ``policy.min_tcb_evaluation_data_number``."""
    check_window(tcb_info.issue_date, tcb_info.next_update, now, "the TCB info", REFRESH)
    check_window(qe_identity.issue_date, qe_identity.next_update, now, "the QE identity", REFRESH)
    if policy.max_collateral_age is not None:
        for doc, name in ((tcb_info, "TCB info"), (qe_identity, "QE identity")):
            if now - doc.issue_date > policy.max_collateral_age:
                raise CollateralExpiredError(
                    f"the {name} was issued at {doc.issue_date.isoformat()}, older than the policy's "
                    f"{policy.max_collateral_age}; {REFRESH}"
                )
    if policy.min_tcb_evaluation_data_number is not None:
        for doc2, name in ((tcb_info, "TCB info"), (qe_identity, "QE identity")):
            if doc2.tcb_evaluation_data_number < policy.min_tcb_evaluation_data_number:
                raise CollateralExpiredError(
                    f"the {name} has tcbEvaluationDataNumber {doc2.tcb_evaluation_data_number}, the policy "
                    f"needs {policy.min_tcb_evaluation_data_number} or later; {REFRESH}"
                )


def _collateral_cost(c: IntelCollateral, *rest: object, result: object) -> int:
    return PARSE_FACTOR * c.size() + deep_cost(rest)


@bytes_memo(MEMO_BYTES, _collateral_cost)
def check_collateral_signatures(c: IntelCollateral, roots: tuple[x509.Certificate, ...]) -> None:
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
    root = chain_root(tuple(chain), tuple(roots), f"{what} issuer chain", True)
    verify_path_rfc5280(chain[0], chain[1:], root, root.not_valid_before_utc, f"{what} issuer chain")
    if not ecdsa_ok(chain[0].public_key(), signature, text.encode("utf-8"), hashes.SHA256()):
        raise CollateralSignatureError(
            f"the {what} signature does not verify over its exact text: the collateral was edited or "
            f"re-serialized; ship Intel's JSON text byte for byte"
        )


@bytes_memo(MEMO_BYTES, _collateral_cost)
def crl_signatures(c: IntelCollateral, root: x509.Certificate, pck_ca: x509.Certificate) -> tuple[bool, bool]:
    """Whether the root CA CRL is signed by ``root`` and the PCK CRL by ``pck_ca`` (memoized: pure)."""
    return crl_signed_by(c.root_crl, root), crl_signed_by(c.pck_crl_parsed, pck_ca)


def _revoked(crl: x509.CertificateRevocationList, cert: x509.Certificate) -> bool:
    return is_revoked(crl, cert, "a CRL")


def check_revocation(
    c: IntelCollateral, pck_chain: list[x509.Certificate], roots: Sequence[x509.Certificate], now: dt.datetime
) -> None:
    """Step (5): the CRLs are issued and signed by the right CAs and current, and no certificate used (the
    quote's PCK chain, the collateral's issuer chains) is revoked."""
    root_crl, pck_crl = c.root_crl, c.pck_crl_parsed
    root = _check_crl_issuers(c, pck_chain, roots)
    for crl, name in ((root_crl, "the root CA CRL"), (pck_crl, "the PCK CRL")):
        check_window(crl.last_update_utc, crl.next_update_utc, now, name, REFRESH)
        if crl.next_update_utc is None:
            raise CollateralExpiredError(f"{name} has no nextUpdate; {REFRESH}")
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


def _check_crl_issuers(
    c: IntelCollateral, pck_chain: list[x509.Certificate], roots: Sequence[x509.Certificate]
) -> x509.Certificate:
    """The root CA CRL is issued and signed by a pinned root (returned), the PCK CRL by the PCK's CA."""
    root_crl, pck_crl = c.root_crl, c.pck_crl_parsed
    issuer_by_name = {r.subject: r for r in roots}
    root = issuer_by_name.get(root_crl.issuer)
    if root is None:
        raise RevocationUnknownError(
            f"the root CA CRL is issued by '{root_crl.issuer.rfc4514_string()}', not by a pinned root: "
            f"revocation of the intermediate CAs is unknown; {REFRESH}"
        )
    root_ok, pck_ok = crl_signatures(c, root, pck_chain[1])
    if not root_ok:
        raise CollateralSignatureError(f"the root CA CRL is not signed by the pinned root; {REFRESH}")
    pck_ca = pck_chain[1]
    if pck_crl.issuer != pck_ca.subject:
        raise RevocationUnknownError(
            f"the PCK CRL is issued by '{pck_crl.issuer.rfc4514_string()}', but the PCK certificate is "
            f"issued by '{subject_of(pck_ca)}': revocation status unknown; ship the CRL of the PCK's CA "
            f"(Intel PCS /pckcrl?ca={'platform' if 'Platform' in subject_of(pck_ca) else 'processor'})"
        )
    if not pck_ok:
        raise CollateralSignatureError(f"the PCK CRL is not signed by the PCK CA; {REFRESH}")
    return root
