"""Model presets and their cost estimate (issue 17)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch

from protocol.runspec import RunSpec
from training.config import InnerConfig, ModelConfig
from training.errors import ConfigError
from training.model import build_model, count_params, module_ids
from training.presets import (
    PRESETS,
    estimate,
    fast_model,
    get_preset,
    module_param_counts,
    preset_of,
    saved_activation_bytes,
)


@pytest.mark.parametrize("mode", ["moe", "dipaco", "dense"])
def test_counts_from_shapes_match_the_model(mode: str) -> None:
    for cfg in (PRESETS["tiny"].model(mode), PRESETS["1m"].model(mode, vocab_size=300)):
        counts = module_param_counts(cfg)
        assert list(counts) == module_ids(cfg)
        model = build_model(cfg)
        by_module: dict[str, int] = {}
        for name, p in model.named_parameters():
            from training.model import module_of

            by_module[module_of(name)] = by_module.get(module_of(name), 0) + p.numel()
        assert counts == by_module
        assert sum(counts.values()) == count_params(cfg)


@pytest.mark.parametrize(
    ("name", "low", "high"),
    [("1m", 0.9e6, 1.5e6), ("10m", 8e6, 12e6), ("50m", 45e6, 55e6), ("125m", 115e6, 135e6)],
)
def test_presets_have_the_sizes_their_names_say(name: str, low: float, high: float) -> None:
    for mode in ("moe", "dipaco"):
        cfg = get_preset(name).model(mode)
        assert low <= sum(module_param_counts(cfg).values()) <= high, (name, mode)
        assert preset_of(cfg) == name and preset_of(get_preset(name).model(mode, 4096)) == name
    sizes = [sum(module_param_counts(p.model("moe")).values()) for p in PRESETS.values()]
    assert sizes == sorted(sizes)
    with pytest.raises(ConfigError, match="unknown preset"):
        get_preset("7b")
    assert PRESETS["tiny"].model("moe") == ModelConfig() and preset_of(ModelConfig(d_model=48)) is None


def test_activation_bytes_scale_with_the_batch() -> None:
    cfg = PRESETS["tiny"].model("moe")
    model = fast_model(cfg)
    one, two = (saved_activation_bytes(model, torch.randint(0, 256, (b, cfg.seq_len + 1))) for b in (1, 4))
    assert one > cfg.seq_len * cfg.d_model * 4  # at least one residual stream per token
    assert 3.6 < two / one < 4.4


@pytest.mark.parametrize("mode", ["moe", "dipaco"])
def test_estimate_adds_up(mode: str) -> None:
    cfg = PRESETS["tiny"].model(mode)
    inner = InnerConfig(steps=30, transcript_interval=10)
    ticks = itertools.count()
    e = estimate(cfg, inner, time_steps=2, time_batch=2, clock=lambda: float(next(ticks)))
    total, trained = e["params_total"], e["params_trained_per_miner"]
    assert total == count_params(cfg) and 0 < trained < total
    m = e["miner_bytes"]
    assert m["params"] == 4 * total and m["grads"] == 4 * trained and m["adamw_moments"] == 8 * trained
    assert m["transcript_states"] == 4 * 3 * 4 * trained  # states at steps 0, 10, 20, 30
    assert m["total"] == sum(v for k, v in m.items() if k != "total")
    assert e["validator_bytes"]["total"] > m["params"] * 3
    # the fake clock advances 1 s over the 2 timed steps at batch 2; the run's batch is 8
    assert e["seconds_per_inner_step"] == pytest.approx(0.5 * 8 / 2)
    assert e["seconds_per_round_training"] == pytest.approx(e["seconds_per_inner_step"] * 30)
    assert "seconds_per_inner_step" not in estimate(cfg, inner, time_steps=0)


def test_runspec_init_preset_and_estimate_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tessera.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["runspec", "init", "--preset", "10m", "--mode", "dipaco", "--inner-steps", "20"]) == 0
    spec = RunSpec.load("run.json")
    assert spec.model == get_preset("10m").model("dipaco") and spec.inner.steps == 20
    assert spec.inner.batch_size == get_preset("10m").batch_size and spec.inner.lr == get_preset("10m").lr
    assert json.loads(capsys.readouterr().out)["preset"] == "10m"
    assert main(["runspec", "init", "--preset", "huge", "--out", "x.json"]) == 2
    capsys.readouterr()
    assert main(["runspec", "estimate", "--preset", "tiny", "--steps", "1", "--json", "--device", "cpu"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (row,) = doc["estimates"]
    assert row["name"] == "tiny" and row["params_total"] == count_params(ModelConfig())
    assert row["seconds_per_inner_step"] > 0
    audit = row["audit"]  # what a miner must serve when audited, and the link it needs (issue 38)
    assert audit["audit_bytes"] == 20 * row["params_trained_per_miner"]
    assert audit["upload_mbit_s_needed"] == round(
        8 * audit["largest_part_bytes"] / audit["serve_window_s"] / 1e6, 2
    )
    assert main(["runspec", "estimate", "run.json", "--steps", "0"]) == 0
    out = capsys.readouterr().out
    assert "run.json (dipaco" in out and "miner memory" in out and "validator memory" in out
    assert "when audited" in out and "Mbit/s" in out
