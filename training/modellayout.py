"""The model's parameter layout, declared once: each kind of module's parameters as (name suffix, shape in
the model's dimensions).

``training.model`` builds these parameters (``tests/training/test_model.py`` holds the two equal for every
mode), ``training.presets.module_param_counts`` counts them, and the update header
(``protocol.wire.updateheader``) derives every parameter's name and shape from a module id and the
dimensions of :data:`DIMS`, so a new parameter is one line here and one in the model.

A shape is a tuple of :data:`Dim` ``(multiplier, dimension name)``: ``((3, "d_model"), (1, "d_model"))``
is ``[3 * d_model, d_model]``. Module kinds (``training.model``'s module doc): ``embed``, ``head``,
``trunk.{i}`` (a block: attention, and an MLP or, when ``routed``, the router of its MoE layer),
``moe.{i}.expert.{e}`` (an MLP) and ``path.{l}.{c}`` (a DiPaCo block: attention and an MLP).
"""

from __future__ import annotations

from training.config import ModelConfig
from training.model import module_ids

DIMS = ("vocab", "seq_len", "d_model", "d_ff", "n_experts")
"""The model dimensions a shape is written in (and, in this order, an update header's ``dims``)."""

Dim = tuple[int, str]
"""``(multiplier, dimension name)``: one side of a parameter's shape."""
Template = tuple[tuple[str, tuple[Dim, ...]], ...]
"""A module's parameters: ``(name suffix, shape)`` each, sorted by suffix."""

ATTENTION: Template = (
    ("attn.proj.weight", ((1, "d_model"), (1, "d_model"))),
    ("attn.qkv.weight", ((3, "d_model"), (1, "d_model"))),
    ("ln1.bias", ((1, "d_model"),)),
    ("ln1.weight", ((1, "d_model"),)),
    ("ln2.bias", ((1, "d_model"),)),
    ("ln2.weight", ((1, "d_model"),)),
)
"""A block's norms and attention (``training.model.Block``, less its MLP or router)."""
MLP: Template = (
    ("fc.weight", ((1, "d_ff"), (1, "d_model"))),
    ("proj.weight", ((1, "d_model"), (1, "d_ff"))),
)
"""An MLP (``training.model.MLP``): a block's, or one MoE expert."""
ROUTER: Template = (("router.weight", ((1, "n_experts"), (1, "d_model"))),)
"""A routed block's router (``moe`` mode)."""
EMBED: Template = (
    ("pos.weight", ((1, "seq_len"), (1, "d_model"))),
    ("tok.weight", ((1, "vocab"), (1, "d_model"))),
)
"""Token and position embeddings (``training.model.Embed``)."""
HEAD: Template = (
    ("ln.bias", ((1, "d_model"),)),
    ("ln.weight", ((1, "d_model"),)),
    ("out.weight", ((1, "vocab"), (1, "d_model"))),
)
"""Final norm and output projection (``training.model.Head``)."""


def module_template(module: str, routed: bool) -> Template:
    """The parameters of module ``module`` (an id of ``training.model.module_ids``, or any id of its
    kind); ``routed``: a trunk block has a router instead of an MLP (``moe`` mode)."""
    kind = module.split(".")[0]
    if kind == "embed":
        return EMBED
    if kind == "head":
        return HEAD
    if kind == "moe":
        return MLP
    if kind == "trunk" and routed:
        return ATTENTION + ROUTER
    return ATTENTION + tuple((f"mlp.{suffix}", shape) for suffix, shape in MLP)


def model_dims(cfg: ModelConfig) -> dict[str, int]:
    """The size of each of :data:`DIMS` in a model of ``cfg`` (``n_experts`` 0 outside ``moe`` mode: no
    router)."""
    return {
        "vocab": cfg.vocab_size,
        "seq_len": cfg.seq_len,
        "d_model": cfg.d_model,
        "d_ff": cfg.d_ff,
        "n_experts": cfg.n_experts if cfg.mode == "moe" else 0,
    }


def sized(template: Template, dims: dict[str, int]) -> dict[str, tuple[int, ...]]:
    """``template``'s shapes under ``dims``, by name suffix."""
    return {suffix: tuple(k * dims[d] for k, d in shape) for suffix, shape in template}


def model_layout(cfg: ModelConfig) -> dict[str, dict[str, tuple[int, ...]]]:
    """Every module of a model of ``cfg`` (in ``training.model.module_ids``'s order) with its parameters'
    full names and shapes: the names and shapes ``training.model.build_model`` gives them."""
    dims = model_dims(cfg)
    routed = cfg.mode == "moe"
    return {
        m: {f"{m}.{suffix}": shape for suffix, shape in sized(module_template(m, routed), dims).items()}
        for m in module_ids(cfg)
    }
