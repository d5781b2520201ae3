"""``tessera miner run --behaviour NAME`` and ``tessera validator run --mode NAME`` reach the attack modes."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

import miner.config
from tessera.attack.validators import CopierValidator, SilentValidator
from tessera.commands import miner as miner_cmd
from tessera.commands import validator as validator_cmd
from validator.node import ValidatorNode


class _Stop(Exception):
    pass


def test_miner_run_registers_attack_behaviours(monkeypatch: pytest.MonkeyPatch) -> None:
    from miner.behaviour import available

    seen: list[list[str]] = []

    def fake_load(*_a: Any, **_k: Any) -> Any:
        seen.append(available())
        raise _Stop

    monkeypatch.setattr(miner.config, "load_miner_config", fake_load)
    with pytest.raises(_Stop):
        miner_cmd._run(argparse.Namespace(config=None))
    assert "poisoner-scaled" in seen[0] and "lazy" in " ".join(seen[0])


def test_validator_mode_flag() -> None:
    parser = argparse.ArgumentParser()
    validator_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["validator", "run", "--mode", "copier"])
    assert args.mode == "copier"
    assert validator_cmd.node_class("honest") is ValidatorNode
    assert validator_cmd.node_class("copier") is CopierValidator
    assert validator_cmd.node_class("silent") is SilentValidator
    with pytest.raises(SystemExit):
        parser.parse_args(["validator", "run", "--mode", "nonsense"])
