"""A small modular byte-level transformer whose parameters are grouped into named modules.

Module ids are stable strings, and every parameter name starts with its module id:

- ``embed``: token and position embeddings (``embed.tok.weight``, ``embed.pos.weight``);
- ``trunk.{i}``: block ``i``'s norms and attention, its MLP in ``dense`` mode and its router in ``moe``
  mode (``dense``/``moe`` modes);
- ``moe.{i}.expert.{e}``: expert ``e`` of layer ``i``'s mixture (``moe`` mode);
- ``path.{l}.{c}``: choice ``c`` of DiPaCo level ``l``, a whole block (``dipaco`` mode);
- ``head``: final norm and output projection.

MoE layers route each token to its ``top_k`` experts by a softmax router (gates renormalised over the
chosen experts) and add a Switch-style load-balancing loss ``n_experts * sum_e f_e * p_e``. A DiPaCo path
is a tuple with one choice per level; a forward pass runs one path for the whole batch.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from training.config import ModelConfig
from training.errors import ModuleIdError
from training.exact import canonical_normal

Path = tuple[int, ...]


class Attention(nn.Module):
    """Causal multi-head self-attention."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    """Two-layer GELU MLP (also one MoE expert)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.proj = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    """Pre-norm transformer block; in ``moe`` mode the MLP lives in ``moe.{i}`` and this holds the router."""

    def __init__(self, cfg: ModelConfig, routed: bool) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp: MLP | None = None if routed else MLP(cfg)
        self.router: nn.Linear | None = nn.Linear(cfg.d_model, cfg.n_experts, bias=False) if routed else None


class Experts(nn.Module):
    """The experts of one MoE layer (``moe.{i}.expert.{e}``)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.expert = nn.ModuleList(MLP(cfg) for _ in range(cfg.n_experts))


class Head(nn.Module):
    """Final norm and output projection (untied from the embedding so that modules stay disjoint)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)


class Embed(nn.Module):
    """Token and learned position embeddings."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)


class TesseraModel(nn.Module):
    """The modular transformer; ``forward(tokens, path)`` returns ``(logits, aux_loss)``."""

    def __init__(self, cfg: ModelConfig, seed: int = 0, init: bool = True) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = Embed(cfg)
        if cfg.mode == "dipaco":
            self.path = nn.ModuleList(
                nn.ModuleList(Block(cfg, routed=False) for _ in range(cfg.n_choices))
                for _ in range(cfg.n_layers)
            )
        else:
            self.trunk = nn.ModuleList(Block(cfg, routed=cfg.mode == "moe") for _ in range(cfg.n_layers))
            if cfg.mode == "moe":
                self.moe = nn.ModuleList(Experts(cfg) for _ in range(cfg.n_layers))
        self.head = Head(cfg)
        if init:
            self._init_weights(torch.Generator().manual_seed(seed))

    @torch.no_grad()
    def _init_weights(self, gen: torch.Generator) -> None:
        # canonical_normal, not nn.init.normal_: the latter's bits depend on the CPU's instruction set,
        # and every node rebuilds theta_0 from the seed and checks it against the on-chain digest.
        for name, p in self.named_parameters():
            if name.endswith("ln1.weight") or name.endswith("ln2.weight") or name.endswith("ln.weight"):
                nn.init.ones_(p)
            elif p.dim() == 1:
                nn.init.zeros_(p)
            else:
                std = 0.02 / math.sqrt(2 * self.cfg.n_layers) if name.endswith(".proj.weight") else 0.02
                p.copy_(canonical_normal(p.shape, gen, std))

    def _moe(self, layer: int, router: nn.Linear, x: Tensor) -> tuple[Tensor, Tensor]:
        cfg = self.cfg
        flat = x.reshape(-1, x.shape[-1])
        probs = F.softmax(router(flat), dim=-1)
        gate, idx = probs.topk(cfg.top_k, dim=-1)
        gate = gate / gate.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(flat)
        experts: nn.ModuleList = self.moe[layer].expert  # type: ignore[index,assignment]
        for e in range(cfg.n_experts):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            y = experts[e](flat[tok]) * gate[tok, slot].unsqueeze(-1)
            out = out.index_add(0, tok, y.to(out.dtype))  # a no-op in fp32; bf16 under autocast
        frac = F.one_hot(idx, cfg.n_experts).sum(dim=1).float().mean(dim=0) / cfg.top_k
        aux = cfg.n_experts * (frac * probs.mean(dim=0)).sum()
        return out.view_as(x), aux

    def forward(self, tokens: Tensor, path: Sequence[int] | None = None) -> tuple[Tensor, Tensor]:
        """Logits ``[B, T, vocab]`` and the load-balancing loss (0 outside ``moe`` mode)."""
        cfg = self.cfg
        t = tokens.shape[1]
        x = self.embed.tok(tokens) + self.embed.pos(torch.arange(t, device=tokens.device))
        aux = x.new_zeros(())
        if cfg.mode == "dipaco":
            if path is None or len(path) != cfg.n_layers:
                raise ModuleIdError("dipaco mode needs a path with one choice per level")
            blocks: list[Block] = [self.path[level][choice] for level, choice in enumerate(path)]  # type: ignore[index]
        else:
            blocks = list(self.trunk)  # type: ignore[arg-type]
        for i, blk in enumerate(blocks):
            x = x + blk.attn(blk.ln1(x))
            h = blk.ln2(x)
            if blk.router is not None:
                y, a = self._moe(i, blk.router, h)
                aux = aux + a / cfg.n_layers
                x = x + y
            else:
                assert blk.mlp is not None
                x = x + blk.mlp(h)
        return self.head.out(self.head.ln(x)), aux


def build_model(cfg: ModelConfig, seed: int = 0) -> TesseraModel:
    """A freshly initialised model; the same (cfg, seed) gives bit-identical weights on every machine."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # the layers' own default init draws here before being overwritten
        return TesseraModel(cfg, seed)


def model_holding(
    cfg: ModelConfig, state: Mapping[str, Tensor], device: str | torch.device = "cpu"
) -> TesseraModel:
    """A model on ``device`` holding ``state``, which must name every parameter: built on the meta device and
    filled from ``state``, without drawing an initialisation that ``state`` would overwrite (a third of a
    one-step replay's time at the devnet's size)."""
    with torch.device("meta"):
        shell = TesseraModel(cfg, init=False)
    names = {n for n, _ in shell.named_parameters()}
    if set(state) != names:
        raise ModuleIdError(
            f"a state for every parameter is needed: missing {sorted(names - set(state))[:3]}, "
            f"unknown {sorted(set(state) - names)[:3]}"
        )
    model = shell.to_empty(device=device)
    load_params(model, state)
    return model


def lm_loss(model: TesseraModel, batch: Tensor, path: Sequence[int] | None = None) -> tuple[Tensor, Tensor]:
    """Next-token cross-entropy of ``batch`` ``[B, T+1]`` and the total loss (plus weighted aux loss)."""
    logits, aux = model(batch[:, :-1], path)
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
    return ce, ce + model.cfg.aux_loss_coef * aux


def all_paths(cfg: ModelConfig) -> list[Path]:
    """Every DiPaCo path in a fixed order (lexicographic); ``[()]`` outside ``dipaco`` mode."""
    if cfg.mode != "dipaco":
        return [()]
    return [tuple(p) for p in itertools.product(range(cfg.n_choices), repeat=cfg.n_layers)]


def module_ids(cfg: ModelConfig) -> list[str]:
    """Every module id a config produces, in the model's canonical order."""
    ids = ["embed"]
    if cfg.mode == "dipaco":
        ids += [f"path.{lv}.{c}" for lv in range(cfg.n_layers) for c in range(cfg.n_choices)]
    else:
        ids += [f"trunk.{i}" for i in range(cfg.n_layers)]
        if cfg.mode == "moe":
            ids += [f"moe.{i}.expert.{e}" for i in range(cfg.n_layers) for e in range(cfg.n_experts)]
    return [*ids, "head"]


def shared_module_ids(cfg: ModelConfig) -> list[str]:
    """Modules every miner trains: ``embed``, ``head`` and, outside ``dipaco`` mode, the trunk."""
    return [m for m in module_ids(cfg) if not m.startswith(("moe.", "path."))]


def path_module_ids(path: Sequence[int]) -> list[str]:
    """Module ids of a DiPaCo path's level blocks."""
    return [f"path.{lv}.{c}" for lv, c in enumerate(path)]


_PREFIX_PARTS = {"embed": 1, "head": 1, "trunk": 2, "path": 3, "moe": 4}


def module_of(param_name: str) -> str:
    """The module id that owns a parameter name (``moe.1.expert.3.fc.weight`` -> ``moe.1.expert.3``)."""
    parts = param_name.split(".")
    n = _PREFIX_PARTS.get(parts[0])
    if n is None or len(parts) <= n:
        raise ModuleIdError(f"parameter {param_name!r} belongs to no module")
    return ".".join(parts[:n])


def module_params(state: Mapping[str, Tensor], modules: Sequence[str]) -> dict[str, Tensor]:
    """The entries of ``state`` that belong to ``modules`` (in ``state``'s order)."""
    wanted = set(modules)
    return {k: v for k, v in state.items() if module_of(k) in wanted}


def group_by_module(state: Mapping[str, Tensor]) -> dict[str, dict[str, Tensor]]:
    """``{module id: {param name: tensor}}`` of a flat state dict."""
    out: dict[str, dict[str, Tensor]] = {}
    for k, v in state.items():
        out.setdefault(module_of(k), {})[k] = v
    return out


def param_state(model: nn.Module) -> dict[str, Tensor]:
    """Detached copies of a model's parameters by name (the checkpoint theta)."""
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def load_params(model: nn.Module, state: Mapping[str, Tensor]) -> None:
    """Copy ``state`` into the model's parameters in place (names must all exist)."""
    params = dict(model.named_parameters())
    unknown = set(state) - set(params)
    if unknown:
        raise ModuleIdError(f"unknown parameters: {sorted(unknown)[:5]}")
    with torch.no_grad():
        for k, v in state.items():
            if params[k].shape != v.shape:
                raise ModuleIdError(f"shape of {k}: {tuple(v.shape)} != {tuple(params[k].shape)}")
            params[k].copy_(v)


def count_params(cfg: ModelConfig, modules: Sequence[str] | None = None) -> int:
    """Parameters of the model (or of ``modules``)."""
    state = param_state(build_model(cfg))
    if modules is not None:
        state = module_params(state, modules)
    return sum(v.numel() for v in state.values())
