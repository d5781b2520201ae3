"""Every real vector verifies to the result its README states inside its window, and fails outside."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from attestation import Policy, TcbStatus, detect_format, verify
from attestation.amd.report import SnpReport
from attestation.errors import (
    BadChainError,
    BindingMismatchError,
    CertificateExpiredError,
    CertificateNotYetValidError,
    CollateralExpiredError,
    CollateralNotYetValidError,
    DebugError,
    MeasurementNotAllowedError,
    TcbNotAcceptableError,
)
from attestation.intel.layouts import TdReport
from attestation.intel.quote import Quote
from attestation.nvidia.spdm import GpuReport
from tests.attestation.attest_support import (
    NVIDIA_NONCE,
    NVIDIA_TIME,
    SNP_TIME,
    IntelVector,
    intel_policy,
    nvidia_collateral,
    nvidia_report,
    snp_collateral,
    snp_report,
    utc,
)

SECOND = dt.timedelta(seconds=1)


# --- Intel ---------------------------------------------------------------------------------------------------


def test_sgx_quote_verifies_as_readme_states(sgx: IntelVector) -> None:
    v = verify(sgx.quote, sgx.collateral, intel_policy(), sgx.inside, expected=b"Hello, world!" + bytes(51))
    assert v.format == "intel-sgx"
    assert v.tcb_status == "ConfigurationAndSWHardeningNeeded"
    assert v.advisory_ids == ("INTEL-SA-00289", "INTEL-SA-00615")
    assert v.details["qe_tcb_status"] == "UpToDate"
    assert v.details["fmspc"] == "00a067110000"
    assert v.details["pce_svn"] == 13
    assert v.report_data == b"Hello, world!" + bytes(51)
    assert v.root.endswith("CN=Intel SGX Root CA")
    assert v.binding_checked


def test_tdx_quote_verifies_as_readme_states(tdx: IntelVector) -> None:
    v = verify(tdx.quote, tdx.collateral, intel_policy(), tdx.inside)
    assert v.format == "intel-tdx"
    assert v.tcb_status == "UpToDate"
    assert v.advisory_ids == ()
    assert v.details["fmspc"] == "b0c06f000000"
    assert v.details["td_attributes"] == "0000001000000000"
    assert v.debug is False
    assert v.details["trailing_bytes"] == 70
    # Accepted by the strictest TCB floor as well.
    verify(tdx.quote, tdx.collateral, Policy(min_tcb_status=TcbStatus.UP_TO_DATE), tdx.inside)


def test_sgx_refused_by_default_tcb_floor(sgx: IntelVector) -> None:
    with pytest.raises(TcbNotAcceptableError, match="ConfigurationAndSWHardeningNeeded"):
        verify(sgx.quote, sgx.collateral, Policy(), sgx.inside)


@pytest.mark.parametrize("name", ["sgx_quote", "tdx_quote"])
def test_window_edges(intel: dict[str, IntelVector], name: str) -> None:
    vec = intel[name]
    verify(vec.quote, vec.collateral, intel_policy(), vec.start)
    verify(vec.quote, vec.collateral, intel_policy(), vec.end)
    with pytest.raises(CollateralNotYetValidError):
        verify(vec.quote, vec.collateral, intel_policy(), vec.start - SECOND)
    with pytest.raises(CollateralExpiredError):
        verify(vec.quote, vec.collateral, intel_policy(), vec.end + SECOND)


@pytest.mark.parametrize("name", ["sgx_quote", "tdx_quote"])
def test_outside_window_as_readme_states(intel: dict[str, IntelVector], name: str) -> None:
    vec = intel[name]
    with pytest.raises(CollateralExpiredError, match="TCB info"):
        verify(vec.quote, vec.collateral, intel_policy(), vec.start + dt.timedelta(days=40))
    # 400 days before, the TCB info's issue date is in the future, but an earlier check in the order of
    # verification fails first: the TDX quote's PCK certificate (from 2025-02-06) is not valid yet either,
    # and the SGX collateral's TCB signing certificate (from 2025-05-06) is not.
    first = {"tdx_quote": "PCK certificate chain", "sgx_quote": "TCB info issuer chain"}[name]
    with pytest.raises(CertificateNotYetValidError, match=first):
        verify(vec.quote, vec.collateral, intel_policy(), vec.start - dt.timedelta(days=400))


@pytest.mark.parametrize("name", ["sgx_quote", "tdx_quote"])
def test_intel_round_trip(intel: dict[str, IntelVector], name: str) -> None:
    raw = intel[name].quote
    q = Quote.parse(raw)
    assert q.to_bytes() == raw
    assert detect_format(raw) == "intel-dcap"


def test_tdx_trailing_bytes_kept(tdx: IntelVector) -> None:
    q = Quote.parse(tdx.quote)
    assert len(q.trailing) == 70
    assert isinstance(q.body, TdReport)
    assert q.to_bytes()[-70:] == tdx.quote[-70:]
    # Other trailing bytes are tolerated too, and kept.
    longer = tdx.quote + b"\xff" * 13
    assert Quote.parse(longer).to_bytes() == longer
    verify(longer, tdx.collateral, intel_policy(), tdx.inside)


def test_intel_measurement_policy(tdx: IntelVector) -> None:
    q = Quote.parse(tdx.quote)
    assert isinstance(q.body, TdReport)
    ok = dataclasses.replace(intel_policy(), allowed_mrtd=frozenset({q.body.mr_td}))
    verify(tdx.quote, tdx.collateral, ok, tdx.inside)
    bad = dataclasses.replace(intel_policy(), allowed_mrtd=frozenset({bytes(48)}))
    with pytest.raises(MeasurementNotAllowedError, match="MRTD"):
        verify(tdx.quote, tdx.collateral, bad, tdx.inside)
    bad_rtmr = dataclasses.replace(intel_policy(), allowed_rtmr=(None, None, frozenset({b"x" * 48}), None))
    with pytest.raises(MeasurementNotAllowedError, match="RTMR2"):
        verify(tdx.quote, tdx.collateral, bad_rtmr, tdx.inside)


def test_intel_freshness_policy(tdx: IntelVector) -> None:
    stale = dataclasses.replace(intel_policy(), max_collateral_age=dt.timedelta(hours=1))
    with pytest.raises(CollateralExpiredError, match="older than"):
        verify(tdx.quote, tdx.collateral, stale, tdx.inside)
    newer = dataclasses.replace(intel_policy(), min_tcb_evaluation_data_number=18)
    with pytest.raises(CollateralExpiredError, match="tcbEvaluationDataNumber"):
        verify(tdx.quote, tdx.collateral, newer, tdx.inside)


def test_intel_refused_advisory(sgx: IntelVector) -> None:
    pol = dataclasses.replace(intel_policy(), refused_advisories=frozenset({"INTEL-SA-00615"}))
    with pytest.raises(TcbNotAcceptableError, match="INTEL-SA-00615"):
        verify(sgx.quote, sgx.collateral, pol, sgx.inside)


def test_intel_refused_without_pinned_root(tdx: IntelVector) -> None:
    with pytest.raises(BadChainError):
        verify(tdx.quote, tdx.collateral, Policy(intel_roots=()), tdx.inside)


# --- AMD SEV-SNP ---------------------------------------------------------------------------------------------


def test_snp_report_fields_and_round_trip() -> None:
    raw = snp_report()
    r = SnpReport.parse(raw)
    assert r.to_bytes() == raw
    assert detect_format(raw) == "amd-sev-snp"
    assert r.version == 2 and r.vmpl == 0 and r.signature_algo == 1
    assert r.policy == 0x00000000000B0000
    assert r.reported_tcb == 0x4405000000000002
    assert r.reported.as_dict() == {"bootloader": 2, "tee": 0, "snp": 5, "microcode": 68}
    assert r.report_data == bytes([1, 2, 3, 4, 5]) + bytes(59)
    assert r.measurement.hex() == (
        "b07af9620f3b839b47996422ddec6058338951d984e312115131ea82705eaf5b6bdf8a9ece31a5a608eb0cf2e4872b01"
    )


def test_snp_readme_says_debug_clear_but_policy_bit_19_is_set() -> None:
    """Named disagreement with the vector's README: POLICY 0xB0000 has bit 19 (DEBUG) SET.

    SEV-SNP ABI spec, Table 9 (guest policy): bit 16 SMT, bit 17 reserved (must be 1), bit 19 DEBUG.
    0xB0000 = bits 16, 17 and 19. The strict reading wins: the default policy refuses the report as a
    debug guest; everything the README states as expected (signature, chain, TCB) holds and is checked
    under ``dangerous_allow_debug``.
    """
    with pytest.raises(DebugError, match="bit 19"):
        verify(snp_report(), snp_collateral(), Policy(), SNP_TIME)


def test_snp_verifies_as_readme_states() -> None:
    pol = Policy(dangerous_allow_debug=True)
    v = verify(snp_report(), snp_collateral(), pol, SNP_TIME, expected=bytes([1, 2, 3, 4, 5]) + bytes(59))
    assert v.format == "amd-sev-snp"
    assert v.debug is True
    assert v.details["reported_tcb"] == {"bootloader": 2, "tee": 0, "snp": 5, "microcode": 68}
    assert v.root.startswith("CN=ARK-Milan")
    # Valid at later dates inside every window, refused before the VCEK and after it.
    verify(snp_report(), snp_collateral(), pol, utc(2022, 9, 24, 1))
    verify(snp_report(), snp_collateral(), pol, utc(2029, 9, 1))
    with pytest.raises(CertificateNotYetValidError):
        verify(snp_report(), snp_collateral(), pol, utc(2022, 9, 24))
    with pytest.raises(CertificateExpiredError):
        verify(snp_report(), snp_collateral(), pol, utc(2029, 9, 25))


def test_snp_measurement_and_tcb_policy() -> None:
    pol = Policy(dangerous_allow_debug=True, allowed_snp_measurements=frozenset({bytes(48)}))
    with pytest.raises(MeasurementNotAllowedError):
        verify(snp_report(), snp_collateral(), pol, SNP_TIME)
    pol = Policy(dangerous_allow_debug=True, snp_min_tcb={"microcode": 200})
    with pytest.raises(TcbNotAcceptableError):
        verify(snp_report(), snp_collateral(), pol, SNP_TIME)
    with pytest.raises(BindingMismatchError):
        verify(
            snp_report(), snp_collateral(), Policy(dangerous_allow_debug=True), SNP_TIME, expected=bytes(64)
        )


# --- NVIDIA H100 ---------------------------------------------------------------------------------------------


def test_nvidia_report_fields_and_round_trip() -> None:
    raw = nvidia_report()
    assert len(raw) == 4117
    g = GpuReport.parse(raw)
    assert g.to_bytes() == raw
    assert len(g.signed) == 4021
    assert detect_format(raw) == "nvidia-h100"
    assert g.request.version == 0x11 and g.request.param1 == 1 and g.request.param2 == 0xFF
    assert g.nonce == NVIDIA_NONCE
    assert len(g.response.blocks) == 64
    assert all(len(b.value) == 48 for b in g.response.blocks)
    assert len(g.response.opaque) == 422


def test_nvidia_verifies_as_readme_states() -> None:
    v = verify(nvidia_report(), nvidia_collateral(), Policy(), NVIDIA_TIME, expected=NVIDIA_NONCE)
    assert v.format == "nvidia-h100"
    assert v.details["driver_version"] == "550.90.07"
    assert v.details["vbios_version"] == "96.00.9F.00.01"
    assert v.root == "O=NVIDIA,CN=NVIDIA Device Identity CA"
    with pytest.raises(BindingMismatchError):
        verify(nvidia_report(), nvidia_collateral(), Policy(), NVIDIA_TIME, expected=bytes(32))


def test_nvidia_window_and_measurement_policy() -> None:
    with pytest.raises(CertificateNotYetValidError):
        verify(nvidia_report(), nvidia_collateral(), Policy(), utc(2021, 1, 1))
    g = GpuReport.parse(nvidia_report())
    ok = Policy(allowed_gpu_measurements={1: frozenset({g.response.blocks[0].value})})
    verify(nvidia_report(), nvidia_collateral(), ok, NVIDIA_TIME)
    bad = Policy(allowed_gpu_measurements={1: frozenset({b"\x01" * 48})})
    with pytest.raises(MeasurementNotAllowedError):
        verify(nvidia_report(), nvidia_collateral(), bad, NVIDIA_TIME)
    with pytest.raises(BadChainError):
        verify(nvidia_report(), nvidia_collateral(), Policy(nvidia_roots=()), NVIDIA_TIME)
