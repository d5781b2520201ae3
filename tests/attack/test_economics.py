"""The detection/profit model against a Monte-Carlo simulation of the real sampling and median code."""

from __future__ import annotations

import hashlib
import math
import random

import pytest

from protocol.rounds.consensus import weighted_median
from tessera.attack import economics as ec
from tessera.attack.errors import ModelInputError
from validator.sampling import segments_to_check, validator_slot

VALIDATORS = ["0x" + f"{i:040x}" for i in range(1, 6)]


def _simulate(
    f: float, n_segments: int, m: int, weights: list[int], trials: int, rng: random.Random, coordinated: bool
):
    """Monte-Carlo over round seeds with the real segment draw (coordinated windows, what the node does, or
    independent salted draws) and the real lower median.

    Returns (P(any validator catches), P(consensus score is 0)).
    """
    b = ec.bad_segments(f, n_segments)
    any_caught = zeroed = 0
    for _ in range(trials):
        seed = rng.randbytes(32)
        bad = set(rng.sample(range(n_segments), b))  # which segments the miner spoils (any choice)
        scores = []
        for i, v in enumerate(VALIDATORS[: len(weights)]):
            slot = validator_slot(v, VALIDATORS[: len(weights)]) if coordinated else None
            assert slot is None or slot == i
            segs = segments_to_check(seed, "0xminer", n_segments, m, v.encode(), slot=slot)
            scores.append(0 if bad & set(segs) else 5000)
        any_caught += 0 in scores
        zeroed += weighted_median(scores, weights) == 0
    return any_caught / trials, zeroed / trials


def _tol(p: float, n: int) -> float:
    return 5 * math.sqrt(max(p * (1 - p), 1e-4) / n) + 1e-3


@pytest.mark.parametrize(
    ("f", "n_segments", "m", "weights"),
    [
        (0.1, 3, 2, [1, 1]),  # the defaults: H=30, k=10, 2 segments, 2 validators
        (0.1, 10, 2, [1, 1, 1]),  # three validators: one catch is not enough for the median
        (0.25, 8, 1, [3, 1, 1]),  # unequal stakes
        (0.05, 20, 4, [1, 1, 1, 1]),
    ],
)
@pytest.mark.parametrize("coordinated", [True, False], ids=["coordinated", "independent"])
def test_model_matches_monte_carlo(
    f: float, n_segments: int, m: int, weights: list[int], coordinated: bool
) -> None:
    rng = random.Random(hashlib.sha256(repr((f, n_segments, m, weights, coordinated)).encode()).digest())
    trials = 4000
    any_mc, zero_mc = _simulate(f, n_segments, m, weights, trials, rng, coordinated)
    any_model = ec.p_detect_any(f, n_segments, m, len(weights), coordinated=coordinated)
    zero_model = ec.p_reward_zeroed(f, n_segments, m, weights, coordinated=coordinated)
    assert abs(any_mc - any_model) < _tol(any_model, trials), (any_mc, any_model)
    assert abs(zero_mc - zero_model) < _tol(zero_model, trials), (zero_mc, zero_model)


def test_three_equal_validators_need_two_catches() -> None:
    p1 = ec.p_one_validator(0.1, 10, 2)
    indep = {"coordinated": False}
    assert ec.p_reward_zeroed(0.1, 10, 2, [1, 1, 1], **indep) == pytest.approx(3 * p1**2 * (1 - p1) + p1**3)
    assert ec.p_reward_zeroed(0.1, 10, 2, [1, 1], **indep) == pytest.approx(1 - (1 - p1) ** 2)
    # coordinated windows are disjoint: with one bad segment, two validators can never both catch it
    assert ec.p_reward_zeroed(0.1, 10, 2, [1, 1, 1]) == pytest.approx(0.0, abs=1e-12)
    assert ec.p_reward_zeroed(0.1, 10, 2, [1, 1]) == pytest.approx(4 / 10)


def test_coordinated_windows_cover_the_transcript() -> None:
    """With V * m >= S the validators between them replay every segment: any faked segment is caught."""
    assert ec.p_detect_any(0.01, 3, 2, 2) == 1.0
    assert ec.p_reward_zeroed(0.01, 3, 2, [1, 1]) == 1.0
    assert ec.p_detect_any(0.01, 3, 2, 2, coordinated=False) == pytest.approx(1 - (1 / 3) ** 2)
    for seed in (b"a", b"b", b"c"):
        picks = [set(segments_to_check(seed, "0xm", 3, 2, slot=i)) for i in range(2)]
        assert picks[0] | picks[1] == {0, 1, 2}
    # never worse than independent draws, for any configuration
    for s_, m_, v_ in ((30, 2, 2), (10, 3, 3), (7, 2, 5)):
        for f in (0.05, 0.2):
            assert ec.p_detect_any(f, s_, m_, v_) >= ec.p_detect_any(f, s_, m_, v_, coordinated=False) - 1e-12


def test_defaults_meet_the_issue_target() -> None:
    # issue 5: a miner faking 10% of its steps is caught within 10 rounds with probability >= 95%
    p = ec.p_reward_zeroed(0.1, 3, 2, [1, 1])
    assert ec.p_within(p, 10) >= 0.95
    assert ec.rounds_to_confidence(p) <= 10


def test_min_stake_makes_every_strategy_negative() -> None:
    reward, cost, slash = 10.0, 6.0, 0.1
    for st in [ec.lazy_strategy(f, 3, 2, [1, 1]) for f in (0.01, 0.1, 0.5, 1.0)] + [
        ec.deterministic_strategy(n, s, p) for n, s, p in ec.DETERMINISTIC
    ]:
        bound = ec.min_stake(st, reward, cost, slash)
        if math.isfinite(bound["advantage"]):
            e = ec.Economy(reward, cost, bound["advantage"] * 1.01 + 1e-9, slash)
            assert st.advantage(e) < 0 or (bound["advantage"] == 0 and st.advantage(e) <= 0), st
        if math.isfinite(bound["profit"]):
            e = ec.Economy(reward, cost, bound["profit"] * 1.01 + 1e-9, slash)
            assert st.expected_profit(e) < 0 or bound["profit"] == 0, st


def test_unprovable_cheats_are_deterred_by_lost_reward_not_slash() -> None:
    st = ec.deterministic_strategy("withholder", 1.0, provable=False)
    # it saves all compute and loses all reward: profit 0, advantage c - R < 0 whenever mining pays
    e = ec.Economy(10.0, 6.0, 100.0, 0.1)
    assert st.expected_profit(e) == 0
    assert st.advantage(e) == pytest.approx(-4.0)


def test_inputs_are_checked() -> None:
    with pytest.raises(ModelInputError):
        ec.bad_segments(1.5, 3)
    with pytest.raises(ModelInputError):
        ec.p_weight_catches(0.5, [])
