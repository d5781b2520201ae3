"""Issue 26's reverse attack as a scenario: a validator on a committee of one (c = 1 of V = 2, q = 1)
reports every honest miner it audits unanswered. The other validator is the witness of each report: it
is served, votes against, and expires the contested report after its window, which releases the pay."""

from __future__ import annotations

import pytest

from protocol.rounds.audits import REPORT_WINDOW_ROUNDS
from tessera.attack.runner import reference, reference_key
from tessera.attack.scenarios import get


def test_the_scenario_is_a_committee_of_one_of_two_validators() -> None:
    sc = get("false-unanswered-report")
    parts = sc.build()
    assert [p.label for p in parts if p.role == "validator"] == ["honest", "false-reporter"]
    assert [p.label for p in parts if p.role == "miner"] == ["honest"] * 3
    assert sc.audit_params == {"audit_rate_bps": 10_000, "committee_size": 1}
    assert sc.kind == "validator" and not sc.scores_dishonestly
    # a report of round 1 can expire in round 1 + window + 1: the run needs that many rounds in time
    assert sc.timeout_s >= 900.0 * (REPORT_WINDOW_ROUNDS + 1) / 3 * 2
    assert reference(sc).audit_params == sc.audit_params
    assert reference_key(sc) != reference_key(get("copier-validator"))
    assert parts[1].factory is not None  # the liar's node class (FalseReporterValidator)


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(2700)
def test_a_lying_committee_of_one_slashes_nobody_and_the_pay_is_released() -> None:
    from tessera.attack.results import evaluate
    from tessera.attack.runner import run_scenario

    sc = get("false-unanswered-report")
    res = evaluate(sc, run_scenario(sc, rounds=REPORT_WINDOW_ROUNDS + 2, chain="anvil"))
    assert all(res.checks.values()), (res.checks, res.audit, res.errors)
