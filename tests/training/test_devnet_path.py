"""The simulator and the benchmark compute what the devnet's miners and validators compute.

A devnet miner builds its update with ``miner.work.build_update`` (carrying its error-feedback residual
and AdamW moments through the state it persists), a validator replays transcript segments with
``training.inner.replay_segment`` and merges with ``training.merge.next_checkpoint``. Here the same
rounds run both ways from the devnet's run (``tessera.devnet.network.devnet_spec``: the recipe):
the checkpoints must be equal bit for bit, round after round, and every replayed segment must match.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from miner.behaviour import Behaviour
from miner.work import RoundInputs, build_update
from protocol.wire.update import decode_update
from tessera.devnet.config import DevnetConfig
from tessera.devnet.runfile import devnet_spec
from tests.training.training_fixtures import tiny_inner, tiny_model
from training.config import CodecConfig, InnerConfig, OuterConfig, RunConfig
from training.corpus import load_bundled_corpus
from training.data import prepare
from training.digest import state_digest
from training.inner import replay_segment
from training.merge import MergePolicy, next_checkpoint, robust_merge
from training.simulation import Simulation, round_seed

MINERS = [f"0x{i:040x}" for i in range(1, 4)]


def test_the_devnet_runs_the_recipe() -> None:
    """The devnet's run is the chosen recipe (docs/decisions/training-recipe.md)."""
    spec = devnet_spec(DevnetConfig(mode="dipaco"))
    assert spec.inner.carry_optimizer
    assert spec.codec == CodecConfig.recipe()
    assert spec.codec == CodecConfig(topk=110, transform="tiles", ef_beta=0.95, index="elias-fano")
    assert spec.outer == OuterConfig.recipe() == OuterConfig(lr=1.0, momentum=0.5, nesterov=True)


@pytest.mark.parametrize("mode", ["moe", "dipaco"])
def test_simulation_is_the_devnet_path(mode: str) -> None:
    # the devnet's run, with a model and an inner loop small enough for a unit test
    inner: InnerConfig = replace(tiny_inner(steps=6, k=2), carry_optimizer=InnerConfig().carry_optimizer)
    spec = replace(devnet_spec(DevnetConfig(mode=mode)), model=tiny_model(mode), inner=inner)
    ds = prepare(load_bundled_corpus(), spec.model)
    run = RunConfig(spec.model, spec.inner, spec.outer, spec.codec)
    # the validators clip each contribution to twice the median norm before the mean: the bench does too
    sim = Simulation(run, ds, MINERS, run_seed=0, merger=lambda c: robust_merge(c, MergePolicy()))
    theta = spec.genesis_params()
    assert all(torch.equal(theta[n], sim.params[n]) for n in theta)
    momentum: dict[str, torch.Tensor] = {}
    kept: dict[str, tuple[dict[str, torch.Tensor], tuple[int, bytes] | None]] = {
        m: ({}, None) for m in MINERS
    }
    for r in range(3):
        seed = round_seed(0, r)
        contributions = []
        for m in MINERS:
            ef_state, ef_source = kept[m]
            built = build_update(
                spec,
                ds,
                RoundInputs(
                    round=r,
                    miner=m,
                    checkpoint=theta,
                    checkpoint_digest=state_digest(theta),
                    assign_seed=seed,
                    registry=MINERS,
                    ef_state=ef_state,
                    ef_source=ef_source,
                ),
                Behaviour(),
            )
            kept[m] = (built.ef_state, (r, built.digest))
            if r > 0:  # carried moments: the transcript starts from them, and a validator's replay matches
                assert any(bool(t.any()) for k, t in built.states[0].items() if k.startswith("exp_avg"))
            end = replay_segment(
                spec.model,
                spec.inner,
                theta,
                built.assignment,
                sim.batches(r, built.assignment),
                r,
                built.states[2],
                4,
            )
            assert state_digest(end) == built.transcript_digests[2]
            contributions.append((1.0, m, decode_update(built.update).pseudo_gradient()))
        theta, momentum = next_checkpoint(theta, momentum, contributions, spec.outer, MergePolicy())
        sim.step(r, evaluate_after=False)
        assert all(torch.equal(theta[n], sim.params[n]) for n in theta), f"round {r}"
