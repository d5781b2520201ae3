"""The one-process simulation: deterministic, bytes counted, baseline on the same batches."""

from __future__ import annotations

import dataclasses

import pytest

from tests.training.training_fixtures import tiny_inner, tiny_model
from training.config import CodecConfig, OuterConfig, RunConfig
from training.corpus import load_bundled_corpus
from training.data import prepare
from training.digest import state_digest
from training.simulation import Baseline, Simulation


@pytest.fixture(scope="module")
def corpus():  # type: ignore[no-untyped-def]
    return load_bundled_corpus()


def _run(mode: str) -> RunConfig:
    return RunConfig(
        tiny_model(mode),
        tiny_inner(steps=2),
        OuterConfig.plain_average(),
        CodecConfig(chunk=256, topk=8, bits=2),
    )


@pytest.mark.parametrize("mode", ["moe", "dipaco"])
def test_rounds_are_deterministic(corpus, mode: str) -> None:  # type: ignore[no-untyped-def]
    run = _run(mode)
    ds = prepare(corpus, run.model)
    digests = []
    for _ in range(2):
        sim = Simulation(run, ds, ["a", "b", "c"])
        stats = [sim.step(r) for r in range(2)]
        digests.append(state_digest(sim.params))
    assert digests[0] == digests[1]
    assert all(s.bytes_sent > 0 and s.payload_bits_per_param_step > 0 for s in stats)
    assert stats[-1].tokens == 3 * 2 * 2 * run.model.seq_len


def test_uncompressed_plain_average_and_baseline(corpus) -> None:  # type: ignore[no-untyped-def]
    run = dataclasses.replace(_run("dense"))
    ds = prepare(corpus, run.model)
    sim = Simulation(run, ds, ["a", "b"], compress=False)
    st = sim.step(0)
    assert st.payload_bits_per_param_step == pytest.approx(32 / run.inner.steps)
    base = Baseline(sim).step(0)
    assert base.payload_bits_per_param_step == 32.0 and base.eval_loss > 0


def test_epoch_assignments_with_per_round_batches(corpus) -> None:  # type: ignore[no-untyped-def]
    run = _run("dipaco")
    ds = prepare(corpus, run.model)
    sim = Simulation(run, ds, ["a", "b", "c"], epoch_rounds=3)
    a0, a1, a3 = sim.assignments(0), sim.assignments(1), sim.assignments(3)
    assert a0 == a1 and a0 == sim.assignments(2)
    # the same assignment, but each round draws its own batches
    assert not sim.batches(0, a0["a"]).equal(sim.batches(1, a1["a"]))
    assert a3 == Simulation(run, ds, ["a", "b", "c"]).assignments(3)
