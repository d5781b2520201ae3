"""``tessera attack --campaign``: every way around an audit over many rounds at the default stake on the
in-memory ledger. The arithmetic of the expected profit from measured parts, the deployed audit rate it
runs at, and a short real run (CI's version of the campaign) whose audited dodger is confirmed and loses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol.rounds import economics as ev
from protocol.rounds.deployment import NetworkParams
from tessera.attack import campaign, campaignreport


def test_the_expected_profit_from_measured_parts() -> None:
    # never audited: the gain and the unaudited pay difference
    assert campaign.expected_at(0.0, 10.0, -1.0, 0.0, 1.0, 1e5) == pytest.approx(9.0)
    # always audited and always confirmed: the loss dominates
    assert campaign.expected_at(1.0, 10.0, 0.0, -50.0, 1.0, 1000.0) == pytest.approx(10.0 - 50.0 - 1000.0)
    # an audit that never confirms (d = 0) costs only the audited round's pay
    assert campaign.expected_at(0.5, 10.0, 0.0, -20.0, 0.0, 1e9) == pytest.approx(0.0)


def test_the_campaign_runs_at_the_rate_a_deployment_sets_for_its_network() -> None:
    miners = campaign.HONEST + len(campaign.STRATEGIES)
    params = campaign.chain_params(miners)
    e = campaign.default_economics(miners)
    assert params["audit_rate_bps"] == ev.audit_rate_bps(e) and 0 < params["audit_rate_bps"] < 10_000
    assert params["committee_size"] == 1 and params["vesting_rounds"] == NetworkParams().vesting_rounds
    assert e.stake == NetworkParams().min_miner_stake / 10**18 and e.slash_fraction == 0.5
    assert campaign.chain_params(miners, 2_500)["audit_rate_bps"] == 2_500
    labels = [p.label for p in campaign.participants(2)]
    assert labels.count("honest") == campaign.VALIDATORS + campaign.HONEST
    assert sum(label.startswith("hang-when-audited#") for label in labels) == 2


def test_a_short_campaign_confirms_an_audited_hang_and_it_loses(tmp_path: Path) -> None:
    """CI's campaign: 3 rounds, every pair audited (q = 1), a miner that hangs when audited and a partial
    faker beside the honest ones, at the default stake and slash."""
    ways = tuple(s for s in campaign.STRATEGIES if s.label in ("hang-when-audited", "lazy f=0.5"))
    doc = campaign.run_campaign(rounds=3, q_bps=10_000, strategies=ways, progress=tmp_path / "p.json")
    assert doc["rounds"] == 3 and doc["q_run"] == 1.0 and not doc["stalled"]
    rows = {r["strategy"]: r for r in doc["strategies"]}
    hang = rows["hang-when-audited"]
    assert hang["audits"] == 3, "q = 1: audited every round"
    assert hang["confirmed"] >= 1, "an audit left hanging is reported and confirmed like a caught fake"
    assert hang["loss_per_confirmation"] >= 0.5 * doc["economics_deployed"]["stake"]
    assert hang["stake_lost"] >= 0.5 * doc["economics_deployed"]["stake"], "the ledger took the stake"
    assert hang["realized_profit_per_round"] < 0 and hang["below_honest"]
    assert hang["measured_profit_per_round_deployed_q"] < 0
    assert json.loads((tmp_path / "p.json").read_text())["rounds"] >= 1
    png = campaignreport.plot(doc, tmp_path / "c.png")
    assert png.stat().st_size > 5_000
    assert "hang-when-audited" in campaignreport.markdown(doc)


def test_an_unknown_strategy_is_one_typed_line(capsys: pytest.CaptureFixture[str]) -> None:
    from tessera import cli

    assert cli.main(["attack", "--campaign", "--strategy", "bogus", "--rounds", "1"]) == 2
    err = capsys.readouterr().err
    assert "--strategy 'bogus'" in err and "lazy f=0.1" in err
