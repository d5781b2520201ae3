"""Formats beyond the real vectors: quote v5 (TD 1.0/1.5, SGX), SGX v4, SEV-SNP v3/v5 (Turin TCB), SPDM
edge cases; and Intel TCB evaluation driven through the simulated enclave's collateral."""

from __future__ import annotations

import dataclasses
import struct

import pytest

from attestation import Binding, Policy, TcbStatus, detect_format, verify
from attestation.amd.report import SnpReport
from attestation.errors import (
    AttestationError,
    MalformedError,
    MalformedEvidenceError,
    QuoteSignatureError,
    TcbMismatchError,
    TcbNotAcceptableError,
    UnsupportedVersionError,
)
from attestation.intel.layouts import QuoteHeader, TdReport
from attestation.intel.quote import BODY_SGX, CERT_QE_REPORT, CertificationData, Quote
from attestation.nvidia.spdm import GpuReport
from attestation.simulated import SimulatedEnclave
from tests.attestation.attest_support import (
    NVIDIA_TIME,
    IntelVector,
    flip,
    intel_policy,
    nvidia_collateral,
    nvidia_report,
    utc,
)

NOW = utc(2026, 3, 1)
BINDING = Binding(10, 3, "0x" + "77" * 20, b"\x05" * 32)


@pytest.fixture(scope="module")
def enclave() -> SimulatedEnclave:
    return SimulatedEnclave.from_seed(b"formats")


@pytest.mark.parametrize("td15", [False, True], ids=["td10", "td15"])
def test_quote_v5_tdx(enclave: SimulatedEnclave, td15: bool) -> None:
    raw = enclave.quote(BINDING.report_data(), version=5, td15=td15)
    q = Quote.parse(raw)
    assert q.to_bytes() == raw and q.version == 5
    assert q.body_type == (3 if td15 else 2)
    assert isinstance(q.body, TdReport) and q.body.is_v15 == td15
    assert len(q.signed) == 48 + 6 + (648 if td15 else 584)
    v = verify(raw, enclave.collateral(NOW), enclave.policy(), NOW, expected=BINDING)
    assert v.details["quote_version"] == 5
    # The body descriptor is signed: changing it is refused.
    for pos in range(48, 54):
        with pytest.raises(AttestationError):
            verify(flip(raw, pos), enclave.collateral(NOW), enclave.policy(), NOW, expected=BINDING)


def test_quote_v5_descriptor_checks(enclave: SimulatedEnclave) -> None:
    raw = bytearray(enclave.quote(BINDING.report_data(), version=5))
    bad_type = bytes(raw[:48]) + struct.pack("<H", 4) + bytes(raw[50:])
    with pytest.raises(UnsupportedVersionError):
        Quote.parse(bad_type)
    bad_size = bytes(raw[:50]) + struct.pack("<I", 600) + bytes(raw[54:])
    with pytest.raises(MalformedEvidenceError):
        Quote.parse(bad_size)
    sgx_type_in_tdx = bytes(raw[:48]) + struct.pack("<HI", 1, 384) + bytes(raw[54:])
    with pytest.raises(MalformedEvidenceError):
        Quote.parse(sgx_type_in_tdx)


def _sgx_as(sgx: IntelVector, version: int) -> bytes:
    """The real SGX v3 quote re-laid out as v4/v5 (certification data type 6); its signature breaks."""
    q = Quote.parse(sgx.quote)
    header = dataclasses.replace(q.header, version=version)
    outer = CertificationData(CERT_QE_REPORT, q.qe.to_bytes(), q.qe)
    out = header.to_bytes()
    if version == 5:
        out += struct.pack("<HI", BODY_SGX, 384)
    sig = q.signature + q.attestation_key + outer.to_bytes()
    return out + q.body.to_bytes() + struct.pack("<I", len(sig)) + sig


@pytest.mark.parametrize("version", [4, 5])
def test_sgx_quote_v4_v5_layouts(sgx: IntelVector, version: int) -> None:
    raw = _sgx_as(sgx, version)
    q = Quote.parse(raw)
    assert q.to_bytes() == raw and q.version == version and not q.is_tdx
    assert q.outer_certification is not None and q.pck_certification.cert_type == 5
    # Everything up to the quote signature verifies (PCK chain, QE report, QE binding); the header
    # changed, so the quote signature does not.
    with pytest.raises(QuoteSignatureError):
        verify(raw, sgx.collateral, intel_policy(), sgx.inside)


def test_v4_outer_certification_must_be_type_6(tdx: IntelVector) -> None:
    with pytest.raises(MalformedEvidenceError, match="type 6"):
        Quote.parse(flip(tdx.quote, 0x2FC))


def test_v3_header_must_be_sgx(sgx: IntelVector) -> None:
    with pytest.raises(UnsupportedVersionError):
        Quote.parse(flip(sgx.quote, 4, 0x81))
    assert isinstance(Quote.parse(sgx.quote).header, QuoteHeader)


# --- TCB evaluation through the simulated enclave's collateral ------------------------------------------------


def _verify(enclave: SimulatedEnclave, policy: Policy | None = None, **coll: object):  # type: ignore[no-untyped-def]
    raw = enclave.quote(BINDING.report_data())
    return verify(raw, enclave.collateral(NOW, **coll), policy or enclave.policy(), NOW, expected=BINDING)  # type: ignore[arg-type]


def test_tcb_out_of_date_against_policy(enclave: SimulatedEnclave) -> None:
    with pytest.raises(TcbNotAcceptableError, match="OutOfDate"):
        _verify(enclave, tcb_status="OutOfDate")
    v = _verify(enclave, enclave.policy(min_tcb_status=TcbStatus.OUT_OF_DATE), tcb_status="OutOfDate")
    assert v.tcb_status == "OutOfDate"
    with pytest.raises(TcbNotAcceptableError):
        _verify(enclave, enclave.policy(min_tcb_status=TcbStatus.OUT_OF_DATE), tcb_status="Revoked")


def test_qe_status_converges(enclave: SimulatedEnclave) -> None:
    low = enclave.policy(min_tcb_status=TcbStatus.REVOKED)
    assert _verify(enclave, low, qe_tcb_status="OutOfDate").tcb_status == "OutOfDate"
    v = _verify(enclave, low, tcb_status="ConfigurationNeeded", qe_tcb_status="OutOfDate")
    assert v.tcb_status == "OutOfDateConfigurationNeeded"
    assert _verify(enclave, low, qe_tcb_status="Revoked").tcb_status == "Revoked"
    assert _verify(enclave, low, tcb_status="SWHardeningNeeded").tcb_status == "SWHardeningNeeded"


def test_tcb_info_for_another_platform(enclave: SimulatedEnclave) -> None:
    with pytest.raises(TcbMismatchError, match="FMSPC"):
        _verify(enclave, tcb_info_overrides={"fmspc": "00A067110000"})
    with pytest.raises(TcbMismatchError):
        _verify(enclave, tcb_info_overrides={"id": "SGX"})


def test_no_matching_tcb_level(enclave: SimulatedEnclave) -> None:
    level = {
        "tcb": {
            "sgxtcbcomponents": [{"svn": 99}] * 16,
            "pcesvn": 99,
            "tdxtcbcomponents": [{"svn": 0}] * 16,
        },
        "tcbDate": "2024-03-13T00:00:00Z",
        "tcbStatus": "UpToDate",
    }
    with pytest.raises(TcbNotAcceptableError, match="no TCB level"):
        _verify(enclave, tcb_info_overrides={"tcbLevels": [level]})


def test_unknown_tdx_module(enclave: SimulatedEnclave) -> None:
    ident = {
        "id": "TDX_03",
        "mrsigner": "00" * 48,
        "attributes": "00" * 8,
        "attributesMask": "FF" * 8,
        "tcbLevels": [{"tcb": {"isvsvn": 1}, "tcbDate": "2024-03-13T00:00:00Z", "tcbStatus": "UpToDate"}],
    }
    with pytest.raises(TcbNotAcceptableError, match="TDX_01"):
        _verify(enclave, tcb_info_overrides={"tdxModuleIdentities": [ident]})
    ident["id"] = "TDX_01"
    ident["tcbLevels"] = [{"tcb": {"isvsvn": 9}, "tcbDate": "2024-03-13T00:00:00Z", "tcbStatus": "UpToDate"}]
    with pytest.raises(TcbNotAcceptableError, match="SVN"):
        _verify(enclave, tcb_info_overrides={"tdxModuleIdentities": [ident]})


def test_malformed_tcb_info_is_typed(enclave: SimulatedEnclave) -> None:
    for bad in ({"tcbLevels": "x"}, {"issueDate": "yesterday"}, {"version": 9}, {"fmspc": "zz"}):
        with pytest.raises(MalformedError):
            _verify(enclave, tcb_info_overrides=bad)


# --- SEV-SNP versions 3 and 5 (Turin TCB layout) --------------------------------------------------------------


def _snp(version: int, family: int, tcb: int) -> bytes:
    raw = bytearray(0x4A0)
    struct.pack_into("<I", raw, 0, version)
    struct.pack_into("<I", raw, 0x34, 1)
    struct.pack_into("<Q", raw, 0x180, tcb)
    raw[0x188] = family
    return bytes(raw)


def test_snp_v3_v5_and_turin_tcb() -> None:
    milan = SnpReport.parse(_snp(3, 0x19, 0x4405000000000002))
    assert milan.reported.as_dict() == {"bootloader": 2, "tee": 0, "snp": 5, "microcode": 68}
    turin_raw = _snp(5, 0x1A, 0x4800000003020105)
    turin = SnpReport.parse(turin_raw + b"tail")
    assert turin.to_bytes() == turin_raw + b"tail" and turin.trailing == b"tail"
    assert turin.reported.as_dict() == {"bootloader": 1, "tee": 2, "snp": 3, "microcode": 0x48, "fmc": 5}
    assert detect_format(turin_raw) == "amd-sev-snp"
    with pytest.raises(UnsupportedVersionError):
        SnpReport.parse(_snp(6, 0x1A, 0))
    with pytest.raises(MalformedEvidenceError):
        SnpReport.parse(_snp(3, 0x19, 0)[:0x49F])


# --- SPDM edges -----------------------------------------------------------------------------------------------


def test_spdm_edges() -> None:
    raw = nvidia_report()
    with pytest.raises(UnsupportedVersionError):
        GpuReport.parse(bytes([0x12]) + raw[1:])
    with pytest.raises(MalformedEvidenceError, match="signature"):
        GpuReport.parse(raw[:2] + bytes([0]) + raw[3:])
    longer = raw + b"\x00" * 9
    g = GpuReport.parse(longer)
    assert g.to_bytes() == longer and len(g.trailing) == 9
    verify(longer, nvidia_collateral(), Policy(), NVIDIA_TIME)
