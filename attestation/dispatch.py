"""One entry point for every format: detect it, check the collateral matches, run the format's verify."""

from __future__ import annotations

import datetime as dt

from attestation.amd.report import SnpReport
from attestation.amd.verify import verify_snp
from attestation.binding import Binding
from attestation.collateral import (
    FORMAT_INTEL,
    FORMAT_NVIDIA,
    FORMAT_SNP,
    Collateral,
    IntelCollateral,
    NvidiaCollateral,
    SnpCollateral,
)
from attestation.errors import (
    AttestationError,
    CollateralRequiredError,
    EvidenceFormatError,
    MalformedCollateralError,
    MalformedEvidenceError,
)
from attestation.intel.layouts import TdReport
from attestation.intel.quote import Quote
from attestation.intel.verify import verify_intel
from attestation.limits import DEFAULT_LIMITS, Limits, check_evidence_size
from attestation.nvidia.spdm import GpuReport
from attestation.nvidia.verify import verify_nvidia
from attestation.policy import Policy
from attestation.verdict import AttestationVerdict


def detect_format(evidence: bytes) -> str:
    """Guess the format of evidence bytes: ``intel-dcap``, ``amd-sev-snp`` or ``nvidia-h100``.

    Intel quotes start with a u16 version 3..5 and key type 2; SEV-SNP reports with a u32 version 2..5
    and are at least 0x4A0 bytes; H100 reports start with an SPDM version byte and 0xE0.
    """
    if not isinstance(evidence, bytes | bytearray | memoryview):
        raise MalformedEvidenceError("evidence must be bytes")
    b = bytes(evidence[:8])
    if len(b) >= 2 and b[1] == 0xE0 and b[0] >> 4 == 1:
        return FORMAT_NVIDIA
    if len(b) >= 4 and b[1] == 0 and b[3] == 0 and b[0] in (3, 4, 5) and b[2] in (2, 3):
        return FORMAT_INTEL
    if len(evidence) >= 0x4A0 and len(b) >= 4 and int.from_bytes(b[:4], "little") in range(2, 6):
        return FORMAT_SNP
    if len(b) >= 2 and b[1] == 0 and b[0] in range(1, 16):
        return FORMAT_INTEL  # an Intel header with an unsupported version or key type: let it explain
    raise EvidenceFormatError(
        "the evidence is not an Intel DCAP quote, an SEV-SNP report or an H100 SPDM report; send the raw "
        "bytes the TEE produced"
    )


_NAMES = {
    FORMAT_INTEL: "an Intel DCAP quote",
    FORMAT_SNP: "an SEV-SNP report",
    FORMAT_NVIDIA: "an H100 report",
}


def _parse_as(fmt: str, evidence: bytes) -> object:
    if fmt == FORMAT_INTEL:
        return Quote.parse(evidence)
    if fmt == FORMAT_SNP:
        return SnpReport.parse(evidence)
    return GpuReport.parse(evidence)


def _evidence_for(fmt: str, evidence: bytes, limits: Limits) -> object:
    """Parse ``evidence`` as ``fmt`` (the collateral's format); a clear format error when it is not one."""
    check_evidence_size(evidence, limits)
    try:
        detected: str | None = detect_format(evidence)
    except MalformedEvidenceError:
        detected = None
    try:
        return _parse_as(fmt, evidence)
    except AttestationError as exc:
        if detected == fmt:
            raise
        looks = f"its first bytes look like {_NAMES[detected]}" if detected else "it is of no known format"
        raise EvidenceFormatError(
            f"the collateral is for {_NAMES[fmt]} ({fmt}), but the evidence is not one ({exc}); {looks}: "
            f"send the evidence with the collateral of its own kind"
        ) from None


def verify(
    evidence: bytes,
    collateral: Collateral | None,
    policy: Policy,
    now: dt.datetime,
    expected: Binding | bytes | None = None,
) -> AttestationVerdict:
    """Verify TEE evidence of any supported format. Pure: no clock, no network, no global trust store.

    ``evidence``: raw quote/report bytes (NVIDIA: binary, see ``nvidia.spdm.decode_report_text``).
    ``collateral``: the matching :class:`IntelCollateral`, :class:`SnpCollateral` or
    :class:`NvidiaCollateral`; the evidence is parsed as the collateral's format (evidence of another
    kind is an ``EvidenceFormatError``). ``None`` (Intel only): the quote's signatures, QE report and
    PCK chain are checked, its TCB status is unknown, and the policy decides (``accept_unknown_tcb``;
    refused with ``TcbUnknownError`` by default). ``policy``: roots, allow-lists, debug, TCB floor, freshness.
    ``now``: the verification instant (timezone-aware; naive means UTC). ``expected``: the
    :class:`Binding` the report data must carry (a replay raises ReplayError), raw expected report-data
    bytes, or None to skip the binding check (for inspection only; validators always pass a Binding).

    Returns a :class:`AttestationVerdict`; raises a subclass of ``AttestationError`` on any refusal.
    """
    if now.tzinfo is None:
        now = now.replace(tzinfo=dt.UTC)
    if not isinstance(evidence, bytes | bytearray | memoryview):
        raise MalformedEvidenceError("evidence must be bytes")
    evidence = bytes(evidence)
    if collateral is None:
        fmt = detect_format(evidence)
        if fmt != FORMAT_INTEL:
            raise CollateralRequiredError(
                f"{_NAMES[fmt]} cannot be checked without collateral: its signing key is certified only by "
                f"the collateral ({'the VCEK and ASK/ARK' if fmt == FORMAT_SNP else 'the device chain'}); "
                f"ship it with the evidence"
            )
    elif isinstance(collateral, IntelCollateral | SnpCollateral | NvidiaCollateral):
        collateral.check_limits(policy.limits)
        fmt = collateral.format
    else:
        raise MalformedCollateralError(
            f"collateral must be IntelCollateral, SnpCollateral, NvidiaCollateral or None, not "
            f"{type(collateral).__name__}"
        )
    parsed = _evidence_for(fmt, evidence, policy.limits)
    if fmt == FORMAT_INTEL:
        assert isinstance(parsed, Quote) and not isinstance(collateral, SnpCollateral | NvidiaCollateral)
        return verify_intel(parsed, collateral, policy, now, expected)
    if fmt == FORMAT_SNP:
        assert isinstance(parsed, SnpReport) and isinstance(collateral, SnpCollateral)
        return verify_snp(parsed, collateral, policy, now, expected)
    assert isinstance(parsed, GpuReport) and isinstance(collateral, NvidiaCollateral)
    return verify_nvidia(parsed, collateral, policy, now, expected)


def parse_evidence(evidence: bytes, limits: Limits = DEFAULT_LIMITS) -> object:
    """Parse evidence of any supported format into its parsed object (Quote, SnpReport, GpuReport)."""
    if isinstance(evidence, bytes | bytearray | memoryview):
        check_evidence_size(evidence, limits)
    return _parse_as(detect_format(evidence), evidence)


def describe_evidence(evidence: bytes) -> dict[str, object]:
    """The fields of evidence that matter, parsed but NOT verified (for printing next to a refusal)."""
    parsed = parse_evidence(evidence)
    if isinstance(parsed, Quote):
        out: dict[str, object] = {
            "format": "intel-tdx" if parsed.is_tdx else "intel-sgx",
            "quote_version": parsed.version,
            "tee_type": f"0x{parsed.header.tee_type:x}",
            "qe_vendor_id": parsed.header.qe_vendor_id.hex(),
            "report_data": parsed.report_data.hex(),
            "debug": parsed.body.debug,
            "certification_data_type": parsed.pck_certification.cert_type,
            "trailing_bytes": len(parsed.trailing),
        }
        body = parsed.body
        if isinstance(body, TdReport):
            out.update(
                mrtd=body.mr_td.hex(),
                rtmr0=body.rtmr0.hex(),
                rtmr1=body.rtmr1.hex(),
                rtmr2=body.rtmr2.hex(),
                rtmr3=body.rtmr3.hex(),
                td_attributes=body.td_attributes.hex(),
                tee_tcb_svn=body.tee_tcb_svn.hex(),
            )
        else:
            out.update(
                mrenclave=body.mr_enclave.hex(),
                mrsigner=body.mr_signer.hex(),
                attributes=body.attributes.hex(),
            )
        return out
    if isinstance(parsed, SnpReport):
        return {
            "format": "amd-sev-snp",
            "report_version": parsed.version,
            "policy": f"0x{parsed.policy:016x}",
            "debug": parsed.debug,
            "vmpl": parsed.vmpl,
            "measurement": parsed.measurement.hex(),
            "report_data": parsed.report_data.hex(),
            "reported_tcb": parsed.reported.as_dict(),
            "chip_id": parsed.chip_id.hex(),
            "trailing_bytes": len(parsed.trailing),
        }
    assert isinstance(parsed, GpuReport)
    return {
        "format": "nvidia-h100",
        "spdm_version": f"0x{parsed.request.version:02x}",
        "nonce": parsed.nonce.hex(),
        "blocks": len(parsed.response.blocks),
        "opaque_bytes": len(parsed.response.opaque),
        "trailing_bytes": len(parsed.trailing),
    }


def describe_evidence_safe(evidence: bytes) -> dict[str, object]:
    """:func:`describe_evidence`, or ``{"error": ...}`` when the evidence cannot be parsed."""
    try:
        return describe_evidence(evidence)
    except AttestationError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
