"""Issue 10: one slow, restarted or withholding miner must not make a validator miss a phase deadline.

The node passes ``out_of_time`` (has the chain reached the phase's margin?) to ``verify_update``, which
asks it before each stage and each replayed segment."""

from __future__ import annotations

import time

import pytest
from validator_support import CHAIN_ID, CONTRACT, MINERS, Round, make_round

from protocol.coordinator import update_commitment
from validator.verify import VerifyPolicy, verify_update


def test_a_passed_budget_stops_verification_with_an_unprovable_zero() -> None:
    rnd: Round = make_round()
    miner = MINERS[0]
    built = rnd.build(miner)
    commitment = update_commitment(CHAIN_ID, CONTRACT, rnd.round, miner, built.digest)
    states = {
        "0x" + d.hex(): built.states[s]
        for s, d in zip(built.transcript_steps, built.transcript_digests, strict=True)
    }
    states.update(rnd.published)
    calls: list[str] = []

    def fetch_state(digest: str):  # type: ignore[no-untyped-def]
        calls.append(digest)
        return states[digest]

    t0 = time.monotonic()
    v, _ = verify_update(
        rnd.ctx(), miner, commitment, lambda: built.update, fetch_state, VerifyPolicy(),
        fetch_source=rnd.fetch_source, out_of_time=lambda: True,
    )  # fmt: skip
    assert (v.stage, v.accepted, v.score, v.provable) == ("budget", False, 0, False)
    assert not calls, "no transcript state is fetched once the budget is gone"
    assert time.monotonic() - t0 < 5
    # with time left, the same update is accepted
    v, _ = verify_update(
        rnd.ctx(), miner, commitment, lambda: built.update, fetch_state, VerifyPolicy(),
        fetch_source=rnd.fetch_source, out_of_time=lambda: False,
    )  # fmt: skip
    assert v.accepted, v.reason


def test_the_budget_is_asked_between_stages_and_segments() -> None:
    rnd: Round = make_round()
    miner = MINERS[1]
    built = rnd.build(miner)
    commitment = update_commitment(CHAIN_ID, CONTRACT, rnd.round, miner, built.digest)
    states = {
        "0x" + d.hex(): built.states[s]
        for s, d in zip(built.transcript_steps, built.transcript_digests, strict=True)
    }
    states.update(rnd.published)
    asked = 0

    def out_of_time() -> bool:
        nonlocal asked
        asked += 1
        return asked > 4  # fetch, format, bounds, attestation pass; the budget ends before the replays

    v, _ = verify_update(
        rnd.ctx(), miner, commitment, lambda: built.update, lambda d: states[d], VerifyPolicy(),
        fetch_source=rnd.fetch_source, out_of_time=out_of_time,
    )  # fmt: skip
    assert (v.stage, v.score, v.provable) == ("budget", 0, False)
    assert "replayed_steps" not in v.metrics


def test_an_unanticipated_error_scores_that_miner_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 11: an exception no stage anticipated stays with the miner whose input raised it."""
    import validator.verify as verify

    rnd: Round = make_round()
    miner = MINERS[0]
    built = rnd.build(miner)
    commitment = update_commitment(CHAIN_ID, CONTRACT, rnd.round, miner, built.digest)
    states = {
        "0x" + d.hex(): built.states[s]
        for s, d in zip(built.transcript_steps, built.transcript_digests, strict=True)
    }
    states.update(rnd.published)

    def boom(*_: object, **__: object) -> None:
        raise KeyError("something no stage anticipated")

    monkeypatch.setattr(verify, "_usefulness", boom)
    v, _ = verify_update(
        rnd.ctx(), miner, commitment, lambda: built.update, lambda d: states[d], VerifyPolicy(),
        fetch_source=rnd.fetch_source,
    )  # fmt: skip
    assert (v.stage, v.accepted, v.score, v.provable) == ("error", False, 0, False)
    assert "KeyError" in v.reason
