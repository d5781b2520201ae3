"""Quick variants of the fuzz campaigns (a few thousand inputs each; the long runs are
``python -m tests.fuzz.campaign``). Every input must be accepted or refused with the target's typed error,
and servers must stay up. Each campaign runs in its own process, so a hard crash (a segfault) is reported
as a finding instead of taking the test session down."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .known import KNOWN_UNFIXED

QUICK_INPUTS = {"update": 3000, "record": 3000, "config": 600, "http": 600, "chain": 1000}
ROOT = Path(__file__).resolve().parents[2]


def _is_known(name: str, key: str) -> bool:
    known = KNOWN_UNFIXED.get(name, set())
    kind_file = key.rsplit(":", 1)[0]
    return kind_file in known or "*@" + kind_file.split("@", 1)[-1] in known


@pytest.mark.parametrize("name", sorted(QUICK_INPUTS))
def test_fuzz_quick(name: str, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.campaign", "--target", name, "--inputs", str(QUICK_INPUTS[name]),
         "--seed", "12345", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode in (0, 1), (
        f"campaign process died (status {proc.returncode}): {proc.stderr[-2000:]}"
    )
    (res,) = json.loads(out.read_text())
    assert res["inputs"] == QUICK_INPUTS[name]
    assert res["crashed_servers"] == 0
    new = [f for f in res["failures"] if not _is_known(name, f"{f['kind']}@{f['where']}")]
    assert not new, "new fuzz findings: " + "; ".join(
        f"{f['kind']}@{f['where']} x{f['count']}: {f['message'][:120]} (input {f['input_hex'][:200]})"
        for f in new
    )
