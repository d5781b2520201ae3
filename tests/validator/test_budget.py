"""Issue 10: one slow, restarted or withholding miner must not make a validator miss a phase deadline."""

from __future__ import annotations

import time

import pytest
from validator_support import CHAIN_ID, CONTRACT, MINERS, Round, make_round

from protocol.coordinator import update_commitment
from validator.budget import BlockClock
from validator.verify import VerifyPolicy, verify_update


def test_block_clock_measures_block_time_and_ignores_fast_forwards() -> None:
    clock = BlockClock(default_seconds=1.0)
    assert clock.seconds_per_block() == 1.0
    t = 100.0
    for block in range(10, 20):  # one block every 2 s
        clock.observe(block, t)
        t += 2.0
    clock.observe(500, t + 0.1)  # a fast-forward: 480 blocks at once
    clock.observe(500, t + 0.5)
    clock.observe(501, t + 2.1)
    assert clock.seconds_per_block() == pytest.approx(2.0, rel=0.05)
    assert clock.time_of(501, 511, now=1000.0) == pytest.approx(1020.0, rel=0.05)
    assert clock.time_of(501, 400, now=1000.0) == 1000.0  # a passed block: now


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
        fetch_source=rnd.fetch_source, deadline=time.monotonic() - 1,
    )  # fmt: skip
    assert (v.stage, v.accepted, v.score, v.provable) == ("budget", False, 0, False)
    assert not calls, "no transcript state is fetched once the budget is gone"
    assert time.monotonic() - t0 < 5
    # with time left, the same update is accepted
    v, _ = verify_update(
        rnd.ctx(), miner, commitment, lambda: built.update, fetch_state, VerifyPolicy(),
        fetch_source=rnd.fetch_source, deadline=time.monotonic() + 600,
    )  # fmt: skip
    assert v.accepted, v.reason
