"""``tessera runspec init|show``: the run file a launcher publishes, and its genesis checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol.runspec import RunSpec
from tessera.cli import main


def test_init_writes_a_loadable_run_file_and_show_reports_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run.json"
    argv = [
        "runspec",
        "init",
        "--out",
        str(run),
        "--mode",
        "dipaco",
        "--inner-steps",
        "12",
        "--genesis-seed",
        "5",
        "--epoch-rounds",
        "8",
    ]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    spec = RunSpec.load(run)
    assert spec.model.mode == "dipaco" and spec.inner.steps == 12 and spec.genesis_seed == 5
    assert spec.epoch_rounds == printed["epoch_rounds"] == 8
    assert printed["digest"] == spec.digest() and printed["genesis_checkpoint"] == spec.genesis_digest()
    assert main(argv) == 2  # never overwrites a published file by accident
    assert "exists" in capsys.readouterr().err
    assert main(["runspec", "show", str(run), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["genesis_checkpoint"] == spec.genesis_digest() and shown["spec"] == spec.to_json()
    assert RunSpec(genesis_seed=6).genesis_digest() != spec.genesis_digest()


def test_init_refuses_epochs_outside_dipaco(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run.json"
    assert main(["runspec", "init", "--out", str(run), "--mode", "moe", "--epoch-rounds", "8"]) == 2
    assert "epoch_rounds" in capsys.readouterr().err and not run.exists()
