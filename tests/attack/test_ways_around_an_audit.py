"""Issue 38's ways around an audit, as miner behaviours: each built with the miner's own code and checked with
the validator's (no network). Hanging and dripping act only when audited (a miner cannot tell its draw before the seed is fixed,
which is after it publishes its update, so its update is withheld always or never); the
last-delta rider trains nothing yet serves a consistent transcript, so it passes every check that moves no
state and only an audit's replay catches it (provably)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import Tensor

from miner.behaviour import BehaviourContext
from protocol.rounds import economics as ev
from protocol.rounds.audits import AuditDraw
from protocol.rounds.deployment import NetworkParams
from protocol.wire.commitments import update_commitment
from tessera.attack import partial
from tessera.attack.auditchecks import caught_when_audited, model_row, profit_vs_honest
from tessera.attack.auditscenarios import PARTIAL_STEPS
from tessera.attack.chainnet import ChainRound, LedgerSnapshot
from tessera.attack.dodgers import (
    DripWhenAudited,
    HangWhenAudited,
    LastDeltaHangWhenAudited,
    LastDeltaRider,
)
from tessera.attack.harness import NetworkRun, Participant, tiny_spec
from tessera.attack.report import default_stake_rows
from tessera.attack.scenarios import registry
from tests.support.rounds import CHAIN_ID, CONTRACT, MINERS, VALIDATOR, Round, make_round
from training.digest import part_digests, state_digest
from validator.audits import mark_audit, unanswered
from validator.context import Incoming, Verdict
from validator.pipeline import VerificationPipeline
from validator.policy import VerifyPolicy
from validator.stages import Stage

OTHER = "0x" + "d4" * 20
MINE = AuditDraw(True, 0b01)
NOT_AUDITED = AuditDraw(False, 0)


def ctx_of(round: int) -> BehaviourContext:
    return BehaviourContext(round, MINERS[0], ("m",), 6)


def drawn(audited_rounds: set[int]) -> Any:
    return lambda round, miner: round in audited_rounds


def test_a_hang_holds_the_request_past_any_window_only_when_audited() -> None:
    slept: list[float] = []
    b = HangWhenAudited(drawn({3}), hang_s=60.0, sleep=slept.append)
    assert b.serves_state(ctx_of(2)) and slept == []
    assert not b.serves_state(ctx_of(3)) and slept == [60.0]


def test_a_drip_serves_late_only_when_audited() -> None:
    slept: list[float] = []
    b = DripWhenAudited(drawn({3}), delay_s=25.0, sleep=slept.append)
    assert b.serves_state(ctx_of(2)) and slept == []
    assert b.serves_state(ctx_of(3)) and slept == [25.0]  # served, 25 s late


def test_the_last_delta_rider_with_a_hang_hangs_when_audited() -> None:
    slept: list[float] = []
    b = LastDeltaHangWhenAudited(make_round().spec, drawn({3}), hang_s=60.0, sleep=slept.append)
    assert b.serves_state(ctx_of(2)) and not b.serves_state(ctx_of(3)) and slept == [60.0]


# -- the last-delta rider ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rnd() -> Round:
    return make_round()


@pytest.fixture(scope="module")
def rider(rnd: Round) -> tuple[LastDeltaRider, Any]:
    """A rider that saw theta_{r-1} (theta_r's parameters, 1% smaller) and built its round-r update."""
    b = LastDeltaRider(rnd.spec)
    b.previous = {k: v * 0.99 for k, v in rnd.checkpoint.items()}
    return b, rnd.build(MINERS[0], b)


def verify(rnd: Round, built: Any, draw: AuditDraw) -> Verdict:
    served = dict(built.published())

    def fetch_state(digest: str) -> dict[str, Tensor]:
        return {k: t.clone() for k, t in served[digest].items()}

    commitment = update_commitment(CHAIN_ID, CONTRACT, rnd.round, MINERS[0], built.digest)
    inc = Incoming(MINERS[0], commitment, lambda: built.update, fetch_state, fetch_source=rnd.fetch_source)
    ctx = replace(rnd.ctx(), validators=[VALIDATOR, OTHER], audits={MINERS[0]: draw}, validator_index=0)
    return mark_audit(VerificationPipeline(VerifyPolicy()).verify(inc, ctx), ctx)


def test_the_riders_transcript_is_the_last_delta_and_consistent(rnd: Round, rider: tuple[Any, Any]) -> None:
    b, built = rider
    H = rnd.spec.inner.steps
    assert b.trained == 0  # it trained nothing
    assert built.transcript_steps == sorted({*range(0, H, rnd.spec.inner.transcript_interval), H})
    for i, s in enumerate(built.transcript_steps):
        assert part_digests(built.states[s]) == built.transcript_parts[i]
    name = next(k.removeprefix("param/") for k in built.states[H] if k.startswith("param/"))
    theta = rnd.checkpoint[name]
    assert torch.equal(built.states[0][f"param/{name}"], theta)
    last = theta - theta * 0.99  # theta_r - theta_{r-1}
    assert torch.allclose(built.states[H][f"param/{name}"], theta + last, rtol=1e-5, atol=1e-7)
    assert torch.equal(b.previous[name], theta)  # theta_r kept for the next round


def test_the_rider_passes_every_check_that_moves_no_state(rnd: Round, rider: tuple[Any, Any]) -> None:
    """Unaudited, nothing tells it apart: it reaches the usefulness score like an honest update."""
    v = verify(rnd, rider[1], NOT_AUDITED)
    assert v.stage in (Stage.OK, Stage.USEFULNESS) and not v.provable, (v.stage, v.reason)


def test_an_audit_of_the_rider_proves_it(rnd: Round, rider: tuple[Any, Any]) -> None:
    v = verify(rnd, rider[1], MINE)
    assert v.stage == Stage.RECOMPUTE and v.provable, (v.stage, v.reason)
    assert not unanswered(v)


def test_the_riders_first_round_is_honest(rnd: Round) -> None:
    b = LastDeltaRider(rnd.spec)
    honest = rnd.build(MINERS[1])
    first = rnd.build(MINERS[1], b)
    assert b.trained == 1 and first.digest == honest.digest
    assert state_digest(b.previous) == state_digest(dict(rnd.checkpoint))


# -- the scenarios, their checks and their profit against an honest miner ----------------------------------

WAYS = {
    "hang-when-audited", "drip-when-audited", "withholder-audited", "withhold-when-audited",
    "free-rider-last-delta", "free-rider-last-delta-hang", "lazy-10", "lazy-50",
}  # fmt: skip
WEI = 10**18


def test_every_way_around_an_audit_is_a_scenario_with_a_model_row() -> None:
    reg = registry()
    assert WAYS <= set(reg)
    e = ev.RunEconomics(stake=100, slash_fraction=0.1, reward=10, compute_cost=10, vesting_rounds=2)
    rows = {row.name for row in ev.strategy_rows(e, 0.8)}
    for name in WAYS:
        sc = reg[name]
        assert sc.kind == "miner" and sc.audit_params["audit_rate_bps"] < 10_000, name
        cheaters = [p for p in sc.build() if p.label != "honest"]
        assert len(cheaters) == 1 and cheaters[0].factory is not None, name
        found = model_row(cheaters[0].label)
        assert found is not None and found[0] in rows, (name, found)
    for name in ("lazy-10", "lazy-50"):
        adapt = reg[name].adapt_spec
        assert adapt is not None
        spec = adapt(tiny_spec())
        assert (spec.inner.steps, spec.inner.transcript_interval) == (PARTIAL_STEPS, 1)
    assert reg["free-rider-last-delta"].provable and not reg["free-rider-last-delta-hang"].provable


def _run(rider_paid: dict[int, int], audited: dict[int, bool], proposals: list[dict[str, Any]]) -> NetworkRun:
    """Three settled rounds: two honest miners paid 10 a round, the rider as given."""
    honest = [Participant("miner", "honest", 100, address=f"0x{i}") for i in (1, 2)]
    rider = Participant("miner", "free-rider-last-delta", 100, address="0xr")
    people = [Participant("validator", "honest", 1000, address="0xv"), *honest, rider]
    rounds = {
        r: ChainRound(
            commits={"0x1": b"", "0x2": b"", "0xr": b""},
            settlement=SimpleNamespace(
                miner_rewards={"0x1": 10 * WEI, "0x2": 10 * WEI, "0xr": rider_paid[r] * WEI}
            ),
        )
        for r in (1, 2, 3)
    }
    slashed = {"0xr": sum(x["executed"] for x in proposals)}
    led = LedgerSnapshot(
        rounds, slashed, {}, audits={(r, "0xr"): a for r, a in audited.items()}, proposals=proposals
    )
    return NetworkRun(3, people, led, [], {}, 1.0, [])


def _proof(round: int, executed: bool = True) -> dict[str, Any]:
    return {"target": "0xr", "round": round, "unanswered": False, "executed": executed,
            "stake_taken": 10 * WEI if executed else 0, "forfeited": 10 * WEI if executed else 0}  # fmt: skip


def test_realized_profit_against_an_honest_miner_and_the_models() -> None:
    """Rounds 2-3 cheating: paid 10 unaudited (round 2), caught when audited (round 3: paid 0, 10 of
    unvested pay forfeited, one slash of 10% of 100). Per round: (10 - 10 - 2 x 10 - 10) / 2 + C (10, all
    of it saved) = -5."""
    run = _run({1: 10, 2: 10, 3: 0}, {2: False, 3: True}, [_proof(3)])
    rows = profit_vs_honest(
        run, cheat_from=2, stake=100, slash_fraction=0.1, audit_params={"audit_rate_bps": 8_000}
    )
    assert len(rows) == 1
    r = rows[0]
    assert r["rounds"] == 2 and r["honest_pay_per_round"] == 10 and r["slashes"] == 1
    assert r["realized_profit_per_round"] == pytest.approx(-5.0) and r["below_honest"]
    e = ev.RunEconomics(
        stake=100, slash_fraction=0.1, reward=10, compute_cost=10,
        vesting_rounds=NetworkParams().vesting_rounds, validators=1, honest_fraction=1.0,
    )  # fmt: skip
    want = {row.name: row for row in ev.strategy_rows(e, 0.8)}["free-rider-last-delta"].expected_profit
    assert r["model_expected_profit_per_round"] == pytest.approx(want, abs=1e-4)
    # never caught: paid like an honest miner and saved the compute, which is profit
    free = profit_vs_honest(
        _run({1: 10, 2: 10, 3: 10}, {2: False, 3: False}, []), cheat_from=2, stake=100, slash_fraction=0.1,
        audit_params={"audit_rate_bps": 8_000},
    )  # fmt: skip
    assert free[0]["realized_profit_per_round"] == pytest.approx(10.0) and not free[0]["below_honest"]


def test_caught_when_audited_needs_a_confirmation_in_every_audited_round() -> None:
    checks, figures = caught_when_audited(_run({1: 10, 2: 10, 3: 0}, {2: False, 3: True}, [_proof(3)]), 2)
    assert all(checks.values()), checks
    assert figures["rounds"][3]["confirmed"] == ["proof"]
    missed, _ = caught_when_audited(_run({1: 10, 2: 10, 3: 0}, {2: False, 3: True}, [_proof(3, False)]), 2)
    assert not missed["confirmed_when_audited"]
    paid, _ = caught_when_audited(_run({1: 10, 2: 10, 3: 10}, {2: False, 3: True}, [_proof(3)]), 2)
    assert not paid["paid_0_when_audited"]


def test_the_default_stake_from_measured_parts() -> None:
    """A run whose two audits of a hanging miner were confirmed once: catch 1/2 per audit, weighed at the
    default stake with q measured through the real draw."""
    audit = {
        "rounds": {"1": {"audited": True, "paid": 0.0, "confirmed": ["unanswered"]},
                   "2": {"audited": True, "paid": 0.0, "confirmed": []},
                   "3": {"audited": False, "paid": 9.0, "confirmed": []}},
        "profit": [{"label": "hang-when-audited", "model_row": "hang-when-audited"}],
    }  # fmt: skip
    d = default_stake_rows({"scenarios": [{"name": "hang-when-audited", "audit": audit}]}, draws=2_000)
    e = partial.default_economics()
    assert d["q_deployed"] == ev.audit_rate_bps(e) / 10_000 and 0 <= d["q_measured"] < 0.05
    (row,) = d["rows"]
    assert row["audits"] == 2 and row["catch_per_audit"] == 0.5
    loss = d["q_measured"] * e.committee_catch() * 0.5 * e.loss_when_caught()
    assert row["expected_loss"] == pytest.approx(loss) and row["expected_profit"] == pytest.approx(
        row["gain"] - loss
    )
    none = default_stake_rows({"scenarios": [{"name": "baseline", "audit": {}}]}, draws=2_000)
    assert none["rows"] == [] and none["q_measured"] == 0.0  # nothing to weigh: no draws


def test_caught_when_audited_on_the_memory_ledger_counts_its_slashes() -> None:
    """The memory ledger has no stake figures per proposal: a confirmation costs like a caught fake when
    the miner's slash count shows it."""
    snap = _run({1: 10, 2: 10, 3: 0}, {2: False, 3: True}, [_proof(3)]).ledger
    for slashed, ok in ((1, True), (0, False)):
        led = SimpleNamespace(
            rounds=snap.rounds, audits=snap.audits, frozen={(3, "0xr"): b"\x01"}, executed={b"\x01"},
            slashed={"0xr": slashed},
        )  # fmt: skip
        run = _run({1: 10, 2: 10, 3: 0}, {2: False, 3: True}, [])
        run.ledger = led
        checks, _ = caught_when_audited(run, 2)
        assert checks["confirmed_when_audited"] and checks["costs_like_a_caught_fake"] is ok


def test_the_memory_ledgers_forfeits_count_in_the_realized_profit() -> None:
    snap = _run({1: 10, 2: 10, 3: 0}, {2: False, 3: True}, [_proof(3)]).ledger
    run = _run({1: 10, 2: 10, 3: 0}, {2: False, 3: True}, [])
    run.ledger = SimpleNamespace(
        rounds=snap.rounds, audits=snap.audits, frozen={(3, "0xr"): b"\x01"}, executed={b"\x01"},
        slashed={"0xr": 1}, forfeited={"0xr": 10 * WEI},
    )  # fmt: skip
    (row,) = profit_vs_honest(
        run, cheat_from=2, stake=100, slash_fraction=0.1, audit_params={"audit_rate_bps": 8_000}
    )
    assert row["forfeited"] == 10 and row["realized_profit_per_round"] == pytest.approx(-5.0)
