"""A validator that serves a valid signature of the wrong checkpoint must not halt certification: each
peer signature is checked before it is aggregated (without the check, every certificate fails)."""

from __future__ import annotations

import pytest

from protocol.rounds.memcoordinator import MemoryCoordinator
from tessera.attack.results import evaluate
from tessera.attack.runner import run_scenario
from tessera.attack.scenarios import get


def test_network_stays_live_and_leaves_the_bad_signature_out() -> None:
    sc = get("bad-signer-validator")
    run = run_scenario(sc, rounds=1, chain="memory")
    res = evaluate(sc, run, run.heldout)
    assert res.checks["network_live"], res.errors
    assert 2 in run.ledger.checkpoints  # theta_2 certified without the bad signature
    assert "adversarial_validator_earns_less_per_stake" not in res.checks  # it scores honestly


def test_without_the_check_the_network_halts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(MemoryCoordinator, "check_checkpoint_signature", lambda self, *a: True)
    sc = get("bad-signer-validator")
    run = run_scenario(sc, rounds=1, chain="memory", timeout=25.0)
    assert run.stalled and 2 not in run.ledger.checkpoints
