"""The modular model: module ids, ownership of parameters, determinism of init, forward shapes."""

from __future__ import annotations

import pytest
import torch

from tests.training.training_fixtures import tiny_model
from training.digest import state_digest
from training.errors import ModuleIdError
from training.model import (
    all_paths,
    build_model,
    group_by_module,
    lm_loss,
    model_holding,
    module_ids,
    module_of,
    param_state,
    shared_module_ids,
)
from training.modellayout import model_layout


def test_module_ids_per_mode() -> None:
    assert module_ids(tiny_model("dense")) == ["embed", "trunk.0", "trunk.1", "head"]
    moe = module_ids(tiny_model("moe"))
    assert moe[:3] == ["embed", "trunk.0", "trunk.1"] and moe[-1] == "head"
    assert [m for m in moe if m.startswith("moe.")] == [
        f"moe.{i}.expert.{e}" for i in range(2) for e in range(4)
    ]
    assert module_ids(tiny_model("dipaco")) == [
        "embed",
        "path.0.0",
        "path.0.1",
        "path.1.0",
        "path.1.1",
        "head",
    ]
    assert shared_module_ids(tiny_model("dipaco")) == ["embed", "head"]
    assert all_paths(tiny_model("dipaco")) == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_every_parameter_belongs_to_a_listed_module(mode: str) -> None:
    cfg = tiny_model(mode)
    groups = group_by_module(param_state(build_model(cfg)))
    assert list(groups) == module_ids(cfg)


def test_the_declared_layout_is_the_model_s(mode: str) -> None:
    """``training.modellayout`` declares exactly the parameters (names and shapes) the model builds."""
    cfg = tiny_model(mode)
    built = {
        m: {n: tuple(t.shape) for n, t in sorted(params.items())}
        for m, params in group_by_module(param_state(build_model(cfg))).items()
    }
    declared = {m: dict(sorted(params.items())) for m, params in model_layout(cfg).items()}
    assert list(declared) == list(built) and declared == built


def test_module_of() -> None:
    assert module_of("moe.1.expert.3.fc.weight") == "moe.1.expert.3"
    assert module_of("path.0.1.attn.qkv.weight") == "path.0.1"
    assert module_of("trunk.1.router.weight") == "trunk.1"
    for bad in ("bogus.weight", "moe.1", "embed"):
        with pytest.raises(ModuleIdError):
            module_of(bad)


def test_init_is_deterministic_and_seeded(mode: str) -> None:
    cfg = tiny_model(mode)
    a, b, c = (state_digest(param_state(build_model(cfg, s))) for s in (0, 0, 1))
    assert a == b != c


def test_forward_shapes_and_aux(mode: str) -> None:
    cfg = tiny_model(mode)
    model = build_model(cfg)
    tokens = torch.randint(0, 256, (3, cfg.seq_len + 1), generator=torch.Generator().manual_seed(0))
    path = (0, 1) if mode == "dipaco" else None
    logits, aux = model(tokens[:, :-1], path)
    assert logits.shape == (3, cfg.seq_len, 256)
    assert (float(aux.detach()) > 0) == (mode == "moe")
    ce, total = lm_loss(model, tokens, path)
    assert abs(float(ce.detach()) - 5.545) < 0.2  # ~ln(256) at init
    assert float(total.detach()) >= float(ce.detach())


def test_dipaco_needs_a_full_path() -> None:
    model = build_model(tiny_model("dipaco"))
    with pytest.raises(ModuleIdError):
        model(torch.zeros(1, 4, dtype=torch.long), (0,))


def test_moe_gradients_reach_only_routed_experts() -> None:
    cfg = tiny_model("moe")
    model = build_model(cfg)
    tokens = torch.randint(0, 256, (2, cfg.seq_len + 1), generator=torch.Generator().manual_seed(1))
    _, total = lm_loss(model, tokens)
    total.backward()
    touched = {
        n.split(".fc")[0].split(".proj")[0]
        for n, p in model.named_parameters()
        if n.startswith("moe.") and p.grad is not None
    }
    assert touched  # some experts got tokens


@pytest.mark.parametrize("mode", ["moe", "dipaco"])
def test_a_model_holding_a_state_is_the_initialised_model_with_it_loaded(mode: str) -> None:
    cfg = tiny_model(mode)
    theta = {k: v + 0.01 for k, v in param_state(build_model(cfg, seed=3)).items()}
    held = model_holding(cfg, theta)
    assert state_digest(param_state(held)) == state_digest(theta)
    ref = build_model(cfg)
    ref.load_state_dict(theta)
    batch = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len), generator=torch.Generator().manual_seed(0))
    path = all_paths(cfg)[0] if mode == "dipaco" else None
    assert torch.equal(lm_loss(held, batch, path)[0], lm_loss(ref, batch, path)[0])
    missing = dict(theta)
    missing.pop(next(iter(missing)))
    with pytest.raises(ModuleIdError, match="every parameter"):
        model_holding(cfg, missing)
    with pytest.raises(ModuleIdError, match="unknown"):
        model_holding(cfg, {**theta, "nope.weight": torch.zeros(1)})
