"""The devnet's live view and report rendering, on a stubbed network (no processes)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from tessera.devnet.config import DevnetConfig
from tessera.devnet.report import write_report
from tessera.devnet.run import _view
from tests.support.devnet_view import devnet_stub


def test_live_view_renders() -> None:
    console = Console(record=True, width=160)
    console.print(_view(devnet_stub(), 3, 0.0))
    text = console.export_text()
    assert "round 3/3" in text and "score-commit" in text
    assert "5.500->5.200" in text and "300.0" in text and "130" in text


def test_report_files(tmp_path: Path) -> None:
    report = {
        "config": vars(DevnetConfig()) | {"workdir": str(tmp_path)},
        "per_round": [
            {"round": r, "heldout_before": 5.5 - r / 10, "heldout_after": 5.4 - r / 10,
             "rewards_wei": {"miner0": 10**20}, "update_bytes": 1000, "verification_cost_pct": 2.0,
             "recompute_cost_pct": 1.0}
            for r in (1, 2)
        ],
    }  # fmt: skip
    write_report(report, tmp_path)
    assert json.loads((tmp_path / "report.json").read_text())["per_round"][1]["round"] == 2
    assert (tmp_path / "report.png").stat().st_size > 1000
