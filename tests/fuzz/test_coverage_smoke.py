"""The atheris runner works (a few hundred inputs of each target); skipped where atheris is not installed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("atheris")


@pytest.mark.parametrize("target", ["record", "dhtrecord"])
def test_coverage_runner_smoke(target: str, tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.coverage", "--target", target, "--runs", "300", "--max-time", "60",
         "--out", str(out)],
        cwd=root, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    summary = json.loads(out.read_text())
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert summary["inputs"] == 300 and summary["untyped_exceptions"] == 0
    assert summary["libfuzzer_final"] and "cov:" in summary["libfuzzer_final"]
