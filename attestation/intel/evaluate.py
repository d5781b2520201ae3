"""Step (6) of :mod:`attestation.intel.verify`: the TCB status of a quote against verified collateral.

The collateral is authenticated first (:mod:`attestation.intel.collateral_checks`), then the quote's
platform (FMSPC, PCE-ID) and TEE kind are matched to the TCB info and QE identity, the quoting enclave
to its identity, the platform SVNs to a TCB level and (TDX) the TDX module to its identity; the statuses
merge (:func:`attestation.intel.tcb.converge`) and the result is held against the policy's lowest
acceptable status and its refused advisories.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from cryptography import x509

from attestation.collateral import IntelCollateral
from attestation.errors import TcbMismatchError, TcbNotAcceptableError
from attestation.intel.collateral_checks import check_collateral, check_revocation
from attestation.intel.layouts import EnclaveReport, TdReport
from attestation.intel.pck import PckExtension
from attestation.intel.quote import Quote
from attestation.intel.tcb import QeIdentity, TcbInfo, converge, masked_equal
from attestation.policy import Policy, TcbStatus

_Levels = tuple[TcbStatus, tuple[str, ...]]
"""A status and the advisory ids that come with it."""


@dataclass(frozen=True)
class TcbResult:
    """The merged TCB status of a quote, its advisories, and the details a verdict reports."""

    status: TcbStatus
    advisories: tuple[str, ...]
    details: dict[str, object]


def evaluate_tcb(
    quote: Quote,
    qe_report: EnclaveReport,
    ext: PckExtension,
    chain: list[x509.Certificate],
    collateral: IntelCollateral,
    roots: list[x509.Certificate],
    policy: Policy,
    now: dt.datetime,
) -> TcbResult:
    """Steps (4)-(6): authenticate the collateral, check revocation, then evaluate and judge the TCB."""
    tcb_info, qe_identity = check_collateral(collateral, roots, policy, now)
    check_revocation(collateral, chain, roots, now)
    _check_platform_matches(quote, ext, tcb_info, qe_identity)
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
    return TcbResult(merged, all_adv, details)


def _check_platform_matches(
    quote: Quote, ext: PckExtension, tcb_info: TcbInfo, qe_identity: QeIdentity
) -> None:
    """The TCB info is this platform's (FMSPC, PCE-ID), and both documents are for the quote's TEE kind."""
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


def _qe_status(report: EnclaveReport, ident: QeIdentity) -> _Levels:
    """The quoting enclave matches Intel's QE identity; its status is that of its ISVSVN's level."""
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
) -> tuple[TcbStatus, tuple[str, ...], _Levels | None]:
    """The first TCB level (highest first) the platform's SVNs reach, and (TDX) the module's status."""
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


def _module_status(body: TdReport, info: TcbInfo) -> _Levels | None:
    """The TDX module's identity and status (None: the TCB info does not grade this module)."""
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
