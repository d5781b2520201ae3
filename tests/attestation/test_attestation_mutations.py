"""Every mutation listed in intel-dcap/README.md gives its typed error; flipped signed bytes are refused."""

from __future__ import annotations

import json

import pytest

from attestation import Policy, verify
from attestation.collateral import collateral_from_dict
from attestation.errors import (
    AttestationError,
    BadChainError,
    CollateralSignatureError,
    MalformedError,
    QeReportDataMismatchError,
    QeReportSignatureError,
    QuoteSignatureError,
    RevocationUnknownError,
    UnknownQeVendorError,
    UnsupportedKeyTypeError,
    UnsupportedVersionError,
)
from attestation.intel.quote import Quote
from tests.attestation.attest_support import (
    NVIDIA_TIME,
    SNP_TIME,
    IntelVector,
    flip,
    intel_policy,
    nvidia_collateral,
    nvidia_report,
    snp_collateral,
    snp_report,
)

SIG = 0x27C  # 48 header + 584 TD report + 4 signature-data length
QE = 0x302  # SIG + 64 signature + 64 attestation key + 2 type + 4 size


def _set(data: bytes, pos: int, value: int) -> bytes:
    b = bytearray(data)
    b[pos] = value
    return bytes(b)


README_MUTATIONS = [
    ("truncated to 1000", lambda q: q[:1000], MalformedError),
    ("truncated to 40", lambda q: q[:40], MalformedError),
    ("version 4 -> 6", lambda q: _set(q, 0, 6), UnsupportedVersionError),
    ("key type 2 -> 3", lambda q: _set(q, 2, 3), UnsupportedKeyTypeError),
    ("QE vendor id", lambda q: flip(q, 12), UnknownQeVendorError),
    ("REPORTDATA", lambda q: flip(q, 48 + 520), QuoteSignatureError),
    ("MRTD", lambda q: flip(q, 48 + 0x88), QuoteSignatureError),
    ("TD attributes", lambda q: flip(q, 48 + 120), QuoteSignatureError),
    ("quote signature", lambda q: flip(q, SIG + 10), QuoteSignatureError),
    ("attestation key", lambda q: flip(q, SIG + 70), QeReportDataMismatchError),
    ("QE auth data", lambda q: flip(q, QE + 450), QeReportDataMismatchError),
    ("QE report", lambda q: flip(q, QE + 10), QeReportSignatureError),
    ("QE report signature", lambda q: flip(q, QE + 389), QeReportSignatureError),
]


@pytest.mark.parametrize(("name", "mutate", "error"), README_MUTATIONS, ids=[m[0] for m in README_MUTATIONS])
def test_readme_quote_mutations(tdx: IntelVector, name: str, mutate, error) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error):
        verify(mutate(tdx.quote), tdx.collateral, intel_policy(), tdx.inside)


def test_readme_edited_tcb_info(tdx: IntelVector) -> None:
    d = dict(tdx.collateral_json)
    d["tcb_info"] = d["tcb_info"].replace('"tcbEvaluationDataNumber":17', '"tcbEvaluationDataNumber":18')
    assert d["tcb_info"] != tdx.collateral_json["tcb_info"]
    with pytest.raises(CollateralSignatureError, match="TCB info"):
        verify(tdx.quote, collateral_from_dict(d), intel_policy(), tdx.inside)


def test_readme_reserialized_tcb_info_is_refused(tdx: IntelVector) -> None:
    d = dict(tdx.collateral_json)
    d["tcb_info"] = json.dumps(json.loads(d["tcb_info"]))  # same content, other bytes
    with pytest.raises(CollateralSignatureError):
        verify(tdx.quote, collateral_from_dict(d), intel_policy(), tdx.inside)


def test_readme_pck_crl_replaced_by_root_crl(tdx: IntelVector) -> None:
    d = dict(tdx.collateral_json)
    d["pck_crl"] = d["root_ca_crl"]
    with pytest.raises(RevocationUnknownError):
        verify(tdx.quote, collateral_from_dict(d), intel_policy(), tdx.inside)


def test_edited_qe_identity(tdx: IntelVector) -> None:
    d = dict(tdx.collateral_json)
    d["qe_identity"] = d["qe_identity"].replace('"isvprodid":2', '"isvprodid":3')
    with pytest.raises(CollateralSignatureError, match="QE identity"):
        verify(tdx.quote, collateral_from_dict(d), intel_policy(), tdx.inside)


def test_swapped_collateral_is_refused(intel: dict[str, IntelVector]) -> None:
    sgx, tdx = intel["sgx_quote"], intel["tdx_quote"]
    with pytest.raises(AttestationError):
        verify(tdx.quote, sgx.collateral, intel_policy(), tdx.inside)


def test_collateral_chain_from_another_root(tdx: IntelVector, sgx: IntelVector) -> None:
    from attestation.simulated import SimulatedEnclave

    dev = SimulatedEnclave.from_seed(b"other-root")
    d = dict(tdx.collateral_json)
    d["tcb_info_issuer_chain"] = dev.collateral(tdx.inside).tcb_info_issuer_chain
    with pytest.raises(BadChainError):
        verify(tdx.quote, collateral_from_dict(d), intel_policy(), tdx.inside)


def _intel_signed_positions(q: Quote, raw: bytes, stride: int) -> list[int]:
    """Every byte of header+body, signature, attestation key, QE report and signature, auth data; the PEM
    chain every ``stride`` bytes."""
    end_qe = len(raw) - len(q.trailing) - len(q.pck_certification.data) - 6
    dense = list(range(0, end_qe))
    pem_start = end_qe + 6
    sparse = list(range(end_qe, pem_start)) + list(range(pem_start, len(raw) - len(q.trailing), stride))
    return dense + sparse


@pytest.mark.parametrize("name", ["tdx_quote", "sgx_quote"])
def test_single_flipped_byte_anywhere_signed_is_refused(intel: dict[str, IntelVector], name: str) -> None:
    vec = intel[name]
    coll = vec.collateral
    q = Quote.parse(vec.quote)
    positions = _intel_signed_positions(q, vec.quote, stride=23)
    accepted = []
    for pos in positions:
        try:
            verify(flip(vec.quote, pos), coll, intel_policy(), vec.inside)
        except AttestationError:
            continue
        accepted.append(pos)
    assert accepted == [], f"flipped bytes accepted at {accepted[:10]}"
    # Trailing bytes are outside every signed region: flipping them changes nothing.
    for pos in range(len(vec.quote) - len(q.trailing), len(vec.quote)):
        verify(flip(vec.quote, pos), coll, intel_policy(), vec.inside)


def test_flipped_body_bytes_are_quote_signature_errors(tdx: IntelVector) -> None:
    coll = tdx.collateral
    for pos in range(48, 48 + 584, 5):
        with pytest.raises(QuoteSignatureError):
            verify(flip(tdx.quote, pos), coll, intel_policy(), tdx.inside)


def test_snp_every_signed_byte_flipped_is_refused() -> None:
    raw, coll = snp_report(), snp_collateral()
    pol = Policy(dangerous_allow_debug=True)
    for pos in range(0, 0x2A0):
        with pytest.raises(AttestationError):
            verify(flip(raw, pos), coll, pol, SNP_TIME)
    # The signature itself (r and s) is refused too.
    for pos in list(range(0x2A0, 0x2A0 + 48)) + list(range(0x2E8, 0x2E8 + 48)):
        with pytest.raises(QuoteSignatureError):
            verify(flip(raw, pos), coll, pol, SNP_TIME)


def test_nvidia_flipped_bytes_are_refused() -> None:
    raw, coll = nvidia_report(), nvidia_collateral()
    # Every byte of the request (nonce included) and the response header; then a stride.
    positions = list(range(0, 48)) + list(range(48, 4021, 7)) + list(range(4021, 4117, 5))
    for pos in positions:
        with pytest.raises(AttestationError):
            verify(flip(raw, pos), coll, Policy(), NVIDIA_TIME)


def test_nvidia_truncations_are_malformed() -> None:
    raw, coll = nvidia_report(), nvidia_collateral()
    for n in (0, 1, 4, 36, 37, 42, 4000, 4116):
        with pytest.raises(MalformedError):
            verify(raw[:n] if n else b"", coll, Policy(), NVIDIA_TIME)
