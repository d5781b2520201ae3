"""The devnet's live view and report rendering, on a stubbed network (no processes)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rich.console import Console

from protocol.chain import ContractRound, Phase
from tessera.devnet.network import DevnetConfig, NodeProc
from tessera.devnet.run import _view, write_report

MINER_KEY = "0x" + "33" * 32


class _Chain:
    def round_state(self) -> ContractRound:
        return ContractRound(3, Phase.SCORE_COMMIT, 100, 4, 2, 0, 129)

    def block_number(self) -> int:
        return 110


def _stub() -> Any:
    miner = NodeProc("miner0", "miner", MINER_KEY, 1, [], {}, Path("/dev/null"))
    val = NodeProc("validator0", "validator", "0x" + "44" * 32, 2, [], {}, Path("/dev/null"))
    addr = miner.address
    answers = {
        ("miner0", "/status"): {"phase": "serving", "last_round": {"loss_first": 5.5, "loss_last": 5.2}},
        ("validator0", "/status"): {"phase": "verify"},
        ("validator0", "/rounds"): [
            {"round": 2, "consensus": {addr: 120}, "rewards": {addr: str(3 * 10**20)}, "scores": {},
             "heldout_before": 5.5, "heldout_after": 5.4},
            {"round": 3, "scores": {addr: 130}, "consensus": {}, "rewards": {}},
        ],
    }  # fmt: skip
    return SimpleNamespace(
        chain=_Chain(), nodes={"miner0": miner, "validator0": val}, get=lambda n, p: answers.get((n, p))
    )


def test_live_view_renders() -> None:
    console = Console(record=True, width=160)
    console.print(_view(_stub(), 3, 0.0))
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
