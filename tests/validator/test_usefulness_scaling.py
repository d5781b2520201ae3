"""F9: scaling an honest update must never raise its usefulness score.

Since F12 a scaled update is refused earlier, at ``recompute`` (tests/validator/test_error_feedback_chain.py);
the score stays scale-free as a second line of defence, so it is tested here on its own."""

from __future__ import annotations

import pytest

from protocol.wire.update import decode_update
from tests.support.rounds import MINERS, Round, make_round
from validator.context import Verdict
from validator.policy import VerifyPolicy
from validator.usefulness import score_usefulness


@pytest.fixture(scope="module")
def rnd() -> Round:
    return make_round()


@pytest.mark.parametrize("factor", [0.5, 3.0, 10.0])
def test_scaled_update_never_scores_above_the_original(rnd: Round, factor: float) -> None:
    policy = VerifyPolicy()
    ctx = rnd.ctx()
    for miner in MINERS:
        honest = rnd.verify(miner, rnd.build(miner), policy)
        assert honest.accepted and honest.score > 0, honest.reason
        delta = decode_update(rnd.build(miner).update).pseudo_gradient()
        v = Verdict(miner=miner, round=rnd.round, accepted=False, stage="", reason="")
        score_usefulness(ctx, v, ctx.assignment(miner), {k: t * factor for k, t in delta.items()}, policy)
        assert 0 < v.score <= honest.score, (factor, v.score, honest.score)
