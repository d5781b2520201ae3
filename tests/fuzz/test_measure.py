"""Issue 11: the measuring campaigns in CI (seconds): every input typed, and time and memory per input
bounded at the default caps. The long runs and their figures: docs/security.md ("Fuzz campaigns that
measure"), ``python -m tests.fuzz.campaign --target update --inputs 3000 --measure``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Generous bounds for a loaded CI machine (the measured figures are far below them).
MAX_SECONDS = 5.0
MAX_RATIO = 24.0
MAX_PEAK_MIB = 1024.0


@pytest.mark.parametrize(("target", "inputs"), [("update", 60), ("record", 400)])
def test_measured_campaign_is_typed_and_bounded(target: str, inputs: int, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.campaign", "--target", target, "--inputs", str(inputs), "--seed", "7",
         "--measure", "--costly", "0.5", "--no-at-cap", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    (res,) = json.loads(out.read_text())
    assert res["inputs"] == inputs and res["failed"] == 0
    assert res["worst_seconds"] < MAX_SECONDS, res["worst_seconds_input"]
    assert res["worst_peak_mib"] < MAX_PEAK_MIB, res["worst_peak_input"]
    assert res["worst_peak_over_declared"] <= MAX_RATIO, res["worst_ratio_input"]


def test_updates_at_the_cap_decode_within_bounds() -> None:
    """The largest update two codec families may send at the default caps: decoded, bounded."""
    from tests.support.bombs import CAP_FAMILIES, measure_at_cap

    families = [f for f in CAP_FAMILIES if f[0].startswith(("run-codec", "topk one huge chunk fp32"))]
    rows = measure_at_cap(repeat=1, families=families)
    assert len(rows) == 2
    for row in rows:
        assert row["outcome"] == "accepted", row
        assert row["peak_mib"] <= MAX_RATIO * row["declared_decoded_mib"] + 16, row
