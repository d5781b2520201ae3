"""Issue 26's attack scenarios: a fake that one validator of three proves, a miner that withholds its states
exactly when audited, and the partial fakers' figures (realized against the model, and the default stake
from measured parts)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from miner.behaviour import Behaviour, BehaviourContext
from protocol.errors import ProtocolError
from protocol.rounds.audits import REPORT_WINDOW_ROUNDS
from tessera.attack import auditchecks, partial
from tessera.attack.dodgers import WithholdWhenAudited
from tessera.attack.harness import Network
from tessera.attack.runner import reference, reference_key, run_scenario
from tessera.attack.scenarios import get
from tessera.cli import main


def _ctx(round: int) -> BehaviourContext:
    return BehaviourContext(round, "0x" + "ab" * 20, (), 6)


def test_the_honest_miner_serves_its_states() -> None:
    assert Behaviour().serves_state(_ctx(1))


def test_withholding_refuses_states_exactly_in_audited_rounds() -> None:
    asked: list[int] = []

    def audited(round: int, miner: str) -> bool:
        asked.append(round)
        if round == 3:
            raise ProtocolError("draw not readable")
        return round % 2 == 0

    w = WithholdWhenAudited(audited)
    assert [w.serves_state(_ctx(r)) for r in (1, 2, 2, 3)] == [True, False, False, True]
    assert asked == [1, 2, 3]  # a draw is read once per round; an unreadable one is served


def test_the_audit_scenarios_set_their_chain_and_share_no_reference() -> None:
    one, withhold = get("fake-proven-by-one-of-three"), get("withhold-when-audited")
    assert [p.role for p in one.build()].count("validator") == 3
    assert withhold.audit_params == {"audit_rate_bps": 8_000} and not withhold.provable
    assert reference(withhold).audit_params == withhold.audit_params
    assert reference_key(withhold) != reference_key(get("withholder"))


def test_a_scenario_runs_the_rounds_its_effect_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    # `tessera attack --all` runs 3 rounds: a false report of round 1 expires only in round 1 + window + 1,
    # so the scenario (and its reference, for the held-out comparison) must run that many or its
    # "closed reports released the pay" check can never pass.
    false = get("false-unanswered-report")
    assert false.min_rounds == REPORT_WINDOW_ROUNDS + 2
    assert reference(false).min_rounds == false.min_rounds
    assert reference_key(false) != reference_key(replace(false, min_rounds=0))
    asked: list[int] = []
    monkeypatch.setattr(Network, "start", lambda self: None)
    monkeypatch.setattr(Network, "stop", lambda self: None)
    monkeypatch.setattr(Network, "run", lambda self, rounds, timeout: asked.append(rounds))
    run_scenario(false, 3, chain="memory")
    run_scenario(get("withholder"), 3, chain="memory")
    assert asked == [REPORT_WINDOW_ROUNDS + 2, 3]


def _doc() -> dict[str, Any]:
    fakers = [
        {"fraction": f, "faked_steps": round(f * 100), "rounds": 30, "audits": 30, "landed": n,
         "caught": n, "caught_landed": n, "caught_not_landed": 0, "pay_credited": 10.0, "pay_kept": 5.0,
         "slashes": n, "stake_lost": 1.0, "realized_profit_per_round": -1.0, "model_gain": 1.0,
         "model_loss": 2.0, "model_profit_per_round": -1.0}
        for f, n in ((0.01, 0), (0.1, 3), (0.5, 15), (1.0, 30))
    ]  # fmt: skip
    return {"chain": "memory", "rounds": 30, "steps": 100, "audits": partial.AUDITS, "stake": 100,
            "slash": 0.1, "honest_reward_per_round": 200.0, "fakers": fakers}  # fmt: skip


def test_default_stake_profit_is_a_product_of_measured_parts() -> None:
    doc = _doc()
    d = partial.measured_default(doc, draws=4_000, landing_draws=2_000)
    e = partial.default_economics()
    assert d["catch_given_landed"] == 1.0  # every landed audit of the doc was proven
    # the real draw at the deployed rate: within 5 sigma of q
    q = d["q_deployed"]
    assert abs(d["q_measured"] - q) <= 5 * (q * (1 - q) / 4_000) ** 0.5 + 1e-9
    for r in d["rows"]:
        assert abs(r["landing_rate"] - r["fraction"]) <= 5 * (r["fraction"] / 2_000) ** 0.5 + 1e-9
        loss = d["q_measured"] * e.committee_catch() * r["detection_per_audit"] * e.loss_when_caught()
        assert r["expected_loss"] == pytest.approx(loss)
        assert r["expected_profit"] == pytest.approx(r["fraction"] * e.compute_cost - loss)


def test_report_prints_the_partial_fakers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _doc()
    doc["default"] = partial.measured_default(doc, draws=500, landing_draws=200)
    path = tmp_path / "partial.json"
    path.write_text(json.dumps(doc))
    assert main(["attack", "--report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "| 0.1 | 30 | 3 | 3 / 0 | 5.00 | 3 | -1.00 | -1.00 |" in out
    assert "measured E[profit]" in out


def test_realized_reads_a_memory_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """One round of the partial fakers' network on the memory ledger (small H): every lazy miner is audited
    in every round, an audit that lands on a faked step is proven, and none that does not."""
    monkeypatch.setattr(partial, "STEPS", 10)
    progress = tmp_path / "run.partial.json"
    doc = partial.run_partial(rounds=1, fractions=(0.1, 1.0), timeout=900, progress=progress)
    assert not doc["stalled"], doc
    # the figures written after each settled round are the run's
    kept = json.loads(progress.read_text())
    assert kept["fakers"] == doc["fakers"]
    by = {r["fraction"]: r for r in doc["fakers"]}
    for r in by.values():
        assert r["audits"] == r["rounds"] == 1
        assert r["caught_not_landed"] == 0 and r["caught_landed"] == r["landed"]
    assert by[1.0]["landed"] == 1 and by[1.0]["pay_credited"] == 0
    assert doc["honest_reward_per_round"] > 0


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_one_prover_of_three_zeroes_pay_and_withholding_costs_like_a_fake() -> None:
    from tessera.attack.results import evaluate

    sc = get("fake-proven-by-one-of-three")
    res = evaluate(sc, run_scenario(sc, rounds=2, chain="anvil"))
    for name in ("one_validator_proves_two_score_it_well", "faker_paid_0_every_round",
                 "faker_slashed_once_confirmed", "honest_miners_paid_every_round"):  # fmt: skip
        assert res.checks[name], (name, res.audit, res.errors)
    sc = get("withhold-when-audited")
    run = run_scenario(sc, rounds=3, chain="anvil")
    res = evaluate(sc, run)
    assert all(res.checks.values()), (res.checks, res.audit, res.errors)
    drawn = auditchecks.audits(run)  # the chain's auditDraw: audited and unaudited rounds both occur
    assert set(drawn.values()) == {True, False}, drawn
