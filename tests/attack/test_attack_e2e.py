"""The quick attack suite (``tessera attack --quick``) on a real chain: for each scenario a fresh anvil,
freshly deployed contracts, the real miner and validator nodes on the chain coordinator, 2 rounds.

Liveness is not asserted here: with the current inner loop an honest MoE miner can fail replay
(docs/security.md F2), and a validator that refused an update the consensus accepted cannot merge
(F11), which can leave a checkpoint uncertified. The run then ends early and is judged on the rounds
that settled.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tessera.attack.chainnet import LedgerSnapshot
from tessera.attack.report import table
from tessera.attack.results import ScenarioResult, evaluate
from tessera.attack.runner import run_scenario, run_suite
from tessera.attack.scenarios import get
from tessera.commands.attack import QUICK

MINER_CHEATS = ("free-rider-random", "poisoner-nan")
"""The quick suite's miner attacks that CI runs on anvil (one shape: they share one all-honest reference).
Of the rest of ``tessera attack --quick``, ``colluding-validators`` runs alone (nothing asserts its
reference's held-out loss) and ``lazy-33`` (1 faked segment in 3, caught only where an audit lands: nothing
is asserted of it) runs with the whole list in ``make test-long``."""


def _check_miner_cheats(results: list[ScenarioResult], doc: dict[str, Any]) -> None:
    """The baseline paid by the contract; provable cheats paid 0, detected and slashed, the honest miners
    keep the emission and the model is no worse."""
    print(table(results))
    assert doc["chain"] == "anvil"
    by = {r.name: r for r in results}
    base = by["baseline"]
    # settlement read from the contract: the run is live (theta_2 certified on-chain) and its miners paid
    assert base.checks["network_live"] and len(base.heldout) == 2, base.errors
    assert all(r.reward > 0 for r in base.rows if r.role == "miner")
    for name in MINER_CHEATS:
        res = by[name]
        cheaters = [r for r in res.rows if r.role == "miner" and r.label != "honest"]
        assert cheaters and all(r.reward_cheating == 0 for r in cheaters), table([res])
        assert all(r.detected_rounds >= 1 for r in cheaters)
        assert res.honest_share >= 0.99
        assert abs(res.heldout_rel_diff) <= 0.02
    # a provable cheat is slashed by the contract (propose + 2/3 stake vote; its Slashed event)
    assert all(r.slashes >= 1 for r in by["free-rider-random"].rows if r.label == "free-rider-random")


def _check_colluders(coll: ScenarioResult) -> None:
    """A validator with 25% of stake cannot move the consensus out of the honest range nor pay its miner."""
    assert coll.checks["consensus_within_honest_range"], coll.validator
    assert all(r.reward_cheating == 0 for r in coll.rows if r.role == "miner" and r.label != "honest")


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_quick_attack_suite_on_anvil(tmp_path: Path) -> None:
    """The quick suite's asserted scenarios, one run after another, each on a fresh anvil: the miner
    attacks' suite (their shared reference, the baseline, the attacks), reported in the order named, then
    colluding-validators alone. (Three networks at a time failed once under load average 26: the validators'
    verification budget refused honest miners; the runs stay sequential.)"""
    out = tmp_path / "attack.json"
    results = run_suite(list(MINER_CHEATS), rounds=1, out=out, chain="anvil")
    doc = json.loads(out.read_text())
    _check_miner_cheats(results, doc)
    assert results[0].reference == "baseline" and results[0].heldout_rel_diff == 0.0
    assert [r.name for r in results] == [s["name"] for s in doc["scenarios"]] == ["baseline", *MINER_CHEATS]
    assert list(doc["references"]) == ["reference:free-rider-random"]
    for res in results[1:]:
        assert res.reference == "reference:free-rider-random"
        assert res.heldout_baseline == doc["references"][res.reference]["heldout"]
        assert "heldout_no_worse_than_1%" in res.checks
    sc = get("colluding-validators")
    coll = evaluate(sc, run_scenario(sc, rounds=1, chain="anvil"))
    print(table([coll]))
    _check_colluders(coll)


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(1200)
def test_whole_quick_list_on_anvil_one_at_a_time(tmp_path: Path) -> None:
    """``tessera attack --quick``'s whole list (lazy-33 too) in one process, one run after another."""
    out = tmp_path / "attack.json"
    results = run_suite(list(QUICK), rounds=1, out=out, chain="anvil")
    _check_miner_cheats(results, json.loads(out.read_text()))
    _check_colluders(next(r for r in results if r.name == "colluding-validators"))


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_scenario_reads_settlement_from_the_contract() -> None:
    """One run's ledger is the contract's (slow: CI asserts the same of the quick suite's baseline)."""
    run = run_scenario(get("baseline"), rounds=1, chain="anvil")
    assert isinstance(run.ledger, LedgerSnapshot)
    s = run.ledger.rounds[1].settlement
    assert s is not None and sum(s.miner_rewards.values()) > 0
    assert 2 in run.ledger.checkpoints and not run.stalled


@pytest.mark.timeout(600)
def test_parallel_suite_reports_in_order(tmp_path: Path) -> None:
    """``--jobs``: scenarios in worker processes come back as results, in the order named."""
    out = tmp_path / "attack.json"
    names = ["poisoner-flip", "free-rider-zero"]
    results = run_suite(names, rounds=1, out=out, chain="memory", jobs=2)
    assert [r.name for r in results] == ["baseline", *names]
    doc = json.loads(out.read_text())
    assert doc["jobs"] == 2 and [s["name"] for s in doc["scenarios"]] == ["baseline", *names]
    # both have the same shape (2 validators, 3 honest miners and the adversary): one all-honest reference
    assert list(doc["references"]) == ["reference:poisoner-flip"]
    assert results[0].reference == "baseline" and results[0].heldout_rel_diff == 0.0
    for res in results[1:]:
        assert res.checks.get("ran", True), res.errors
        cheaters = [r for r in res.rows if r.role == "miner" and r.label != "honest"]
        assert cheaters and all(r.reward_cheating == 0 for r in cheaters), table([res])
        assert res.reference == "reference:poisoner-flip"
        assert res.heldout_baseline == doc["references"]["reference:poisoner-flip"]["heldout"]
        assert "heldout_no_worse_than_1%" in res.checks


@pytest.mark.timeout(600)
def test_reference_runs_draw_the_same_seeds() -> None:
    """The harness's validators derive their seed shares from their keys, so two runs of one shape train
    the same trajectory: the held-out comparison measures the adversary, not the luck of the seeds."""
    from tessera.attack.runner import reference, reference_key

    a = run_scenario(get("baseline"), rounds=2, chain="memory")
    b = run_scenario(get("baseline"), rounds=2, chain="memory")
    assert a.heldout == b.heldout and len(a.heldout) == 3
    flip = get("poisoner-flip")
    ref = reference(flip)
    assert [p.label for p in ref.build()] == ["honest"] * len(flip.build())
    assert reference_key(flip) == reference_key(get("free-rider-zero")) != reference_key(get("baseline"))
