"""Replaying transcript segments: one segment ``i`` -> ``i + 1`` from the served start state with the
miner's batches (``training.inner.replay_segment``), compared with the served end state bit for bit or
within ``param_rel_tol`` / ``replay_rel_tol``; and the re-check of a peer's slashing evidence (F8), which
replays the one segment it names."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from protocol.runspec import COMPUTE_LOCK
from protocol.wire.update import Update
from training.assignment import Assignment
from training.data import miner_batches
from training.digest import part_digests
from training.errors import TrainingError
from training.inner import replay_segment, states_close
from validator.context import FetchState, RoundContext, _Fail
from validator.policy import VerifyPolicy
from validator.stages import Stage
from validator.transcript import _States, _with_transcript


def _training_batches(ctx: RoundContext, a: Assignment) -> Tensor:
    """The batches the miner trained on (its assignment's, in the round's order)."""
    return miner_batches(
        ctx.dataset,
        ctx.assign_seed,
        a,
        ctx.spec.inner.steps,
        ctx.spec.inner.batch_size,
        ctx.spec.model.seq_len,
    )


def _sig(x: float) -> float:
    """``x`` to 4 significant digits (a metric: small honest differences must not round to 0)."""
    return float(f"{x:.4g}")


def _replay_one(
    ctx: RoundContext,
    a: Assignment,
    batches: Tensor,
    states: _States,
    policy: VerifyPolicy,
    i: int,
    ev: dict[str, Any],
) -> tuple[float, float]:
    """Replay transcript segment ``i`` (states ``i`` -> ``i + 1``); :class:`_Fail` (provable) if it fails.

    Returns the largest relative difference, per tensor, of the replay against the served end state:
    (parameters, moments and counters), 0 when the digests agree."""
    steps, pairs = states.steps, states.pairs
    start = states.get(i)
    try:
        with COMPUTE_LOCK:
            got = replay_segment(
                ctx.spec.model,
                ctx.spec.inner,
                ctx.checkpoint,
                a,
                batches,
                ctx.round,
                start,
                steps[i + 1],
                model=ctx.model(policy.device),
                device=policy.device,
            )
    except TrainingError as exc:
        raise _Fail(Stage.RECOMPUTE, f"segment {steps[i]}: {exc}", True, **ev, segment=steps[i]) from exc
    if states.matches(i + 1, got):
        return 0.0, 0.0  # bit for bit: the end state need not cross the wire (issue 13)
    end = states.get(i + 1)  # a different platform's rounding: compare within the tolerances
    if not _replay_matches(got, end, policy):
        worst = _worst_rel_diff(got, end)
        replayed = part_digests(got)
        raise _Fail(
            Stage.RECOMPUTE,
            f"segment {steps[i]}..{steps[i + 1]} does not replay",
            True,
            **ev,
            segment=[steps[i], steps[i + 1]],
            start_digest=list(pairs[i]),
            claimed=list(pairs[i + 1]),
            replayed=[replayed[0].hex(), replayed[1].hex()],
            worst_tensor=worst[0],
            worst_rel_diff=worst[1],
        )
    return replay_differences(got, end)


def recheck_segment(
    ctx: RoundContext,
    miner: str,
    update: Update,
    fetch_state: FetchState,
    policy: VerifyPolicy,
    segment_start: int,
) -> tuple[bool | None, str]:
    """Re-run another validator's slashing evidence: the replay of the transcript segment that starts at
    inner step ``segment_start`` of ``update`` (whose bytes the caller checked against the commitment).

    Returns ``(True, reason)`` if the segment provably fails (the anchor or the replay), ``(False, "")`` if
    it replays, ``(None, reason)`` if it cannot be decided (a state not served, a segment the transcript
    does not have): vote only on ``True``.
    """
    steps = list(update.header.transcript_steps)
    if miner not in ctx.registry or segment_start not in steps[:-1]:
        return None, f"no segment starts at step {segment_start}"
    i = steps.index(segment_start)
    a = ctx.assignment(miner)
    try:
        states = _States(_with_transcript(update, fetch_state), fetch_state)
        _replay_one(ctx, a, _training_batches(ctx, a), states, policy, i, {})
    except _Fail as f:
        return (True if f.provable else None), f.reason
    return False, ""


def _replay_matches(got: Mapping[str, Tensor], served: Mapping[str, Tensor], policy: VerifyPolicy) -> bool:
    """Moments and counters within ``replay_rel_tol``, parameters within ``param_rel_tol``."""
    if set(got) != set(served):
        return False
    params = {k: v for k, v in got.items() if k.startswith("param/")}
    others = {k: v for k, v in got.items() if not k.startswith("param/")}
    return states_close(others, {k: served[k] for k in others}, policy.replay_rel_tol) and states_close(
        params, {k: served[k] for k in params}, policy.param_rel_tol
    )


def replay_differences(got: Mapping[str, Tensor], served: Mapping[str, Tensor]) -> tuple[float, float]:
    """The largest per-tensor relative L2 difference of a replayed state against the served one, as
    ``(parameters, moments and counters)``: what ``param_rel_tol`` and ``replay_rel_tol`` bound."""
    params = {k for k in got if k.startswith("param/")}
    d_param = _worst_rel_diff({k: got[k] for k in params}, {k: served[k] for k in params if k in served})
    d_other = _worst_rel_diff(
        {k: v for k, v in got.items() if k not in params},
        {k: v for k, v in served.items() if not k.startswith("param/")},
    )
    return d_param[1], d_other[1]


def _worst_rel_diff(a: Mapping[str, Tensor], b: Mapping[str, Tensor]) -> tuple[str, float]:
    """The tensor of ``a`` furthest from ``b`` in relative L2 (names missing in either count as inf)."""
    worst = ("", 0.0)
    for k in sorted(set(a) | set(b)):
        if k not in a or k not in b or a[k].shape != b[k].shape:
            return (k, math.inf)
        x, y = a[k].double(), b[k].double()
        d = float(torch.linalg.vector_norm(x - y)) / max(float(torch.linalg.vector_norm(y)), 1e-12)
        if d > worst[1]:
            worst = (k, d)
    return worst
