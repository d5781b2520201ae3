"""DiLoCo: per-module pseudo-gradients, their weighted merge, and the outer Nesterov step.

The merge and the outer step are defined by IEEE-754 alone (``training.exact``: elementwise float64
operations in an order the code fixes, one rounding to fp32), so validators that merge the same accepted
updates get bit-identical checkpoints on any CPU instruction set, ARM or GPU:

- ``pseudo_gradient(base, local) = base - local`` for the trained parameters (a miner's delta);
- ``merge``: for each parameter, the weighted mean over the contributions that carry it (a module
  trained by nobody gets no update), summed in the order given;
- ``OuterOptimizer``: per parameter ``m = mu * m + g``; ``theta -= lr * (g + mu * m)`` (Nesterov) or
  ``theta -= lr * m``; with ``OuterConfig.plain_average()`` (lr 1, mu 0) theta becomes the plain average
  of the local models. Momentum buffers are part of the run's state (``state_dict``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from training.config import OuterConfig
from training.errors import MergeError
from training.exact import F64


def pseudo_gradient(base: Mapping[str, Tensor], local: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """``theta_r - theta_local`` for every parameter in ``local`` (fp32)."""
    out: dict[str, Tensor] = {}
    for name, t in local.items():
        if name not in base or base[name].shape != t.shape:
            raise MergeError(f"parameter {name!r} is not in the base checkpoint with that shape")
        out[name] = base[name].float() - t.float()
    return out


def merge(
    contributions: Sequence[tuple[float, Mapping[str, Tensor]]], mode: str = "mean"
) -> dict[str, Tensor]:
    """Per-parameter weighted mean over the contributions that include it, accumulated in the given order
    in float64 and rounded once to fp32 (the same bits on every machine).

    ``mode='sender_mean'`` divides each value by the weight of the contributions that are non-zero there
    (values nobody sent stay 0).
    """
    if mode not in ("mean", "sender_mean"):
        raise MergeError(f"unknown merge mode {mode!r}")
    sums: dict[str, Tensor] = {}
    weights: dict[str, float] = {}
    senders: dict[str, Tensor] = {}
    shapes: dict[str, torch.Size] = {}
    for w, delta in contributions:
        if not (w >= 0.0) or w == float("inf"):
            raise MergeError(f"bad contribution weight {w}")
        if w == 0.0:
            continue
        for name, t in delta.items():
            if name in shapes and shapes[name] != t.shape:
                raise MergeError(f"shape mismatch for {name!r}")
            if not bool(torch.isfinite(t).all()):
                raise MergeError(f"non-finite values in {name!r}")
            shapes[name] = t.shape
            term = t.detach().to("cpu", F64) * float(w)
            sums[name] = sums[name] + term if name in sums else term
            weights[name] = weights.get(name, 0.0) + float(w)
            if mode == "sender_mean":
                mask = (t != 0).to("cpu", F64) * float(w)
                senders[name] = senders[name] + mask if name in senders else mask
    if mode == "sender_mean":
        return {
            n: (sums[n] / torch.where(senders[n] > 0, senders[n], torch.ones_like(senders[n]))).float()
            for n in sums
        }
    return {name: (sums[name] / weights[name]).float() for name in sums}


class OuterOptimizer:
    """Nesterov (or heavy-ball, or none) momentum SGD on pseudo-gradients, per parameter."""

    def __init__(self, cfg: OuterConfig | None = None) -> None:
        self.cfg = cfg or OuterConfig()
        self.momentum: dict[str, Tensor] = {}

    def step(self, params: Mapping[str, Tensor], update: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """The next checkpoint: ``params`` with each parameter in ``update`` stepped (others unchanged)."""
        cfg = self.cfg
        out = {k: v.clone() for k, v in params.items()}
        for name in sorted(update):
            if name not in params or params[name].shape != update[name].shape:
                raise MergeError(f"update for unknown parameter or shape {name!r}")
            g = update[name].detach().to("cpu", F64)
            if cfg.momentum > 0:
                prev = self.momentum.get(name)
                # momentum is kept (and saved) in fp32; the step uses the rounded value, so a validator
                # that restarts from a saved checkpoint steps exactly like one that did not stop
                m = g.float() if prev is None else (prev.to(F64) * cfg.momentum + g).float()
                self.momentum[name] = m
                step = g + m.to(F64) * cfg.momentum if cfg.nesterov else m.to(F64)
            else:
                step = g
            base = params[name].detach().to("cpu", F64)
            out[name] = (base - step * cfg.lr).to(params[name].dtype)
        return out

    def state_dict(self) -> dict[str, Tensor]:
        """Momentum buffers as ``momentum/<name>`` (to save with the checkpoint)."""
        return {f"momentum/{k}": v.clone() for k, v in self.momentum.items()}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        """Restore buffers saved by :meth:`state_dict`."""
        self.momentum = {k.removeprefix("momentum/"): v.clone() for k, v in state.items()}
