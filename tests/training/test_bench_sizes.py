"""The size series of ``tessera bench training --only sizes``: its slope fit, its sizes and a toy run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks.training import _plot_sizes
from benchmarks.training_runs import RunCache
from benchmarks.training_sizes import log_slope, size_series, sizes


def test_log_slope_is_the_least_squares_fit() -> None:
    # gap = 2 - 3 * log10(params) exactly
    params = [1e4, 1e5, 1e6]
    assert log_slope(params, [2 - 3 * math.log10(p) for p in params]) == pytest.approx(-3.0)
    # a noisy set against the closed form
    xs, ys = [1e3, 1e4, 1e6], [1.0, 0.0, 4.0]
    lx = [math.log10(x) for x in xs]
    mx, my = sum(lx) / 3, sum(ys) / 3
    want = sum((a - mx) * (b - my) for a, b in zip(lx, ys, strict=True)) / sum((a - mx) ** 2 for a in lx)
    assert log_slope(xs, ys) == pytest.approx(want)
    assert log_slope([1e5], [1.0]) is None
    assert log_slope([1e5, 1e5], [1.0, 2.0]) is None


def test_full_series_lands_near_its_targets() -> None:
    from training.config import ModelConfig
    from training.model import build_model

    series = size_series(True)
    targets = [0.05e6, 0.2e6, 1e6, 4e6]
    assert len(series) == len(targets)
    for size, target in zip(series, targets, strict=True):
        assert size["rounds"] == size["scale"]["rounds"] >= 1
        model = build_model(ModelConfig(mode="moe", n_experts=4, top_k=2, **size["scale"]["model"]))
        n = sum(p.numel() for p in model.parameters())
        assert 0.75 * target <= n <= 1.35 * target, (size["label"], n)


def test_big_size_is_issue_14s_gpu_size_and_the_device_joins_the_cache_key_off_the_cpu() -> None:
    import argparse

    from benchmarks.training import _on_device
    from training.config import ModelConfig
    from training.model import build_model

    series = size_series(True, big=True)
    assert [s["label"] for s in series][-1] == "38M" and len(series) == 5
    model = build_model(ModelConfig(mode="moe", n_experts=4, top_k=2, **series[-1]["scale"]["model"]))
    assert 35e6 <= sum(p.numel() for p in model.parameters()) <= 40e6
    scale = series[0]["scale"]
    # on the CPU the scale (part of every cache key) is unchanged, so cached CPU runs stay valid
    assert _on_device(scale, argparse.Namespace(device="cpu")) == scale
    assert _on_device(scale, argparse.Namespace(device="cuda")) == {**scale, "device": "cuda"}
    assert RunCache.key({"scale": scale}) != RunCache.key({"scale": {**scale, "device": "cuda"}})


def test_toy_series_rows_and_slope(tmp_path: Path) -> None:
    from training.corpus import load_bundled_corpus

    shapes = [
        {"seq_len": 16, "d_model": 8, "n_heads": 2, "n_layers": 1, "d_ff": 16},
        {"seq_len": 16, "d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32},
    ]
    series = [
        {"label": f"s{i}", "scale": {"model": m, "rounds": 1, "batch": 2}, "rounds": 1}
        for i, m in enumerate(shapes)
    ]
    series.append({"label": "skipped", "scale": {"model": shapes[0], "rounds": 0, "batch": 2}, "rounds": 0})
    seen: list[int] = []
    cache = RunCache(tmp_path / "cache")
    res = sizes(
        series, [0], load_bundled_corpus(), cache, windows=2, sink=lambda r: seen.append(len(r["rows"]))
    )
    # the sink is called after every arm (partial JSON, issue 29) and after every row: the row count
    # it sees only grows, from the first size's arms (0 rows) to both sizes' rows
    assert seen == sorted(seen) and sorted(set(seen)) == [0, 1, 2], seen
    rows = res["rows"]
    assert [r["label"] for r in rows] == ["s0", "s1"]
    for r in rows:
        for key in (
            "params",
            "rounds",
            "payload_bits_per_param_step",
            "final_loss",
            "diloco_loss",
            "dp_loss",
        ):
            assert math.isfinite(r[key])
        assert r["gap_dp_pct"] == pytest.approx(100 * (r["final_loss"] - r["dp_loss"]) / r["dp_loss"])
        assert r["gap_diloco_pct"] == pytest.approx(
            100 * (r["final_loss"] - r["diloco_loss"]) / r["diloco_loss"]
        )
        assert r["tokens"] == 1 * 30 * 2 * 16 * 4
    assert rows[0]["params"] < rows[1]["params"]
    params = [r["params"] for r in rows]
    assert res["slope_gap_dp_per_decade"] == pytest.approx(log_slope(params, [r["gap_dp_pct"] for r in rows]))
    assert res["slope_gap_diloco_per_decade"] == pytest.approx(
        log_slope(params, [r["gap_diloco_pct"] for r in rows])
    )
    json.dumps(res)  # JSON-safe
    # the baselines and the recipe are cached: a rerun trains nothing and gives the same figures
    assert len(list((tmp_path / "cache").glob("*.json"))) == 6
    again = sizes(series, [0], load_bundled_corpus(), cache, windows=2)
    assert again["slope_gap_dp_per_decade"] == res["slope_gap_dp_per_decade"]
    _plot_sizes(tmp_path / "sizes.png", res)
    assert (tmp_path / "sizes.png").stat().st_size > 0
