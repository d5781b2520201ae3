"""Inner loop determinism, frozen modules and transcript replay."""

from __future__ import annotations

import pytest
import torch

from tests.training.training_fixtures import tiny_inner, tiny_model
from training.assignment import assign
from training.config import InnerConfig
from training.corpus import load_bundled_corpus
from training.data import miner_batches, prepare
from training.digest import part_digests, state_digest
from training.errors import ReplayError
from training.inner import REPLAY_REL_TOL, is_start_state, lr_at, replay_segment, states_close, train_inner
from training.model import build_model, param_state


@pytest.fixture(scope="module")
def corpus():  # type: ignore[no-untyped-def]
    return load_bundled_corpus()


def _setup(corpus, mode: str):  # type: ignore[no-untyped-def]
    cfg, inner = tiny_model(mode), tiny_inner()
    ds = prepare(corpus, cfg)
    a = assign(b"seed", ["m0", "m1"], cfg)["m0"]
    batches = miner_batches(ds, b"seed", a, inner.steps, inner.batch_size, cfg.seq_len)
    return cfg, inner, param_state(build_model(cfg)), a, batches


def test_deterministic_and_only_assigned_modules_move(corpus, mode: str) -> None:  # type: ignore[no-untyped-def]
    cfg, inner, theta, a, batches = _setup(corpus, mode)
    r1 = train_inner(cfg, inner, theta, a, batches, round=0)
    r2 = train_inner(cfg, inner, theta, a, batches, round=0)
    assert r1.transcript.parts == r2.transcript.parts
    assert r1.transcript.steps == [0, 2, 4, 6]
    assert state_digest(r1.params) == state_digest(r2.params)
    from training.model import module_params

    assert set(r1.params) == set(module_params(theta, a.module_ids))
    assert all(not torch.equal(r1.params[n], theta[n]) for n in r1.params if theta[n].dim() >= 2)
    r3 = train_inner(cfg, inner, theta, a, batches, round=1)
    assert r3.transcript.parts[-1] != r1.transcript.parts[-1]  # the schedule depends on the round
    assert r1.tokens == inner.steps * inner.batch_size * cfg.seq_len


def test_replay_matches_transcript(corpus) -> None:  # type: ignore[no-untyped-def]
    cfg, inner, theta, a, batches = _setup(corpus, "moe")
    res = train_inner(cfg, inner, theta, a, batches, round=0, keep_states=True)
    t = res.transcript
    assert is_start_state(t.states[0], theta)
    assert not is_start_state(t.states[2], theta)
    tampered = {
        **t.states[0],
        "exp_avg/head.out.weight": torch.ones_like(t.states[0]["exp_avg/head.out.weight"]),
    }
    assert not is_start_state(tampered, theta) and is_start_state(tampered, theta, fresh=False)
    for start in t.steps[:-1]:
        end = t.segment_end(start)
        state = replay_segment(cfg, inner, theta, a, batches, 0, t.states[start], end)
        assert part_digests(state) == t.parts[t.steps.index(end)]
        assert states_close(state, t.states[end])
    forged = dict(t.states[2])
    forged["param/head.out.weight"] = forged["param/head.out.weight"] * 1.01
    bad = replay_segment(cfg, inner, theta, a, batches, 0, forged, 4)
    assert part_digests(bad) != t.parts[2]
    assert not states_close(bad, t.states[4], REPLAY_REL_TOL)
    with pytest.raises(ReplayError):
        replay_segment(cfg, inner, theta, a, batches, 0, {"step": torch.tensor(0)}, 2)
    with pytest.raises(ReplayError):
        t.segment_end(6)


def test_lr_schedule() -> None:
    inner = tiny_inner()
    assert lr_at(inner, 0) == pytest.approx(inner.lr / 2)
    assert lr_at(inner, 1) == pytest.approx(inner.lr)
    assert lr_at(inner, 10_000) == pytest.approx(inner.lr * inner.min_lr_ratio)


def test_replay_exact_when_an_assigned_expert_routes_no_token(corpus) -> None:  # type: ignore[no-untyped-def]
    """Regression (F2): an expert with no token in a step must stay on the shared AdamW clock.

    Many experts, top-1 routing and one short sequence per step leave some assigned expert idle in some
    step; every transcript segment must still replay to the committed digest.
    """
    from dataclasses import replace

    cfg = replace(tiny_model("moe"), n_experts=16, top_k=1, seq_len=4)
    inner = InnerConfig(steps=8, batch_size=1, warmup_steps=2, total_steps=60, transcript_interval=1)
    ds = prepare(corpus, cfg)
    a = assign(b"seed", ["m0"], cfg)["m0"]
    batches = miner_batches(ds, b"seed", a, inner.steps, inner.batch_size, cfg.seq_len)
    theta = param_state(build_model(cfg))
    t = train_inner(cfg, inner, theta, a, batches, round=0, keep_states=True).transcript
    for start in t.steps[:-1]:
        end = t.segment_end(start)
        state = replay_segment(cfg, inner, theta, a, batches, 0, t.states[start], end)
        assert part_digests(state) == t.parts[t.steps.index(end)], f"segment {start}->{end}"


def test_kept_states_are_what_the_loop_restores_and_returns(corpus) -> None:  # type: ignore[no-untyped-def]
    """The step-0 state the loop keeps is ``start_state``'s own copy (digested while the steps run) and the
    result shares the step-H state's tensors: both must be bit for bit what a capture would hold, with a
    fresh optimizer, with carried moments, and with a carried ``adam_step`` of 0 (moments not restored)."""
    from training import inner as loop
    from training.snapshots import capture, restore

    cfg, inner, theta, a, batches = _setup(corpus, "moe")
    fresh = train_inner(cfg, inner, theta, a, batches, round=0, keep_states=True)
    carried = train_inner(
        cfg, inner, theta, a, batches, 1, keep_states=True, optimizer_state=fresh.optimizer_state
    )
    stale = {**fresh.optimizer_state, "adam_step": torch.tensor(0, dtype=torch.int64)}
    odd = train_inner(cfg, inner, theta, a, batches, 1, keep_states=True, optimizer_state=stale)
    for res, opt_state in ((fresh, None), (carried, fresh.optimizer_state), (odd, stale)):
        t = res.transcript
        assert [part_digests(t.states[s]) for s in t.steps] == t.parts
        _, params, opt = loop._setup(cfg, inner, theta, a, None, "cpu")
        restore(params, opt, loop.start_state(theta, list(params), opt_state))
        want = capture(params, opt, 0, int(t.states[0]["adam_step"]))
        assert state_digest(t.states[0]) == state_digest(want)
        final = t.states[inner.steps]
        assert all(res.params[n] is final[f"param/{n}"] for n in res.params)
        assert state_digest(res.optimizer_state) == state_digest(
            {k: v for k, v in final.items() if not k.startswith("param/") and k != "step"}
        )
    assert not bool(odd.transcript.states[0]["exp_avg/head.out.weight"].any())  # adam_step 0: fresh moments
    lean = train_inner(cfg, inner, theta, a, batches, 1, optimizer_state=fresh.optimizer_state)
    assert lean.transcript.states == {} and lean.transcript.parts == carried.transcript.parts
    assert state_digest(lean.params) == state_digest(carried.params)
