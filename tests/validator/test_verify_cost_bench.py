"""``benchmarks.verify_cost``: the validator's CPU against the miner's, measured on a short round."""

from __future__ import annotations

import pytest

from benchmarks.verify_cost import measure


def test_the_benchmark_times_an_accepted_verification_against_its_training() -> None:
    row = measure("tiny", "moe", steps=4, segments=1, repeats=2)
    assert row["trained_params"] == 136_320
    assert row["train_cpu_seconds"] > 0 and row["verify_cpu_seconds"] > 0
    assert len(row["verify_cpu_runs"]) == 2 and min(row["verify_cpu_runs"]) <= row["verify_cpu_seconds"]
    pct = 100 * row["verify_cpu_seconds"] / row["train_cpu_seconds"]
    assert row["verify_pct_of_training"] == pytest.approx(pct, rel=0.01)
    assert {"format", "recompute", "usefulness"} <= set(row["stage_wall_seconds"])
