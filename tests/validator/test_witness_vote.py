"""The vote a witness's own audit calls for (issue 26, the reverse attack): not served -> for the report,
served and checking out -> against it, a fake -> a fraud proof instead, a verdict that never reached
the states -> no vote (the report then expires)."""

from __future__ import annotations

from validator.context import AuditRole, Verdict
from validator.stages import Stage
from validator.witness import witness_vote


def _v(stage: Stage, accepted: bool = False, provable: bool = False, **evidence: object) -> Verdict:
    ev = {"audit": str(AuditRole.AUDIT), **evidence}
    return Verdict("0xm", 3, accepted, str(stage), "", provable=provable, evidence=ev)


def test_not_served_confirms_the_report() -> None:
    assert witness_vote(_v(Stage.RECOMPUTE, unanswered=True)) is True


def test_served_and_checking_out_rejects_it_whatever_the_score() -> None:
    assert witness_vote(_v(Stage.OK, accepted=True)) is False
    assert witness_vote(_v(Stage.USEFULNESS)) is False  # answered; a low usefulness is no withholding


def test_a_fake_is_proven_not_voted() -> None:
    assert witness_vote(_v(Stage.RECOMPUTE, provable=True)) is None


def test_no_vote_before_the_states() -> None:
    for stage in (Stage.FETCH, Stage.DIGEST, Stage.FORMAT, Stage.BOUNDS, Stage.BUDGET, Stage.ERROR):
        assert witness_vote(_v(stage)) is None
    assert witness_vote(_v(Stage.RECOMPUTE)) is None  # an unprovable replay failure: no opinion
