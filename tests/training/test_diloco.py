"""Pseudo-gradients, the merge and the outer step."""

from __future__ import annotations

import pytest
import torch

from training.config import OuterConfig
from training.diloco import OuterOptimizer, merge, pseudo_gradient
from training.errors import MergeError


def test_pseudo_gradient() -> None:
    base = {"a": torch.tensor([1.0, 2.0]), "b": torch.zeros(1)}
    d = pseudo_gradient(base, {"a": torch.tensor([0.5, 3.0])})
    assert list(d) == ["a"] and torch.equal(d["a"], torch.tensor([0.5, -1.0]))
    with pytest.raises(MergeError):
        pseudo_gradient(base, {"c": torch.zeros(1)})


def test_merge_weighted_per_parameter() -> None:
    m = merge(
        [(1.0, {"a": torch.tensor([2.0]), "b": torch.tensor([1.0])}), (3.0, {"a": torch.tensor([6.0])})]
    )
    assert torch.allclose(m["a"], torch.tensor([5.0])) and torch.equal(m["b"], torch.tensor([1.0]))


def test_sender_mean() -> None:
    m = merge(
        [(1.0, {"a": torch.tensor([2.0, 0.0, 0.0])}), (1.0, {"a": torch.tensor([4.0, 6.0, 0.0])})],
        "sender_mean",
    )
    assert torch.equal(m["a"], torch.tensor([3.0, 6.0, 0.0]))


def test_merge_rejects_bad_input() -> None:
    with pytest.raises(MergeError):
        merge([(1.0, {"a": torch.tensor([float("nan")])})])
    with pytest.raises(MergeError):
        merge([(1.0, {"a": torch.zeros(2)}), (1.0, {"a": torch.zeros(3)})])
    with pytest.raises(MergeError):
        merge([(-1.0, {"a": torch.zeros(2)})])


def test_nesterov_by_hand() -> None:
    opt = OuterOptimizer(OuterConfig(lr=0.5, momentum=0.9, nesterov=True))
    p = {"w": torch.tensor([1.0]), "frozen": torch.tensor([7.0])}
    p1 = opt.step(p, {"w": torch.tensor([0.2])})  # m=0.2, step=0.2+0.9*0.2=0.38
    assert torch.allclose(p1["w"], torch.tensor([1.0 - 0.5 * 0.38])) and torch.equal(
        p1["frozen"], p["frozen"]
    )
    p2 = opt.step(p1, {"w": torch.tensor([0.1])})  # m=0.28, step=0.1+0.252=0.352
    assert torch.allclose(p2["w"], p1["w"] - 0.5 * 0.352)
    saved = opt.state_dict()
    other = OuterOptimizer(opt.cfg)
    other.load_state_dict(saved)
    assert torch.equal(
        other.step(p2, {"w": torch.tensor([1.0])})["w"], opt.step(p2, {"w": torch.tensor([1.0])})["w"]
    )


def test_plain_average_is_fedavg() -> None:
    base = {"w": torch.tensor([1.0, 1.0])}
    locals_ = [torch.tensor([0.0, 2.0]), torch.tensor([1.0, 4.0])]
    upd = merge([(1.0, pseudo_gradient(base, {"w": x})) for x in locals_])
    new = OuterOptimizer(OuterConfig.plain_average()).step(base, upd)
    assert torch.allclose(new["w"], torch.tensor([0.5, 3.0]))
    assert OuterConfig().lr == 0.7 and OuterConfig().momentum == 0.9 and OuterConfig().nesterov
