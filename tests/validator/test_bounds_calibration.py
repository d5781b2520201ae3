"""The ``bounds`` stage never refuses an honest update of the devnet's run.

With the recipe's shaped-DCT codec an update carries most of the delta's energy, and in the first training
round from theta_0 the head moves by about its own norm (0.88-1.09 measured): the old bound of 1.0 refused,
and slashed, honest miners on a default devnet. This measures honest first-round updates of the devnet's
run (H = 60) and checks them against the validator's own stage with a margin.
"""

from __future__ import annotations

import hashlib
import math

from miner.behaviour import Behaviour
from miner.work import RoundInputs, build_update
from protocol.wire.update import decode_update
from tessera.devnet.config import DevnetConfig
from tessera.devnet.runfile import devnet_spec
from training.corpus import load_bundled_corpus
from training.data import prepare
from training.model import module_of
from validator.pipeline import stage_bounds  # the stage itself, not a copy of its rule
from validator.policy import VerifyPolicy

MINERS = [f"0x{i:040x}" for i in range(1, 5)]
#: The largest honest relative norm must stay below this share of the bound.
MARGIN = 0.5


def test_honest_first_round_updates_of_the_devnet_run_pass_bounds_with_margin() -> None:
    spec = devnet_spec(DevnetConfig())
    ds = prepare(load_bundled_corpus(), spec.model)
    theta = spec.genesis_params()
    policy = VerifyPolicy()
    worst = 0.0
    seed = hashlib.sha256(b"bounds calibration").digest()
    for m in MINERS[:2]:  # two assignments: one of them trains the head (the largest relative move)
        built = build_update(
            spec,
            ds,
            RoundInputs(
                round=2,
                miner=m,
                checkpoint=theta,
                checkpoint_digest=b"\0" * 32,
                assign_seed=seed,
                registry=MINERS,
                ef_state={},
                ef_source=None,
            ),
            Behaviour(),
        )
        delta = decode_update(built.update).pseudo_gradient()
        by: dict[str, list[float]] = {}
        for n, d in delta.items():
            acc = by.setdefault(module_of(n), [0.0, 0.0])
            acc[0] += float(d.double().pow(2).sum())
            acc[1] += float(theta[n].double().pow(2).sum())
        worst = max(worst, *(math.sqrt(a / w) for a, w in by.values()))

        class _Ctx:
            checkpoint = theta

        stage_bounds(_Ctx(), delta, policy, {})  # type: ignore[arg-type]  # raises if refused
    assert 0.3 < worst < MARGIN * policy.max_rel_norm, worst
