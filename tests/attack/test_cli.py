"""``tessera attack``: the listing and the model table (no network)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tessera.attack import report, runner
from tessera.attack.errors import UnknownScenarioError
from tessera.attack.scenarios import get, registry
from tessera.cli import main


def test_list_and_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["attack", "--list"]) == 0
    out = capsys.readouterr().out
    for name in ("free-rider-zero", "lazy-33", "colluding-validators", "sybil"):
        assert name in out
    assert main(["attack", "--model"]) == 0
    assert "lazy f=0.1" in capsys.readouterr().out


def test_registry_builds_participants() -> None:
    for name, sc in registry().items():
        parts = sc.build()
        roles = {p.role for p in parts}
        assert roles == {"miner", "validator"}, name
        wanted = 0 if sc.kind in ("baseline", "fault") else 1
        assert sum(p.label != "honest" for p in parts) >= wanted, name
        assert sc.kind != "fault" or sc.faults, name


def test_unknown_scenario_is_a_typed_error() -> None:
    with pytest.raises(UnknownScenarioError):
        get("nope")
    assert main(["attack", "nope"]) == 2


def _row(role: str, label: str, stake: float, reward: float, cheat: float, slashed: float, det: int) -> dict:
    return {
        "scenario": "x", "role": role, "label": label, "address": "0x" + "11" * 20, "stake": stake,
        "reward": reward, "reward_cheating": cheat, "slashes": int(slashed > 0), "stake_slashed": slashed,
        "detected_rounds": det, "rounds": 3, "stages": [],
    }  # fmt: skip


def test_report_prints_expected_against_measured_profit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tessera.attack.report import profit_rows

    scenario = {
        "name": "free-rider-zero", "kind": "miner", "description": "", "rounds": 3, "seconds": 1.0,
        "honest_share": 1.0, "heldout": [5.0, 4.0], "heldout_baseline": [5.0, 4.0], "heldout_rel_diff": 0.0,
        "validator": {}, "checks": {"network_live": True}, "errors": [],
        "rows": [
            _row("validator", "honest", 1000, 150, 150, 0, 0), _row("validator", "honest", 1000, 150, 150, 0, 0),
            _row("miner", "honest", 100, 600, 600, 0, 0), _row("miner", "honest", 100, 600, 600, 0, 0),
            _row("miner", "free-rider-zero", 100, 0, 0, 27.1, 3),
        ],
    }  # fmt: skip
    doc = {"chain": "anvil", "rounds": 3, "scenarios": [scenario]}
    (p,) = profit_rows(doc)
    # R = 200 per round, c = 100; a free rider saves all compute, is always zeroed and slashed 10% of 100
    assert p["model_p_zero"] == 1.0 and p["refused"] == "3/3"
    assert p["model_profit"] == pytest.approx(-10.0)
    assert p["measured_profit"] == pytest.approx(-27.1 / 3)
    report = tmp_path / "r.json"
    report.write_text(json.dumps(doc))
    assert main(["attack", "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "| free-rider-zero (free-rider-zero) | 3 | 1.000 | 3/3 | -10.0 | -9.0 |" in out
    report.write_text("[]")
    assert main(["attack", "--report", str(report)]) == 2


def test_devnet_adversary_flags() -> None:
    from tessera.commands.devnet import adversary_args
    from tessera.errors import TesseraError

    got = adversary_args(["miner3=poisoner-scaled", "validator1=bad-signer"], miners=4, validators=2)
    assert got == {"miner3": ["--behaviour", "poisoner-scaled"], "validator1": ["--mode", "bad-signer"]}
    for bad in ("miner4=poisoner-scaled", "miner0", "miner0=nope", "validator0=nope", "oracle0=random"):
        with pytest.raises(TesseraError):
            adversary_args([bad], miners=4, validators=2)


def test_validator_factories_take_the_harness_entropy() -> None:
    """The harness builds every validator with ``entropy=`` (shared round seeds with the reference run)."""
    import inspect

    for name, sc in registry().items():
        for p in sc.build():
            if p.role == "validator" and p.factory is not None:
                params = inspect.signature(p.factory).parameters.values()
                assert any(x.kind is inspect.Parameter.VAR_KEYWORD for x in params), name


def test_a_run_restores_the_node_loggers_it_quiets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``tessera attack`` quiets the miner and validator loggers while its scenarios run and gives them back
    their levels when it returns (it is also called in-process, before other code that logs)."""
    seen: list[int] = []

    def fake_suite(names: list[str], rounds: int, **_: object) -> list[object]:
        seen.append(logging.getLogger("validator").level)
        return []

    monkeypatch.setattr(runner, "run_suite", fake_suite)
    monkeypatch.setattr(report, "table", lambda results: "")
    for name in ("miner", "validator"):
        logging.getLogger(name).setLevel(logging.INFO)
    assert main(["attack", "baseline", "--out", str(tmp_path / "r.json")]) == 0
    assert seen == [logging.ERROR], "quiet while the scenarios run"
    assert logging.getLogger("validator").level == logging.INFO
    assert logging.getLogger("miner").level == logging.INFO
