"""Adversarial behaviours plug in from the harness: the product commands know only honest nodes, and
``python -m tessera.attack.node`` runs the same commands with the attack suite's behaviours and modes."""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import Any

import pytest

from tessera.attack import node as harness
from tessera.attack.validators import CopierValidator, SilentValidator
from tessera.commands import miner as miner_cmd
from tessera.commands import validator as validator_cmd
from validator.node import ValidatorNode


class _Stop(Exception):
    pass


def test_the_product_miner_knows_no_adversarial_behaviour() -> None:
    """A fresh process: ``tessera miner run --behaviour poisoner-scaled`` is refused before any work."""
    code = (
        "import sys; from tessera.cli import main; "
        "sys.exit(main(['miner', 'run', '--behaviour', 'poisoner-scaled', '--run-file', '/nonexistent']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "poisoner-scaled" in out.stderr, out.stderr


def test_the_harness_registers_behaviours_and_picks_the_validator_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from miner.behaviour import available

    seen: list[Any] = []

    def fake_load(*_a: Any, **_k: Any) -> Any:
        seen.append(available())
        raise _Stop

    monkeypatch.setattr(miner_cmd, "load_miner_config", fake_load)
    with pytest.raises(_Stop):
        harness.main(["miner", "run"])
    assert "poisoner-scaled" in seen[0] and "lazy" in " ".join(seen[0])

    def fake_vload(*_a: Any, **_k: Any) -> Any:
        raise _Stop

    monkeypatch.setattr(validator_cmd, "load_validator_config", fake_vload)
    captured: list[argparse.Namespace] = []
    real = validator_cmd._run

    def spy(args: argparse.Namespace) -> int:
        captured.append(args)
        return real(args)

    monkeypatch.setattr(validator_cmd, "_run", spy)
    with pytest.raises(_Stop):
        harness.main(["validator", "run", "--mode", "copier"])
    assert captured[-1].node_class is CopierValidator
    assert harness.node_class("honest") is ValidatorNode and harness.node_class("silent") is SilentValidator
    assert harness.main(["validator", "run", "--mode", "nonsense"]) == 2


def test_split_mode() -> None:
    assert harness.split_mode(["-v", "validator", "run", "--mode", "silent", "--port", "1"]) == (
        "silent",
        ["-v", "validator", "run", "--port", "1"],
    )
    assert harness.split_mode(["validator", "run", "--mode=copier"])[0] == "copier"
    assert harness.split_mode(["validator", "run"])[0] == "honest"
    parser = argparse.ArgumentParser()
    validator_cmd.register(parser.add_subparsers())
    with pytest.raises(SystemExit):  # the product command has no --mode
        parser.parse_args(["validator", "run", "--mode", "copier"])
