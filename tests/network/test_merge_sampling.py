"""Robust merge and the catch-probability model (checked by Monte Carlo on the real segment draw)."""

from __future__ import annotations

import math
import random

import torch

from protocol.wire.tensorblob import tensors_digest
from training.config import OuterConfig
from training.merge import MergePolicy, next_checkpoint, robust_merge
from validator.sampling import catch_probability, catch_probability_round, segments_to_check


def _addr(i: int) -> str:
    return "0x" + f"{i:040x}"


def test_clipping_bounds_a_huge_update() -> None:
    honest = [(1.0, _addr(i), {"w": torch.full((4,), 1.0)}) for i in range(1, 4)]
    evil = (1.0, _addr(9), {"w": torch.full((4,), 1e6)})
    out = robust_merge([*honest, evil], MergePolicy(clip_factor=2.0))
    assert float(out["w"].max()) <= 1.0 * (3 + 2) / 4 + 1e-6


def test_trimmed_mean_ignores_an_outlier() -> None:
    honest = [(1.0, _addr(i), {"w": torch.full((4,), 1.0)}) for i in range(1, 5)]
    evil = (1.0, _addr(9), {"w": torch.full((4,), -50.0)})
    out = robust_merge([*honest, evil], MergePolicy(method="trimmed_mean", clip_factor=1e9))
    assert torch.allclose(out["w"], torch.ones(4))


def test_merge_is_order_independent_and_reproducible() -> None:
    g = torch.Generator().manual_seed(0)
    base = {"w": torch.randn(64, generator=g)}
    contribs = [(float(i), _addr(i), {"w": torch.randn(64, generator=g)}) for i in range(1, 6)]
    a, ma = next_checkpoint(base, {}, contribs, OuterConfig(), MergePolicy())
    b, mb = next_checkpoint(base, {}, list(reversed(contribs)), OuterConfig(), MergePolicy())
    assert tensors_digest(a) == tensors_digest(b) and tensors_digest(ma) == tensors_digest(mb)


def test_segment_draw() -> None:
    s = segments_to_check(b"seed", "0xabc", 30, 2, b"v1")
    assert len(s) == 2 and len(set(s)) == 2 and all(0 <= x < 30 for x in s)
    assert s == segments_to_check(b"seed", "0xabc", 30, 2, b"v1")
    assert segments_to_check(b"seed", "0xabc", 3, 10) == [0, 1, 2]


def test_target_faking_10pct_caught_within_10_rounds() -> None:
    """Defaults: H = 30 one-step segments, 2 replayed per validator, 2 validators."""
    p = catch_probability(0.10, 30, 2, rounds=10, validators=2)
    assert p >= 0.95
    # Monte Carlo over the real draw: the faker packs its 3 bad steps at random positions each round
    rng = random.Random(1)
    trials, caught_within = 400, 0
    for t in range(trials):
        for r in range(10):
            bad = set(rng.sample(range(30), 3))
            seed = f"{t}-{r}".encode()
            if any(set(segments_to_check(seed, "0xm", 30, 2, slot=i)) & bad for i in (0, 1)):
                caught_within += 1
                break
    emp = caught_within / trials
    assert abs(emp - p) < 0.05, (emp, p)
    single = catch_probability_round(0.1, 30, 2, 1)
    assert math.isclose(single, 1 - math.comb(27, 2) / math.comb(30, 2))
    # two coordinated validators replay 4 distinct segments: miss = C(26, 3) / C(30, 3)
    both = catch_probability_round(0.1, 30, 2, 2)
    assert math.isclose(both, 1 - math.comb(26, 3) / math.comb(30, 3))
    assert both > catch_probability_round(0.1, 30, 2, 2, coordinated=False)
