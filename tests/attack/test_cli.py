"""``tessera attack``: the listing and the model table (no network)."""

from __future__ import annotations

import pytest

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
