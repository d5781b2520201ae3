"""The ``recompute`` stage: the transcript anchors at theta_r, the update is exactly what the codec makes
of the final state plus the miner's error feedback (F12, ``validator.errorfeedback``), and seed-chosen
segments replay (``validator.replay``, which also re-checks a peer's slashing evidence, F8). The
transcript's states are read through ``validator.transcript``. ``recheck_segment`` and
``replay_differences`` are re-exported from ``validator.replay``."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from torch import Tensor

from protocol.wire.update import Update
from training.assignment import Assignment
from training.digest import PARAM_PREFIX, state_digest
from training.model import module_of
from validator.context import (
    FetchSource,
    FetchState,
    KeepResidual,
    RoundContext,
    Verdict,
    _Fail,
)
from validator.errorfeedback import _check_error_feedback
from validator.policy import VerifyPolicy
from validator.replay import _replay_one, _sig, _training_batches, recheck_segment, replay_differences
from validator.sampling import segments_to_check, validator_slot
from validator.stages import Stage
from validator.transcript import _States, _with_transcript

log = logging.getLogger(__name__)

__all__ = ["_recompute", "recheck_segment", "replay_differences"]


def _recompute(
    ctx: RoundContext,
    v: Verdict,
    a: Assignment,
    update: Update,
    delta: Mapping[str, Tensor],
    fetch_state: FetchState,
    fetch_source: FetchSource | None,
    policy: VerifyPolicy,
    segments: int,
    ev: dict[str, Any],
    out_of_time: Callable[[], bool] | None = None,
    *,
    keep_residual: KeepResidual | None = None,
) -> None:
    """The stage: the anchor, the final state, the error feedback (``validator.errorfeedback``), then
    ``segments`` seed-chosen segment replays (``validator.replay``)."""
    update = _with_transcript(update, fetch_state)
    states = _States(update, fetch_state)
    final = _anchored_final(ctx, a, states, ev)
    _final_cosine(ctx, v, delta, final, policy, ev)
    _check_error_feedback(ctx, v, update, delta, final, fetch_state, fetch_source, policy, ev, keep_residual)
    if segments <= 0:
        v.evidence["segments"] = []
        return
    _replay_segments(ctx, v, a, states, policy, segments, ev, out_of_time)


def _anchored_final(
    ctx: RoundContext, a: Assignment, states: _States, ev: dict[str, Any]
) -> dict[str, Tensor]:
    """The transcript's final parameters, once its step-0 parameters are exactly theta_r's (the moments are
    the miner's choice): their digest is checked against theta_r's without fetching anything, and a
    mismatch is provable (issue 13). The update is checked against the final parameters, not its moments."""
    mods = set(a.module_ids)
    theta = {f"{PARAM_PREFIX}{n}": ctx.checkpoint[n] for n in ctx.checkpoint if module_of(n) in mods}
    if state_digest(theta).hex() != states.pairs[0][0]:
        raise _Fail(Stage.RECOMPUTE, "transcript does not start at the checkpoint", True, **ev, step=0)
    states.params[0] = theta
    final = states.params_of(len(states.steps) - 1)
    if set(final) != set(theta) or any(
        final[k].shape != t.shape or final[k].dtype != t.dtype for k, t in theta.items()
    ):
        raise _Fail(Stage.RECOMPUTE, "the final state does not hold the assigned parameters", True, **ev)
    return final


def _final_cosine(
    ctx: RoundContext,
    v: Verdict,
    delta: Mapping[str, Tensor],
    final: Mapping[str, Tensor],
    policy: VerifyPolicy,
    ev: dict[str, Any],
) -> None:
    """The cosine of the update and theta_r minus the final parameters on the update's support (top-k
    codecs send few coordinates, error feedback shifts them), at least ``min_final_cosine``."""
    num = den_a = den_b = 0.0
    for name, d in delta.items():
        true = ctx.checkpoint[name].double() - final[f"param/{name}"].double()
        mask = d != 0
        dd, tt = d.double()[mask], true[mask]
        num += float((dd * tt).sum())
        den_a += float(dd.pow(2).sum())
        den_b += float(tt.pow(2).sum())
    cos = num / max(math.sqrt(den_a * den_b), 1e-30)
    v.metrics["final_cosine"] = round(cos, 6)
    if cos < policy.min_final_cosine:
        raise _Fail(Stage.RECOMPUTE, f"update is unrelated to the transcript (cosine {cos:.3f})", True, **ev)


def _replay_segments(
    ctx: RoundContext,
    v: Verdict,
    a: Assignment,
    states: _States,
    policy: VerifyPolicy,
    segments: int,
    ev: dict[str, Any],
    out_of_time: Callable[[], bool] | None,
) -> None:
    """Replay this validator's window of the seed-chosen segments (``validator.sampling``), asking
    ``out_of_time`` before each; the largest differences go to the verdict's metrics."""
    steps = states.steps
    segs = segments_to_check(
        ctx.seed,
        v.miner,
        len(steps) - 1,
        segments,
        ctx.validator.encode(),
        slot=validator_slot(ctx.validator, ctx.validators),
    )
    v.evidence["segments"] = [steps[i] for i in segs]
    batches = _training_batches(ctx, a)
    replayed_steps = 0
    worst_param = worst_moment = 0.0
    for i in segs:
        if out_of_time is not None and out_of_time():
            raise _Fail(
                Stage.BUDGET, f"verification budget exhausted before replaying step {steps[i]}", False
            )
        t_fetch = time.perf_counter()
        states.get(i)  # the start state (cached for the replay): its fetch is timed apart
        t0, cpu0 = time.perf_counter(), time.thread_time()
        v.metrics["fetch_seconds"] = v.metrics.get("fetch_seconds", 0.0) + t0 - t_fetch
        d_param, d_moment = _replay_one(ctx, a, batches, states, policy, i, ev)
        worst_param, worst_moment = max(worst_param, d_param), max(worst_moment, d_moment)
        replayed_steps += steps[i + 1] - steps[i]
        v.metrics["replay_seconds"] = v.metrics.get("replay_seconds", 0.0) + time.perf_counter() - t0
        v.metrics["replay_cpu_seconds"] = v.metrics.get("replay_cpu_seconds", 0.0) + time.thread_time() - cpu0
    v.metrics["replayed_steps"] = replayed_steps
    v.metrics["replay_param_rel_diff"] = _sig(worst_param)
    v.metrics["replay_moment_rel_diff"] = _sig(worst_moment)
