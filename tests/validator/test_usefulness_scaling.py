"""F9: scaling an honest update must never raise its usefulness score."""

from __future__ import annotations

import pytest
from validator_support import MINERS, Round, make_round

from tessera.attack.miners import Poisoner
from validator.verify import VerifyPolicy


@pytest.fixture(scope="module")
def rnd() -> Round:
    return make_round()


@pytest.mark.parametrize("factor", [0.5, 3.0, 10.0])
def test_scaled_update_never_scores_above_the_original(rnd: Round, factor: float) -> None:
    policy = VerifyPolicy()  # the loose default max_rel_norm = 1.0 lets every factor here pass `bounds`
    for miner in MINERS:
        honest = rnd.verify(miner, rnd.build(miner), policy)
        assert honest.accepted and honest.score > 0, honest.reason
        scaled = rnd.verify(miner, rnd.build(miner, Poisoner("scaled", factor)), policy)
        assert scaled.stage in ("ok", "usefulness"), scaled.reason  # passed every check before scoring
        assert scaled.score <= honest.score, (factor, scaled.score, honest.score)
