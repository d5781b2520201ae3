"""``tessera bench presets`` (issue 17) on the tiny preset: both loops, their ratio, peak memory, JSON."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.presets import child
from tessera.cli import main


def test_both_loops_train_the_same_work() -> None:
    got = child("tiny", "dipaco", "both", 3, 2, 10, "cpu")
    assert got["params_total"] == 169_088 and 0 < got["params_trained"] < got["params_total"]
    assert (got["batch_size"], got["seq_len"], got["steps"]) == (8, 64, 3)
    assert {k: len(v) for k, v in got["seconds"].items()} == {"miner": 2, "plain": 2}  # warm-up left out
    assert got["paired_ratios"] == [
        p / m for m, p in zip(got["seconds"]["miner"], got["seconds"]["plain"], strict=True)
    ]
    cpu = got["cpu_seconds"]  # CPU seconds per round, paired like the wall seconds
    assert {k: len(v) for k, v in cpu.items()} == {"miner": 2, "plain": 2} and min(cpu["miner"]) > 0
    assert got["paired_cpu_ratios"] == [p / m for m, p in zip(cpu["miner"], cpu["plain"], strict=True)]
    longer = child("tiny", "dipaco", "both", 2, 1, 10, "cpu", min_seconds=0.3)
    assert sum(longer["seconds"]["miner"]) >= 0.3 and len(longer["paired_ratios"]) >= 1
    assert all(v > 0 for v in got["tokens_per_second"].values()) and got["peak_rss_bytes"] > 50 * 2**20
    one = child("tiny", "dipaco", "plain", 3, 0, 10, "cpu")
    assert list(one["seconds"]) == ["plain"] and len(one["seconds"]["plain"]) == 1
    small = child("tiny", "dipaco", "miner", 2, 0, 10, "cpu", batch_size=2)  # a large preset's memory
    assert small["batch_size"] == 2 and small["tokens_per_second"]["miner"] > 0


def test_command_writes_rows_with_the_ratio(tmp_path: Path) -> None:
    out = tmp_path / "bp"
    args = ["bench", "presets", "--presets", "tiny", "--modes", "moe", "--steps", "2", "--repeats", "1"]
    args += ["--min-seconds", "0", "--batch-size", "4"]
    assert main([*args, "--out", str(out)]) == 0
    doc = json.loads((out / "presets.json").read_text())
    (row,) = doc["rows"]
    assert (row["preset"], row["mode"], row["params_total"]) == ("tiny", "moe", 201_856)
    ratio = 100 * row["miner_tokens_per_second"] / row["plain_tokens_per_second"]
    assert abs(row["miner_over_plain_best_pct"] - ratio) < 0.2 and row["timed_rounds"] >= 1
    assert row["miner_over_plain_pct"] > 0 and row["miner_over_plain_cpu_pct"] > 0
    assert len(row["miner_cpu_seconds"]) == len(row["plain_cpu_seconds"]) == row["timed_rounds"]
    assert row["miner_peak_rss_mib"] > 50 and doc["target_pct"] == 95.0
    assert doc["command"].startswith("tessera bench presets ") and "--steps 2" in doc["command"]
    assert row["batch_size"] == 4 and "--batch-size 4" in doc["command"]
    assert row["miner_peak_cuda_mib"] is None and row["plain_peak_cuda_mib"] is None  # a CPU run
