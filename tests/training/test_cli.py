"""``tessera simulate`` and ``tessera bench training`` end to end on tiny settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tessera.cli import main

TINY = [
    "--inner-steps",
    "2",
    "--batch",
    "2",
    "--seq-len",
    "16",
    "--d-model",
    "16",
    "--chunk",
    "256",
    "--topk",
    "4",
    "--transform",
    "none",
]


@pytest.mark.parametrize("mode", ["moe", "dipaco"])
def test_simulate_writes_a_report(tmp_path: Path, mode: str) -> None:
    out = tmp_path / "rep"
    assert (
        main(
            [
                "simulate",
                "--rounds",
                "2",
                "--miners",
                "3",
                "--mode",
                mode,
                "--baseline",
                "--out",
                str(out),
                *TINY,
            ]
        )
        == 0
    )
    report = json.loads((out / "report.json").read_text())
    assert len(report["rounds"]) == 2 and report["total_bytes_sent"] > 0
    assert all(r["eval_loss"] > 0 and r["baseline_eval_loss"] > 0 for r in report["rounds"])
    assert (out / "loss.png").stat().st_size > 0


def test_simulate_uncompressed_and_user_corpus(tmp_path: Path) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_text(
        "\n\n\n".join(
            f"document {i}: " + "the quick brown fox jumps over the lazy dog. " * 40 for i in range(60)
        )
    )
    out = tmp_path / "rep"
    args = [
        "simulate",
        "--rounds",
        "1",
        "--no-compress",
        "--corpus",
        str(corpus),
        "--corpus-format",
        "text",
        "--out",
        str(out),
        *TINY,
    ]
    assert main(args) == 0
    assert json.loads((out / "report.json").read_text())["compress"] is False


def test_simulate_rejects_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--rounds", "0", "--out", str(tmp_path)]) == 2
    assert (
        main(
            ["simulate", "--rounds", "1", "--corpus", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path)]
        )
        == 2
    )
    (tmp_path / "bad.jsonl").write_text("not json\n")
    assert (
        main(["simulate", "--rounds", "1", "--corpus", str(tmp_path / "bad.jsonl"), "--out", str(tmp_path)])
        == 2
    )
    assert "DataError" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_training_quick(tmp_path: Path) -> None:
    assert (
        main(
            [
                "bench",
                "training",
                "--out",
                str(tmp_path),
                "--rounds",
                "2",
                "--only",
                "quality",
                "--only",
                "codec",
            ]
        )
        == 0
    )
    data = json.loads((tmp_path / "training.json").read_text())
    assert set(data["quality"]) == {"moe", "dipaco"} and data["codec_speed"]
