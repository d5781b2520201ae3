"""The simulated enclave: real TDX v4 bytes, accepted only under a policy pinning its development root."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest

from attestation import Binding, CollateralCache, Policy, verify
from attestation.binding import report_data
from attestation.collateral import dumps_collateral, loads_collateral
from attestation.errors import (
    AttestationError,
    BadChainError,
    BindingMismatchError,
    CollateralExpiredError,
    DebugError,
    MeasurementNotAllowedError,
    ReplayError,
    RevokedError,
)
from attestation.intel.layouts import TdReport
from attestation.intel.quote import Quote
from attestation.policy import policy_from_dict
from attestation.simulated import SimulatedEnclave
from tests.attestation.attest_support import flip, utc

NOW = utc(2026, 11, 22, 12)
MINER = "0x" + "ab" * 20
DIGEST = bytes(range(32))


@pytest.fixture(scope="module")
def enclave() -> SimulatedEnclave:
    return SimulatedEnclave.from_seed(b"tests")


def _binding(round: int = 7, digest: bytes = DIGEST) -> Binding:
    return Binding(31337, round, MINER, digest)


def test_simulated_quote_is_real_tdx_v4(enclave: SimulatedEnclave) -> None:
    raw = enclave.quote(_binding().report_data())
    q = Quote.parse(raw)
    assert q.to_bytes() == raw
    assert q.version == 4 and q.header.tee_type == 0x81 and q.is_tdx
    assert q.outer_certification is not None and q.outer_certification.cert_type == 6
    assert q.pck_certification.cert_type == 5
    assert isinstance(q.body, TdReport) and q.body.report_data == _binding().report_data()


def test_accepted_only_under_development_policy(enclave: SimulatedEnclave) -> None:
    raw = enclave.quote(_binding().report_data())
    coll = enclave.collateral(NOW)
    v = verify(raw, coll, enclave.policy(), NOW, expected=_binding())
    assert v.policy == "development" and v.tcb_status == "UpToDate" and v.binding_checked
    assert "Tessera Development" in v.root
    with pytest.raises(BadChainError, match="not a pinned root"):
        verify(raw, coll, Policy(), NOW, expected=_binding())
    other = SimulatedEnclave.from_seed(b"someone else")
    with pytest.raises(BadChainError):
        verify(raw, coll, other.policy(), NOW, expected=_binding())


def test_same_seed_same_root() -> None:
    assert SimulatedEnclave.from_seed(b"s").root_der == SimulatedEnclave.from_seed(b"s").root_der
    assert SimulatedEnclave.from_seed(b"s").root_der != SimulatedEnclave.from_seed(b"t").root_der


def test_replay_from_another_round_or_update(enclave: SimulatedEnclave) -> None:
    coll = enclave.collateral(NOW)
    raw = enclave.quote(_binding(round=7).report_data())
    with pytest.raises(ReplayError, match="round 7, this is round 8"):
        verify(raw, coll, enclave.policy(), NOW, expected=_binding(round=8))
    with pytest.raises(ReplayError, match="another update"):
        verify(raw, coll, enclave.policy(), NOW, expected=_binding(digest=bytes(32)))
    with pytest.raises(BindingMismatchError):
        verify(raw, coll, enclave.policy(), NOW, expected=Binding(31337, 7, "0x" + "cd" * 20, DIGEST))
    with pytest.raises(BindingMismatchError):
        verify(raw, coll, enclave.policy(), NOW, expected=Binding(1, 7, MINER, DIGEST))


def test_debug_refused_unless_dangerous(enclave: SimulatedEnclave) -> None:
    raw = enclave.quote(_binding().report_data(), debug=True)
    coll = enclave.collateral(NOW)
    with pytest.raises(DebugError):
        verify(raw, coll, enclave.policy(), NOW, expected=_binding())
    v = verify(raw, coll, enclave.policy(dangerous_allow_debug=True), NOW, expected=_binding())
    assert v.debug


def test_measurement_allow_list(enclave: SimulatedEnclave) -> None:
    mrtd = b"\x42" * 48
    raw = enclave.quote(_binding().report_data(), mrtd=mrtd)
    coll = enclave.collateral(NOW)
    verify(raw, coll, enclave.policy(allowed_mrtd=frozenset({mrtd})), NOW, expected=_binding())
    with pytest.raises(MeasurementNotAllowedError):
        verify(raw, coll, enclave.policy(allowed_mrtd=frozenset({bytes(48)})), NOW, expected=_binding())


def test_revoked_pck_and_expired_collateral(enclave: SimulatedEnclave) -> None:
    raw = enclave.quote(_binding().report_data())
    with pytest.raises(RevokedError):
        verify(raw, enclave.collateral(NOW, revoke_pck=True), enclave.policy(), NOW, expected=_binding())
    old = enclave.collateral(NOW - dt.timedelta(days=60))
    with pytest.raises(CollateralExpiredError):
        verify(raw, old, enclave.policy(), NOW, expected=_binding())


def test_simulated_flipped_bytes_refused(enclave: SimulatedEnclave) -> None:
    raw = enclave.quote(_binding().report_data())
    coll = enclave.collateral(NOW)
    for pos in range(0, len(raw), 3):
        with pytest.raises(AttestationError):
            verify(flip(raw, pos), coll, enclave.policy(), NOW, expected=_binding())


def test_collateral_json_round_trip_and_cache(enclave: SimulatedEnclave) -> None:
    text = dumps_collateral(enclave.collateral(NOW))
    raw = enclave.quote(_binding().report_data())
    cache = CollateralCache(max_entries=2)
    c1 = cache.get(text)
    c2 = cache.get(text)
    assert c1 is c2 and cache.hits == 1 and cache.misses == 1
    verify(raw, c1, enclave.policy(), NOW, expected=_binding())
    assert dumps_collateral(loads_collateral(text)) == text
    assert cache.evict_expired(NOW) == 0
    assert cache.evict_expired(NOW + dt.timedelta(days=31)) == 1 and len(cache) == 0


def test_policy_json_round_trip(enclave: SimulatedEnclave) -> None:
    pol = enclave.policy(allowed_mrtd=frozenset({b"\x01" * 48}), max_collateral_age=dt.timedelta(days=2))
    back = policy_from_dict(json.loads(json.dumps(pol.to_dict())))
    assert back.intel_roots == pol.intel_roots and back.allowed_mrtd == pol.allowed_mrtd
    assert back.max_collateral_age == pol.max_collateral_age and back.name == "development"
    prod = policy_from_dict({"intel_roots": ["intel-sgx-root-ca"], "min_tcb_status": "UpToDate"})
    assert prod.intel_roots == Policy().intel_roots
    assert dataclasses.replace(prod, name="x").name == "x"


def test_report_data_encoding() -> None:
    rd = report_data(31337, 7, MINER, DIGEST)
    assert len(rd) == 64
    assert rd[48:56] == (7).to_bytes(8, "big") and rd[56:] == bytes(8)
    assert rd == Binding(31337, 7, bytes.fromhex("ab" * 20), DIGEST).report_data()
    assert _binding().nonce() == rd[:32]
    # Every field changes the commitment.
    others = [
        report_data(31338, 7, MINER, DIGEST),
        report_data(31337, 8, MINER, DIGEST),
        report_data(31337, 7, "0x" + "ac" * 20, DIGEST),
        report_data(31337, 7, MINER, bytes(32)),
    ]
    assert len({rd[:32], *(o[:32] for o in others)}) == 5
    with pytest.raises(ValueError):
        report_data(1, 1, "0x12", DIGEST)
