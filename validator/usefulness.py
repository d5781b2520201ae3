"""The ``usefulness`` stage and held-out evaluation: how much an update lowers the loss, on the miner's own
scoring windows and on held-out ones, with the update rescaled so that its size cannot buy a score."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from protocol.rounds.coordinator import SCORE_SCALE
from protocol.runspec import RunSpec
from training.assignment import Assignment
from training.data import Dataset, batch_offsets, eval_windows, scoring_batches
from training.model import all_paths, lm_loss, load_params, model_holding
from validator.context import RoundContext, Verdict
from validator.policy import VerifyPolicy


def _loss(model: torch.nn.Module, params: Mapping[str, Tensor], batches: Tensor, path: Any) -> float:
    """Mean loss of ``batches`` (CPU) under ``params`` (CPU), computed where ``model`` lives."""
    load_params(model, params)
    return _loss_as_loaded(model, batches, path)


def _loss_as_loaded(model: torch.nn.Module, batches: Tensor, path: Any) -> float:
    """Mean loss of ``batches`` under the parameters ``model`` holds. ``inference_mode`` rather than
    ``no_grad``: the same kernels and bits, without the autograd bookkeeping (about 5% of a forward)."""
    model.eval()
    dev = next(model.parameters()).device
    with torch.inference_mode():
        vals = [float(lm_loss(model, b.to(dev), path)[0]) for b in batches]  # type: ignore[arg-type]
    return sum(vals) / max(1, len(vals))


def _two_losses_as_loaded(model: torch.nn.Module, a: Tensor, b: Tensor, path: Any) -> tuple[float, float]:
    """``(_loss_as_loaded(a), _loss_as_loaded(b))``, in one forward pass when each is one batch of
    windows of one length: the model is per token (top-k routing, no capacity), so stacking the windows
    changes no token's loss, and one pass of 2B windows costs about 1.6x one of B, not 2x."""
    if a.shape[0] != 1 or b.shape[0] != 1 or a.shape[2] != b.shape[2]:
        return _loss_as_loaded(model, a, path), _loss_as_loaded(model, b, path)
    model.eval()
    dev = next(model.parameters()).device
    both = torch.cat([a[0], b[0]]).to(dev)
    with torch.inference_mode():
        logits, _aux = model(both[:, :-1], path)
        ce = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), both[:, 1:].reshape(-1), reduction="none"
        ).view(both.shape[0], -1)
    n = a.shape[1]
    return float(ce[:n].mean()), float(ce[n:].mean())


def _apply(base: Mapping[str, Tensor], delta: Mapping[str, Tensor]) -> dict[str, Tensor]:
    out = dict(base)
    for k, d in delta.items():
        out[k] = base[k] - d
    return out


def _normalised(
    checkpoint: Mapping[str, Tensor], delta: Mapping[str, Tensor], rel_norm: float
) -> dict[str, Tensor]:
    """``delta`` rescaled (up or down, one factor for the whole update) to ``rel_norm`` times the norm of
    the weights it touches (F9).

    Why a fixed reference norm, rescaling both ways, rather than clipping to the merge's bound (or to the
    round's median norm): clipping only shrinks, so an update under the bound still gains by being scaled
    up to it, and a per-round median is not known while miners are verified one at a time (and a
    cheater's own norm moves it). With one global factor the module proportions (the update's direction)
    are kept and the score is a function of the direction alone: a scaled copy scores as the original.
    The merge still clips the real contribution to ``clip_factor`` x the median (``training.merge``).
    """
    dn = sum(float(d.double().pow(2).sum()) for d in delta.values())
    wn = sum(float(checkpoint[k].double().pow(2).sum()) for k in delta)
    if rel_norm <= 0 or dn <= 0 or wn <= 0:
        return dict(delta)
    factor = rel_norm * math.sqrt(wn) / math.sqrt(dn)
    return {k: (d.double() * factor).to(d.dtype) for k, d in delta.items()}


def score_usefulness(
    ctx: RoundContext, v: Verdict, a: Assignment, delta: Mapping[str, Tensor], policy: VerifyPolicy
) -> None:
    """The stage: ``v``'s score from the relative loss drop of ``delta`` (rescaled, F9) on the miner's own
    seed-chosen windows, scaled down when the held-out gain exceeds it by more than ``max_heldout_excess``;
    its losses and gains go to ``v.metrics``."""
    spec = ctx.spec
    t0 = time.perf_counter()
    model = ctx.model(policy.device)
    # Scored on windows of the miner's shard that the round seed picks (fixed only after the commits
    # closed) and that it did not train on: not on batches it knew when it committed.
    trained = batch_offsets(
        ctx.dataset, ctx.assign_seed, a, spec.inner.steps, spec.inner.batch_size, spec.model.seq_len
    )
    own = scoring_batches(
        ctx.dataset,
        ctx.seed,
        a,
        trained,
        max(1, policy.eval_own_batches),
        spec.inner.batch_size,
        spec.model.seq_len,
    )
    after = _apply(ctx.checkpoint, _normalised(ctx.checkpoint, delta, policy.usefulness_rel_norm))
    # theta_r is loaded once, for both "before" losses; then only the parameters the update moves (the
    # rest of ``after`` is theta_r), for both "after" losses: two loads, not four
    own_before = _loss(model, ctx.checkpoint, own, a.path)
    key = a.shard if a.path is not None else -1
    if key not in ctx.heldout:
        stream = ctx.dataset.path_heldout[a.shard] if a.path is not None else ctx.dataset.heldout
        windows = eval_windows(stream, spec.model.seq_len, policy.heldout_windows).unsqueeze(0)
        ctx.heldout[key] = (windows, _loss_as_loaded(model, windows, a.path))
    held, held_before = ctx.heldout[key]
    load_params(model, {k: after[k] for k in delta})
    own_after, held_after = _two_losses_as_loaded(model, own, held, a.path)
    g_own = (own_before - own_after) / max(own_before, 1e-9)
    g_held = (held_before - held_after) / max(held_before, 1e-9)
    v.metrics.update(
        own_before=round(own_before, 6),
        own_after=round(own_after, 6),
        heldout_before=round(held_before, 6),
        heldout_after=round(held_after, 6),
        own_gain=round(g_own, 6),
        heldout_gain=round(g_held, 6),
    )
    v.metrics["eval_seconds"] = time.perf_counter() - t0
    if not g_own > policy.min_own_gain:
        v.score = 0
        return
    s = min(1.0, g_own)
    if g_held > g_own + policy.max_heldout_excess and g_held > 0:
        s *= max(0.0, g_own / g_held)
    v.score = max(1, int(s * SCORE_SCALE))


def heldout_loss(
    spec: RunSpec, ds: Dataset, params: Mapping[str, Tensor], windows: int = 32, device: str = "cpu"
) -> float:
    """Held-out loss of a full checkpoint (DiPaCo: the mean over paths of each path's held-out stream),
    computed on ``device``."""
    model = model_holding(spec.model, params, device)
    if spec.model.mode == "dipaco":
        vals = []
        for i, path in enumerate(all_paths(spec.model)):
            stream = ds.path_heldout[i]
            if stream.numel() > spec.model.seq_len + 1:
                w = eval_windows(stream, spec.model.seq_len, windows).unsqueeze(0)
                vals.append(_loss(model, params, w, path))
        return sum(vals) / max(1, len(vals))
    w = eval_windows(ds.heldout, spec.model.seq_len, windows).unsqueeze(0)
    return _loss(model, params, w, None)
