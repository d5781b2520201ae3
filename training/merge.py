"""The merge: accepted pseudo-gradients -> robust per-module average -> outer step -> theta_{r+1}.

Validators merge with it; miners rebuild theta_{r+1} with it from theta_r, the on-chain consensus and the
accepted updates, and fetch the checkpoint only when their digest differs from the certified one.

Inputs come from the chain's consensus (miners with a positive consensus score, weighted by it), so every
honest validator merges the same set. Every operation is one whose result IEEE-754 defines (elementwise
float64 arithmetic in a fixed order: miners by ascending address, parameters by name; norms by a fixed
pairwise tree; sorting and selection; see ``training.exact`` and docs/decisions/reproducible-merge.md), so
validators on any CPU instruction set, ARM or GPU get bit-identical checkpoints and can co-sign their
digest.

Robustness, per parameter tensor over the miners that sent it:

- **norm clipping** (always): a contribution whose L2 norm exceeds ``clip_factor`` times the median
  norm of that tensor's contributions is scaled down to that bound, so one huge update cannot dominate;
- **mean** (default): the consensus-weighted mean of the clipped contributions (``training.diloco.merge``);
- **sender_mean**: the same mean, but each value divided by the weight of the miners that sent a non-zero
  value there (SparseLoCo's aggregation; sparse codecs' values are not shrunk by the miners that skipped
  the position);
- **trimmed_mean** (the Byzantine-robust option): coordinate-wise, drop the ``trim`` fraction of the
  largest and the smallest values, then average the rest (unweighted). With ``n`` contributors it
  tolerates ``floor(trim * n)`` arbitrary ones per coordinate; with fewer than 3 it falls back to the
  median (n = 2: the mean of the two).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from training.config import OuterConfig
from training.diloco import OuterOptimizer, merge
from training.errors import MergeError
from training.exact import F64, ieee_mode, l2_norm, sequential_sum

#: The merge methods :func:`robust_merge` implements.
MERGE_METHODS = ("mean", "sender_mean", "trimmed_mean")


@dataclass(frozen=True)
class MergePolicy:
    """How accepted updates are combined."""

    method: str = "mean"
    """``mean`` (score-weighted), ``sender_mean`` (score-weighted over the miners whose value is non-zero
    at each position: a sparse value one miner sent is not shrunk by those that sent nothing there) or
    ``trimmed_mean`` (coordinate-wise, Byzantine-robust)."""
    clip_factor: float = 2.0
    """Clip each contribution to this multiple of the median contribution norm (per tensor)."""
    trim: float = 0.2
    """Fraction trimmed at each end by ``trimmed_mean``."""


def clip_contributions(
    contribs: Sequence[tuple[float, str, Mapping[str, Tensor]]], factor: float
) -> list[tuple[float, dict[str, Tensor]]]:
    """(weight, pseudo-gradient) pairs, each tensor scaled down to ``factor`` times the median norm of
    that tensor's contributions where it exceeds it (in the order given)."""
    names = sorted({n for _, _, d in contribs for n in d})
    out: list[tuple[float, dict[str, Tensor]]] = [(w, dict(d)) for w, _, d in contribs]
    for name in names:
        idx = [i for i, (_, _, d) in enumerate(contribs) if name in d]
        norms = [l2_norm(contribs[i][2][name]) for i in idx]
        med = sorted(norms)[(len(norms) - 1) // 2]
        bound = factor * med
        for i, n in zip(idx, norms, strict=True):
            if n > bound > 0:
                out[i][1][name] = (contribs[i][2][name].to(F64) * (bound / n)).float()
    return out


def _trimmed(contribs: list[tuple[float, dict[str, Tensor]]], trim: float) -> dict[str, Tensor]:
    names = sorted({n for _, d in contribs for n in d})
    out: dict[str, Tensor] = {}
    for name in names:
        # + 0.0 turns -0.0 into +0.0: sorting kernels may order the two zeros either way
        stack = torch.stack([d[name].float() for _, d in contribs if name in d]) + 0.0
        n = stack.shape[0]
        k = int(math.floor(trim * n))
        if n >= 3 and k == 0:
            k = 1 if n >= 5 else 0
        if n >= 3 and k > 0 and n - 2 * k >= 1:
            srt = torch.sort(stack, dim=0).values
            kept = list(srt[k : n - k])
            out[name] = (sequential_sum(kept) / len(kept)).float()
        elif n >= 3:
            out[name] = torch.median(stack, dim=0).values  # a selection: one of the inputs, exactly
        else:
            out[name] = (sequential_sum(list(stack)) / n).float()
    return out


def robust_merge(
    contributions: Sequence[tuple[float, str, Mapping[str, Tensor]]], policy: MergePolicy
) -> dict[str, Tensor]:
    """Combine (weight, miner, pseudo-gradient) triples; ordered by miner address for reproducibility."""
    ordered = sorted(((float(w), m, d) for w, m, d in contributions if w > 0), key=lambda t: int(t[1], 16))
    if not ordered:
        return {}
    clipped = clip_contributions(ordered, policy.clip_factor)
    if policy.method in ("mean", "sender_mean"):
        return merge(clipped, policy.method)
    if policy.method == "trimmed_mean":
        return _trimmed(clipped, policy.trim)
    raise MergeError(f"unknown merge method {policy.method!r}")


def next_checkpoint(
    params: Mapping[str, Tensor],
    momentum: Mapping[str, Tensor],
    contributions: Sequence[tuple[float, str, Mapping[str, Tensor]]],
    outer: OuterConfig,
    policy: MergePolicy,
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """theta_{r+1} and the outer momentum after the merge (on the CPU; the same bits on every machine)."""
    with torch.no_grad(), ieee_mode():
        cpu = [
            (w, m, {k: v.detach().to("cpu", torch.float32) for k, v in d.items()})
            for w, m, d in contributions
        ]
        merged = robust_merge(cpu, policy)
        opt = OuterOptimizer(outer)
        opt.load_state_dict(momentum)
        try:
            new = opt.step({k: v.to("cpu") for k, v in params.items()}, merged)
        except Exception as exc:
            raise MergeError(f"outer step failed: {exc}") from exc
        return new, opt.state_dict()
