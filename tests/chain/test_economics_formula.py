"""The expected-value formula of issue 26 (protocol/rounds/economics.py, docs/threat-model.md)."""

from __future__ import annotations

import math

import pytest

from protocol.rounds import economics as ev
from protocol.rounds.deployment import NetworkParams


def _defaults(**kw: float) -> ev.RunEconomics:
    p = NetworkParams()
    reward = p.emission_per_round * (10_000 - p.validator_share_bps) / 10_000 / 4 / 10**18
    base = dict(
        stake=p.min_miner_stake / 10**18,
        slash_fraction=p.slash_bps / 10_000,
        reward=reward,
        compute_cost=reward,
        vesting_rounds=p.vesting_rounds,
        committee_size=p.committee_size,
        validators=3,
    )
    return ev.RunEconomics(**(base | kw))  # type: ignore[arg-type]


def test_defaults_deter_every_strategy_with_margin_two() -> None:
    e = _defaults()
    assert e.loss_when_caught() == 175_400 and e.committee_catch() == 1.0  # 50% of 350,000 + 2 x 200
    assert ev.audit_rate(e) == pytest.approx(400 / 175_400)
    q = NetworkParams().audit_rate_bps / 10_000
    assert q >= ev.audit_rate(e)
    for row in ev.strategy_rows(e, q):
        assert row.margin >= 2.0, row
        assert row.expected_profit <= 0, row


def test_the_fraction_cancels_and_q_star_is_the_threshold() -> None:
    e = _defaults(vesting_rounds=4, slash_fraction=1.0)
    q = ev.audit_rate(e)
    rows = {r.name: r for r in ev.strategy_rows(e, q)}
    for f in ev.LAZY_FRACTIONS:
        assert rows[f"lazy f={f:g}"].margin == pytest.approx(2.0)
    below = {r.name: r for r in ev.strategy_rows(e, q * 0.9)}
    assert below["lazy f=0.1"].margin < 2.0 and below["withholding-when-audited"].margin < 2.0
    # deployed with headroom: 12% above q*, so every margin is at least 2 x 1.12 before rounding up
    bps = ev.audit_rate_bps(e)
    assert bps == math.ceil(ev.HEADROOM * q * 10_000 - 1e-9)
    for row in ev.strategy_rows(e, bps / 10_000):
        assert row.margin >= 2.0 * ev.HEADROOM - 1e-9, row
    assert ev.audit_rate_bps(e, headroom=1.0) == math.ceil(q * 10_000 - 1e-9)


def test_small_committees_need_more_stake() -> None:
    e = _defaults(committee_size=1, stake=100)
    assert e.committee_catch() == pytest.approx(2 / 3)
    assert ev.audit_rate(e) > 1 and ev.audit_rate_bps(e) == 10_000
    assert ev.min_stake(e) == pytest.approx(400)
    assert ev.audit_rate(_defaults(committee_size=1, stake=400)) == pytest.approx(1.0)


def test_inputs_are_checked() -> None:
    with pytest.raises(ev.EconomicsError):
        _defaults(slash_fraction=1.5)
    with pytest.raises(ev.EconomicsError):
        ev.strategy_rows(_defaults(), 1.5)
