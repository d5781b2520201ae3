"""state_digest: canonical over names, dtypes, shapes and bytes."""

from __future__ import annotations

import torch

from training.digest import state_digest


def test_order_independent_and_sensitive() -> None:
    a = {"x": torch.arange(6, dtype=torch.float32).view(2, 3), "y": torch.ones(2)}
    assert state_digest(a) == state_digest(dict(reversed(list(a.items()))))
    assert len(state_digest(a)) == 32
    variants = [
        {"x": a["x"].view(3, 2), "y": a["y"]},
        {"x": a["x"].double(), "y": a["y"]},
        {"x": a["x"], "z": a["y"]},
        {"x": a["x"], "y": torch.tensor([1.0, 1.0 + 2**-23])},
        {"x": a["x"]},
    ]
    assert len({state_digest(v) for v in variants} | {state_digest(a)}) == len(variants) + 1


def test_strides_do_not_matter() -> None:
    x = torch.arange(12, dtype=torch.float32).view(3, 4)
    assert state_digest({"x": x.t().contiguous().t()}) == state_digest({"x": x})
    assert state_digest({"x": x.t()}) == state_digest({"x": x.t().contiguous()})
