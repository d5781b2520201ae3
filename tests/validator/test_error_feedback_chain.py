"""F12: the validator recomputes the compressed update from the transcript and the miner's committed
error-feedback residual, so a scaled (or otherwise altered) update is refused with provable evidence."""

from __future__ import annotations

import dataclasses

import pytest

from miner.work import BuiltUpdate
from protocol.p2p.blobs import TransferError
from protocol.wire.tensorblob import tensors_digest
from protocol.wire.update import decode_update, encode_update, update_digest
from tessera.attack.miners import Poisoner
from tests.support.rounds import MINERS, Round, make_round
from validator.policy import VerifyPolicy

POLICY = VerifyPolicy()


@pytest.fixture(scope="module")
def rounds() -> tuple[Round, Round]:
    r2 = make_round()
    r1 = dataclasses.replace(r2, round=1, published=r2.published, updates=r2.updates)
    return r1, r2


@pytest.fixture(scope="module")
def firsts(rounds: tuple[Round, Round]) -> dict[str, BuiltUpdate]:
    return {m: rounds[0].build(m) for m in MINERS}


def test_honest_chain_is_accepted_and_recomputed_exactly(
    rounds: tuple[Round, Round], firsts: dict[str, BuiltUpdate]
) -> None:
    r1, r2 = rounds
    for m in MINERS:
        v1 = r1.verify(m, firsts[m], POLICY)
        assert v1.accepted, v1.reason
        b2 = r2.build(m, after=firsts[m])
        assert decode_update(b2.update).header.ef_source == (1, firsts[m].digest.hex())
        v2 = r2.verify(m, b2, POLICY)
        assert v2.accepted, v2.reason
        assert v2.metrics["ef_rel_err"] == 0.0 and v2.metrics["ef_after_rel_err"] == 0.0
        # the carried residual changed the update: the check is not vacuous
        fresh = r2.build(m)
        assert (
            decode_update(fresh.update).pseudo_gradient().keys()
            == decode_update(b2.update).pseudo_gradient().keys()
        )
        assert fresh.digest != b2.digest


@pytest.mark.parametrize("factor", [0.5, 1.5, 3.0])
def test_scaled_update_is_refused_with_evidence(
    rounds: tuple[Round, Round], firsts: dict[str, BuiltUpdate], factor: float
) -> None:
    r1, r2 = rounds
    for m in MINERS:
        for rnd, after in ((r1, None), (r2, firsts[m])):
            v = rnd.verify(m, rnd.build(m, Poisoner("scaled", factor), after=after), POLICY)
            assert not v.accepted and v.stage == "recompute" and v.provable, (factor, v.stage, v.reason)
            assert "not the compressed transcript result" in v.reason


def test_source_that_is_not_the_commitment_is_provable(
    rounds: tuple[Round, Round], firsts: dict[str, BuiltUpdate]
) -> None:
    r1, r2 = rounds
    m = MINERS[0]
    b2 = r2.build(m, after=firsts[m])
    saved = r2.updates.pop((1, firsts[m].digest.hex()))
    try:
        v = r2.verify(m, b2, POLICY)
    finally:
        r2.updates[(1, firsts[m].digest.hex())] = saved
    assert not v.accepted and v.stage == "recompute" and v.provable and "source" in v.reason


def test_source_must_be_an_earlier_round(rounds: tuple[Round, Round], firsts: dict[str, BuiltUpdate]) -> None:
    _, r2 = rounds
    m = MINERS[1]
    same = dataclasses.replace(firsts[m], round=2)
    v = r2.verify(m, r2.build(m, after=same), POLICY)
    assert not v.accepted and v.stage == "recompute" and v.provable and "not before" in v.reason


def test_unavailable_source_is_refused_without_evidence(
    rounds: tuple[Round, Round], firsts: dict[str, BuiltUpdate], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, r2 = rounds
    m = MINERS[0]
    b2 = r2.build(m, after=firsts[m])

    def gone(s: int, d: str) -> bytes:
        raise TransferError("no peer serves it")

    monkeypatch.setattr(r2, "fetch_source", gone)
    v = r2.verify(m, b2, POLICY)
    assert not v.accepted and v.stage == "recompute" and not v.provable and "not available" in v.reason


def test_inflated_committed_residual_is_refused_in_its_own_round(
    rounds: tuple[Round, Round], firsts: dict[str, BuiltUpdate]
) -> None:
    """A miner that commits to a residual x3 (to inflate its next update) is caught when it commits it."""
    r1, _ = rounds
    m = MINERS[1]
    b1 = firsts[m]
    inflated = {k: v * 3 for k, v in b1.ef_state.items() if k.startswith("ef/")}
    digest = tensors_digest(inflated)
    r1.published[digest] = inflated
    up = decode_update(b1.update)
    forged = dataclasses.replace(up, header=dataclasses.replace(up.header, ef_after=digest[2:]))
    data = encode_update(forged)
    bad = dataclasses.replace(b1, update=data, digest=update_digest(data))
    v = r1.verify(m, bad, POLICY)
    assert not v.accepted and v.stage == "recompute" and v.provable
    assert "committed residual is not the recomputed one" in v.reason
