"""Named model presets, from the devnet's tiny model to the sizes a GPU miner would train, and what one
costs a miner and a validator: parameter counts, memory, time per inner step and per round.

A preset fixes the model's shape (in ``moe`` and ``dipaco`` mode; ``dense`` takes the ``moe`` shape
without experts) and the inner loop's batch size and learning rate; ``tessera runspec init --preset``
writes it into a run file, ``tessera runspec estimate`` prints :func:`estimate` for a preset or a run
file. The names give the total parameters with byte-level tokens (vocabulary 256); a BPE vocabulary adds
``2 * vocab_size * d_model`` (embedding and output projection).

Memory is counted in fp32 (the training core's only dtype) from the parameter counts and the
activations one forward pass saves for its backward pass (measured with
``torch.autograd.graph.saved_tensors_hooks`` at batch 1 and scaled by the batch size).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from training.assignment import assign
from training.config import InnerConfig, ModelConfig, to_dict
from training.errors import ConfigError
from training.model import TesseraModel, all_paths, lm_loss, module_params
from training.modellayout import model_layout


@dataclass(frozen=True)
class Preset:
    """A model shape per mode and the inner loop's batch and learning rate."""

    name: str
    moe: ModelConfig
    dipaco: ModelConfig
    batch_size: int
    lr: float
    note: str

    def model(self, mode: str = "moe", vocab_size: int = 256) -> ModelConfig:
        """The preset's model config in ``mode`` with ``vocab_size`` tokens."""
        if mode == "dipaco":
            return replace(self.dipaco, vocab_size=vocab_size)
        if mode in ("moe", "dense"):
            return replace(self.moe, mode=mode, vocab_size=vocab_size)  # type: ignore[arg-type]
        raise ConfigError(f"unknown model mode {mode!r}")

    def inner(self, base: InnerConfig | None = None) -> InnerConfig:
        """``base`` (default: the recipe's, :meth:`InnerConfig.recipe`) with the preset's batch size and
        learning rate."""
        return replace(base or InnerConfig.recipe(), batch_size=self.batch_size, lr=self.lr)


def _m(mode: str, d: int, layers: int, ff: int, heads: int, seq: int) -> ModelConfig:
    return ModelConfig(mode=mode, d_model=d, n_layers=layers, d_ff=ff, n_heads=heads, seq_len=seq)  # type: ignore[arg-type]


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("tiny", ModelConfig(), ModelConfig(mode="dipaco"), 8, 3e-3, "the devnet's default (CPU)"),
        Preset("1m", _m("moe", 128, 4, 256, 4, 128), _m("dipaco", 128, 4, 256, 4, 128), 8, 2e-3, "CPU"),
        Preset(
            "10m", _m("moe", 256, 6, 768, 4, 256), _m("dipaco", 256, 6, 1024, 4, 256), 8, 1e-3, "CPU or GPU"
        ),
        Preset("50m", _m("moe", 512, 8, 1280, 8, 512), _m("dipaco", 512, 8, 2048, 8, 512), 8, 6e-4, "GPU"),
        Preset(
            "125m",
            _m("moe", 768, 12, 1280, 12, 1024),
            _m("dipaco", 768, 12, 1792, 12, 1024),
            8,
            6e-4,
            "GPU (GPT-2 small's width and depth)",
        ),
    )
}


def get_preset(name: str) -> Preset:
    """The preset called ``name``; :class:`ConfigError` naming the choices otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}") from None


def preset_of(cfg: ModelConfig) -> str | None:
    """The name of the preset whose shape ``cfg`` has (any vocabulary), or None."""
    for p in PRESETS.values():
        if p.model(cfg.mode, cfg.vocab_size) == cfg:
            return p.name
    return None


def module_param_counts(cfg: ModelConfig) -> dict[str, int]:
    """Parameters of each module id (``training.model.module_ids``), from the shapes alone (the layout
    ``training.modellayout`` declares)."""
    return {m: sum(math.prod(s) for s in params.values()) for m, params in model_layout(cfg).items()}


def trained_params_per_miner(cfg: ModelConfig, experts_per_miner: int | None = None) -> tuple[int, list[str]]:
    """Parameters one miner trains a round (its assignment's modules, from the shapes alone) and those
    modules' ids; every miner's assignment has the same size."""
    counts = module_param_counts(cfg)
    a = assign(b"\0" * 32, ["miner"], cfg, experts_per_miner)["miner"]
    return sum(counts[m] for m in a.module_ids), list(a.module_ids)


def fast_model(cfg: ModelConfig) -> Any:
    """A model of shape ``cfg`` with torch's default initialisation instead of the canonical one (seconds
    instead of tens of seconds at 125M): for timing and memory only, never for a run."""

    class _Timed(TesseraModel):
        def _init_weights(self, gen: torch.Generator) -> None:
            return None

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return _Timed(cfg)


def saved_activation_bytes(model: Any, batch: torch.Tensor, path: Any = None) -> int:
    """Bytes of the tensors one forward pass of ``batch`` saves for backward (each storage counted once;
    parameters excluded)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _, loss = lm_loss(model, batch, path)
    del loss
    return sum(seen.values())


def estimate(
    cfg: ModelConfig,
    inner: InnerConfig,
    experts_per_miner: int | None = None,
    *,
    time_steps: int = 2,
    time_batch: int | None = None,
    device: str = "cpu",
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Parameters, memory (bytes, fp32) per miner and validator, and the time of one inner step (measured
    over ``time_steps`` AdamW steps after two warm-up steps, at ``time_batch`` sequences, default the run's
    batch, scaled to it) and of a round (H steps); ``time_steps`` 0 skips the timing.

    Miner: the whole model (frozen modules take part in the forward pass), gradients and AdamW's two
    moments of its trained modules, the activations, and the transcript states it keeps to serve
    (trained parameters and moments every ``transcript_interval`` steps and at H). Validator: theta_r,
    the outer momentum and the merged next checkpoint, plus one miner's replay of a segment (a model,
    gradients and moments, activations, and the segment's start and end states).
    """
    total = sum(module_param_counts(cfg).values())
    trained, module_ids = trained_params_per_miner(cfg, experts_per_miner)
    a = assign(b"\0" * 32, ["miner"], cfg, experts_per_miner)["miner"]
    path = a.path if cfg.mode == "dipaco" else None
    model = fast_model(cfg).to(device)
    B, T = inner.batch_size, cfg.seq_len
    one = torch.randint(1, cfg.vocab_size, (1, T + 1), generator=torch.Generator().manual_seed(0)).to(device)
    act = saved_activation_bytes(model, one, path) * B
    miner, validator = _memory_bytes(inner, total, trained, act)
    out: dict[str, Any] = {
        "model": to_dict(cfg),
        "preset": preset_of(cfg),
        "batch_size": B,
        "seq_len": T,
        "inner_steps": inner.steps,
        "params_total": total,
        "params_trained_per_miner": trained,
        "modules_per_miner": module_ids,
        "paths": len(all_paths(cfg)) if cfg.mode == "dipaco" else None,
        "miner_bytes": miner | {"total": sum(miner.values())},
        "validator_bytes": validator | {"total": sum(validator.values())},
        "device": device,
    }
    if time_steps > 0:
        out |= _time_inner_steps(
            model, cfg, inner, a.module_ids, path, time_steps, min(B, time_batch or B), device, clock
        )
    return out


def _memory_bytes(
    inner: InnerConfig, total: int, trained: int, activations: int
) -> tuple[dict[str, int], dict[str, int]]:
    """The miner's and the validator's memory (bytes, fp32) by item, for :func:`estimate`: ``total``
    parameters, ``trained`` of them per miner, ``activations`` bytes saved by a forward pass at the
    run's batch."""
    f32 = 4
    snapshots = inner.steps // inner.transcript_interval + 1 + (inner.steps % inner.transcript_interval > 0)
    miner = {
        "params": total * f32,
        "grads": trained * f32,
        "adamw_moments": 2 * trained * f32,
        "activations": activations,
        "transcript_states": snapshots * 3 * trained * f32,
    }
    validator = {
        "checkpoint_and_outer_momentum": 2 * total * f32,
        "merged_checkpoint": total * f32,
        "replay_model": total * f32,
        "replay_grads_and_moments": 3 * trained * f32,
        "replay_activations": activations,
        "replay_states": 2 * 3 * trained * f32,
    }
    return miner, validator


def _time_inner_steps(
    model: Any,
    cfg: ModelConfig,
    inner: InnerConfig,
    module_ids: Sequence[str],
    path: Any,
    time_steps: int,
    b: int,
    device: str,
    clock: Callable[[], float],
) -> dict[str, Any]:
    """Times ``time_steps`` AdamW steps of ``model``'s ``module_ids`` at ``b`` sequences (after two
    warm-up steps) and scales them to the run's batch, for :func:`estimate`."""
    B, T = inner.batch_size, cfg.seq_len
    trained_params = module_params(dict(model.named_parameters()), module_ids)
    for name, p in model.named_parameters():
        p.requires_grad_(name in trained_params)
    opt = torch.optim.AdamW(list(trained_params.values()), lr=inner.lr, foreach=False)
    batch = torch.randint(1, cfg.vocab_size, (b, T + 1), generator=torch.Generator().manual_seed(1))
    batch = batch.to(device)

    def step() -> None:
        _, loss = lm_loss(model, batch, path)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(2):  # warm-up: the first steps pay one-time costs (AdamW imports its compiler stack)
        step()
    _sync(device)
    t0 = clock()
    for _ in range(time_steps):
        step()
    _sync(device)
    per_step = (clock() - t0) / time_steps * B / b
    return {
        "timed_batch": b,
        "timed_steps": time_steps,
        "seconds_per_inner_step": per_step,
        "seconds_per_round_training": per_step * inner.steps,
        "tokens_per_second": B * T / per_step,
    }


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
