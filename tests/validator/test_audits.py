"""Issue 26: audits. Every update gets the checks that move no state; only the audit committee of a
(miner, round) drawn from the seed fetches states, replays a seed-chosen step and checks the
update-to-transcript tie; the others abstain. A development TEE quote lowers nothing, a miner that
does not serve its states to its committee leaves the audit unanswered, and a fake is caught only where
it is audited (which is what q pays for)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from torch import Tensor

from miner.behaviour import Behaviour, BehaviourContext
from protocol.rounds.audits import AuditDraw
from protocol.wire import updateheader
from protocol.wire.commitments import update_commitment
from tests.support.rounds import CHAIN_ID, CONTRACT, MINERS, VALIDATOR, Round, make_round
from validator.audits import round_audits, unanswered
from validator.context import AuditRole, Incoming, Verdict
from validator.pipeline import VerificationPipeline
from validator.policy import VerifyPolicy
from validator.stages import Stage

OTHER = "0x" + "d4" * 20
NOT_AUDITED = AuditDraw(False, 0)
MINE = AuditDraw(True, 0b01)  # the committee is validators[0]: this validator
THEIRS = AuditDraw(True, 0b10)  # the committee is validators[1]


class OtherBatches(Behaviour):
    """Trains every step on the next step's batch: every segment fails its replay."""

    def batches(self, ctx: BehaviourContext, batches: Tensor) -> Tensor:
        return batches.roll(1, dims=0)


@pytest.fixture(scope="module")
def rnd() -> Round:
    return make_round()


def verify(
    rnd: Round, miner: str, draw: AuditDraw, behaviour: Behaviour | None = None, serve_states: bool = True
) -> tuple[Verdict, list[str], Any]:
    """Verify ``miner``'s update under ``draw``, this validator at index 0; the verdict and the digests
    fetched."""
    built = rnd.build(miner, behaviour)
    served = dict(built.published())
    if not serve_states:  # the transcript and the residual only: no state part
        for i in range(len(built.transcript_steps)):
            for d in built.state_parts(i):
                served.pop(d, None)
    calls: list[str] = []

    def fetch_state(digest: str) -> dict[str, Tensor]:
        calls.append(digest)
        if digest not in served:
            raise LookupError(f"{digest[:10]} not served")
        return {k: t.clone() for k, t in served[digest].items()}

    commitment = update_commitment(CHAIN_ID, CONTRACT, rnd.round, miner, built.digest)
    incoming = Incoming(miner, commitment, lambda: built.update, fetch_state, fetch_source=rnd.fetch_source)
    ctx = replace(rnd.ctx(), validators=[VALIDATOR, OTHER], audits={miner: draw}, validator_index=0)
    return VerificationPipeline(VerifyPolicy()).verify(incoming, ctx), calls, built


def test_an_unaudited_or_abstained_miner_moves_no_state_and_is_scored_on_the_stateless_checks(
    rnd: Round,
) -> None:
    for draw, role in ((NOT_AUDITED, AuditRole.UNAUDITED), (THEIRS, AuditRole.ABSTAIN)):
        v, calls, built = verify(rnd, MINERS[0], draw)
        assert v.accepted and v.score > 0, v.reason
        assert v.evidence["audit"] == role and v.evidence["segments"] == []
        # the transcript's digests only: its anchor at theta_r is checked on digests
        assert calls == ["0x" + updateheader.transcript_root(built.transcript_parts)]


def test_a_committee_member_replays_one_seed_chosen_step_and_checks_the_tie(rnd: Round) -> None:
    v, calls, built = verify(rnd, MINERS[0], MINE)
    assert v.accepted, v.reason
    assert v.evidence["audit"] == AuditRole.AUDIT and len(v.evidence["segments"]) == 1
    assert v.metrics["replayed_steps"] == 1 and v.metrics["ef_rel_err"] == 0.0
    # the transcript, at most one start state (two parts) and the final parameters: nothing else
    assert len(calls) <= 4 and len(set(calls)) == len(calls)


def test_a_fake_is_caught_where_it_is_audited_and_nowhere_else(rnd: Round) -> None:
    caught, _, _ = verify(rnd, MINERS[1], MINE, OtherBatches())
    assert caught.stage == Stage.RECOMPUTE and caught.provable, caught.reason
    assert "does not replay" in caught.reason and caught.evidence["segment"]
    for draw in (NOT_AUDITED, THEIRS):
        missed, _, _ = verify(rnd, MINERS[1], draw, OtherBatches())
        assert missed.stage != Stage.RECOMPUTE  # no state, no replay: only the audit rate q deters it


def test_states_not_served_to_the_committee_leave_the_audit_unanswered(rnd: Round) -> None:
    v, _, _ = verify(rnd, MINERS[0], MINE, serve_states=False)
    assert v.stage == Stage.RECOMPUTE and not v.provable and unanswered(v), v.reason
    abstained, _, _ = verify(rnd, MINERS[0], THEIRS, serve_states=False)
    assert abstained.accepted and not unanswered(abstained)


def test_a_development_quote_lowers_nothing_once_the_chain_draws_audits(rnd: Round) -> None:
    policy = VerifyPolicy(attested_check_probability=0.0, attested_segments=0, audit_segments=1)
    pipeline = VerificationPipeline(policy)
    drawn = replace(rnd.ctx(), validators=[VALIDATOR], audits={MINERS[0]: MINE}, validator_index=0)
    for attested in (False, True):
        plan = pipeline.plan(drawn, MINERS[0], attested)
        assert (plan.segments, plan.role) == (1, AuditRole.AUDIT)
    # without the chain's draw (q = 1, every validator) the issue-10 rule still applies
    assert pipeline.plan(rnd.ctx(), MINERS[0], True).segments == 0


class Board:
    """A coordinator that knows the round's draws."""

    def audit_draws(self, round: int, miners: list[str]) -> dict[str, AuditDraw]:
        return {m: (MINE if m == MINERS[0] else THEIRS) for m in miners}


def test_round_audits_reads_the_draws_and_this_validators_committee_bit(rnd: Round) -> None:
    ctx = replace(rnd.ctx(), validators=[VALIDATOR.upper().replace("0X", "0x"), OTHER])
    round_audits(Board(), ctx, MINERS)
    assert ctx.validator_index == 0
    assert [ctx.audit_role(m) for m in MINERS] == [AuditRole.AUDIT, AuditRole.ABSTAIN]
    assert ctx.auditors(MINERS[1]) == [OTHER]
    plain = rnd.ctx()
    round_audits(object(), plain, MINERS)  # a coordinator without draws: every validator audits
    assert plain.audits == {} and plain.audit_role(MINERS[1]) == AuditRole.AUDIT
