"""The runs of ``tessera bench training``: the chosen recipe and its bars, one run of a variant (cached
by config in :class:`RunCache`), and a table row comparing a variant with both bars on every seed.

Light to import: torch and the simulation are imported inside the functions that run.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from training.config import CodecConfig, InnerConfig, ModelConfig, OuterConfig, RunConfig

# The configuration the figures are about (see docs/decisions/training-recipe.md for why).
CHOSEN: dict[str, Any] = {
    "inner_steps": 30,
    "codec": {
        "name": "topk",
        "chunk": 4096,
        "topk": 110,
        "bits": 2,
        "transform": "tiles",
        "ef_beta": 0.95,
        "index": "elias-fano",
    },
    "outer": {"lr": 1.0, "momentum": 0.5, "nesterov": True, "merge": "mean"},
    "carry": True,
    "ef_key": "name",
    "merge": "validators",
}

NESTEROV: dict[str, Any] = {"lr": 0.7, "momentum": 0.9, "nesterov": True, "merge": "mean"}
"""DiLoCo's outer step (lr 0.7, Nesterov momentum 0.9): the reference's."""

REFERENCE: dict[str, Any] = {"codec": None, "outer": NESTEROV, "carry": True, "ef_key": "name"}
"""The bar: uncompressed (fp32) DiLoCo with the Nesterov outer step and carried inner AdamW moments, as
DiLoCo runs it."""

MINERS = 4
"""Miners of every simulated run."""

CACHE_VERSION = 3
"""Part of every cache key: bump it when the simulation's math changes, so stale results are not reused."""


def scale_of(full: bool) -> dict[str, Any]:
    """The model, rounds and batch of the quality runs: the campaign's with ``full``, else a quick look."""
    if full:
        return {
            "model": {"seq_len": 64, "d_model": 64, "n_heads": 4, "n_layers": 2, "d_ff": 128},
            "rounds": 50,
            "batch": 8,
        }
    return {
        "model": {"seq_len": 32, "d_model": 32, "n_heads": 2, "n_layers": 2, "d_ff": 64},
        "rounds": 12,
        "batch": 4,
    }


def run_config(
    mode: str,
    scale: dict[str, Any],
    rounds: int,
    h: int,
    codec: dict[str, Any],
    outer: dict[str, Any],
    carry: bool = False,
) -> Any:
    """The :class:`training.config.RunConfig` of one run (MoE with 4 experts top-2, or DiPaCo with 2
    choices per level; warm-up a tenth of the steps, at most 100)."""
    model = ModelConfig(mode=mode, n_experts=4, top_k=2, n_choices=2, **scale["model"])  # type: ignore[arg-type]
    inner = InnerConfig(
        steps=h,
        batch_size=scale["batch"],
        lr=3e-3,
        warmup_steps=min(100, max(1, h * rounds // 10)),
        total_steps=h * rounds,
        transcript_interval=min(10, h),
        carry_optimizer=carry,
    )
    return RunConfig(model, inner, OuterConfig(**outer), CodecConfig(**codec))


class RunCache:
    """Finished runs as JSON files named by the SHA-256 of their config (so a baseline runs once per seed)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @staticmethod
    def key(config: dict[str, Any]) -> str:
        """The cache key of a run's config (any JSON-safe dict)."""
        blob = json.dumps({"version": CACHE_VERSION, **config}, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:24]

    def get(self, config: dict[str, Any]) -> dict[str, Any] | None:
        """The cached result of ``config``, if any."""
        path = self.root / f"{self.key(config)}.json"
        if not path.exists():
            return None
        data: dict[str, Any] = json.loads(path.read_text())
        return data

    def put(self, config: dict[str, Any], result: dict[str, Any]) -> None:
        """Store ``result`` under ``config`` (written whole, then renamed)."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / f"{self.key(config)}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"config": config, **result}) + "\n")
        tmp.replace(path)


def _eval_rounds(rounds: int, points: int) -> set[int]:
    """Rounds (1-based) after which the model is evaluated: ``points`` evenly spaced, the last included."""
    return {max(1, round(rounds * (i + 1) / points)) for i in range(max(1, points))} | {rounds}


def _validators_merge(method: str = "mean") -> Any:
    """The validators' merge (``training.merge.robust_merge`` with the default policy: each contribution
    clipped to twice the median norm, then ``method``, the outer step's ``merge``): what the devnet
    computes."""
    from training.merge import MergePolicy, robust_merge

    policy = MergePolicy(method=method)
    return lambda contributions: robust_merge(contributions, policy)


def _merger(variant: dict[str, Any]) -> Any:
    """The merge a variant names: ``validators`` (:func:`_validators_merge` with the outer step's
    ``merge``), ``coefficients`` (per DCT coefficient over its senders, ``benchmarks.dct_merge``), or the
    simulation's own (None)."""
    if variant.get("merge") == "validators":
        return _validators_merge(variant["outer"].get("merge", "mean"))
    if variant.get("merge") == "coefficients":
        from benchmarks.dct_merge import coefficient_merge

        return coefficient_merge
    return None


def run_variant(
    kind: str,
    mode: str,
    scale: dict[str, Any],
    rounds: int,
    h: int,
    seed: int,
    variant: dict[str, Any],
    corpus: Any,
    cache: RunCache | None = None,
    windows: int = 0,
    points: int = 1,
) -> dict[str, Any]:
    """One run: ``kind='miners'`` (the simulation with ``variant``'s codec, or fp32 when it is None, outer
    step, carried moments, error-feedback keying and ``epoch_rounds``) or ``kind='dp'`` (synchronous data-parallel training
    on the same batches). Returns the held-out loss curve, the final loss and the bit counts; cached."""
    config = {
        "kind": kind,
        "mode": mode,
        "scale": scale,
        "rounds": rounds,
        "h": h,
        "seed": seed,
        "variant": variant if kind == "miners" else None,
        "corpus": corpus.digest,
        "windows": windows,
        "points": points,
    }
    if cache is not None and (hit := cache.get(config)) is not None:
        return hit
    from training.simulation import Baseline

    run = run_config(
        mode, scale, rounds, h, variant["codec"] or CHOSEN["codec"], variant["outer"], variant["carry"]
    )
    # a scale's "device" (set by --device; absent on the CPU, so CPU cache keys stay as they were)
    sim = _simulation(run, corpus, seed, variant, windows, scale.get("device", "cpu"))
    stepper: Any = Baseline(sim) if kind == "dp" else sim
    curve, wire_bytes, payload_bits, seconds = _train(stepper, rounds, _eval_rounds(rounds, points))
    result = {
        "params": sum(t.numel() for t in sim.params.values()),
        "tokens": rounds * h * run.inner.batch_size * run.model.seq_len * MINERS,
        "eval_loss": curve,
        "final_loss": curve[-1][1],
        "payload_bits_per_param_step": sum(payload_bits) / len(payload_bits),
        "wire_bits_per_param_step": 8.0 * wire_bytes / (_trained_params(sim) * rounds * h)
        if kind == "miners"
        else 32.0,
        "seconds": seconds,
    }
    if cache is not None:
        cache.put(config, result)
    return result


def _simulation(
    run: Any, corpus: Any, seed: int, variant: dict[str, Any], windows: int, device: str = "cpu"
) -> Any:
    """The simulation of ``variant`` with :data:`MINERS` miners, its updates sent through the real wire
    format (so the wire bits are counted as sent), computing on ``device``."""
    from tessera.simwire import wire_transport
    from training.data import prepare
    from training.simulation import Simulation

    ds = prepare(corpus, run.model)
    miners = [f"0x{i + 1:040x}" for i in range(MINERS)]
    return Simulation(
        run,
        ds,
        miners,
        run_seed=seed,
        compress=variant["codec"] is not None,
        transport=wire_transport(run.codec, run.model),
        eval_windows=windows or 10**9,
        ef_key=variant.get("ef_key", "name"),
        merger=_merger(variant),
        device=device,
        epoch_rounds=variant.get("epoch_rounds", 1),  # assignments fixed for an epoch
    )


def _train(
    stepper: Any, rounds: int, at: set[int]
) -> tuple[list[tuple[int, float]], int, list[float], float]:
    """Step ``rounds`` rounds, evaluating after the rounds in ``at``: the loss curve, the wire bytes sent,
    the payload bits per parameter and step of each round, and the seconds it took."""
    curve: list[tuple[int, float]] = []
    wire_bytes, payload_bits = 0, []
    t0 = time.perf_counter()
    for r in range(rounds):
        st = stepper.step(r, evaluate_after=(r + 1) in at)
        wire_bytes += st.bytes_sent
        payload_bits.append(st.payload_bits_per_param_step)
        if (r + 1) in at:
            curve.append((r + 1, st.eval_loss))
    return curve, wire_bytes, payload_bits, time.perf_counter() - t0


def _trained_params(sim: Any) -> int:
    """Parameters the miners train in a round (the modules of their round-0 assignments)."""
    from training.model import module_params

    return sum(
        sum(t.numel() for t in module_params(sim.params, a.module_ids).values())
        for a in sim.assignments(0).values()
    )


def compare(
    label: str,
    mode: str,
    scale: dict[str, Any],
    rounds: int,
    h: int,
    seeds: list[int],
    variant: dict[str, Any],
    corpus: Any,
    cache: RunCache | None,
    windows: int = 0,
    points: int = 1,
    on_arm: Callable[[int, str, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """A table row: ``variant`` on every seed against uncompressed DiLoCo (Nesterov, :data:`REFERENCE`) and
    data-parallel training at the same rounds, H and seed (both run once per seed and cached).
    ``on_arm(seed, arm, result)`` is called after each run (``recipe``, ``diloco``, ``dp``), so a long row
    can write what it has.

    Gaps are ``100 * (loss - bar) / bar`` per seed; the row gives their mean and spread (max - min)."""
    per_seed = []
    for seed in seeds:
        args = (mode, scale, rounds, h, seed)
        arms: dict[str, dict[str, Any]] = {}
        for arm, kind, v in (
            ("recipe", "miners", variant),
            ("diloco", "miners", REFERENCE),
            ("dp", "dp", REFERENCE),
        ):
            arms[arm] = run_variant(kind, *args, v, corpus, cache, windows, points)
            if on_arm is not None:
                on_arm(seed, arm, arms[arm])
        per_seed.append(_seed_row(seed, arms["recipe"], arms["diloco"], arms["dp"]))

    def stat(key: str) -> tuple[float, float]:
        xs = [s[key] for s in per_seed]
        return sum(xs) / len(xs), max(xs) - min(xs)

    gd, sd = stat("gap_diloco_pct")
    gp, sp = stat("gap_dp_pct")
    return {
        "label": label,
        "mode": mode,
        "rounds": rounds,
        "inner_steps": h,
        "variant": variant,
        "seeds": per_seed,
        "params": per_seed[0]["params"],
        "payload_bits_per_param_step": stat("payload_bits_per_param_step")[0],
        "wire_bits_per_param_step": stat("wire_bits_per_param_step")[0],
        "gap_diloco_pct": gd,
        "gap_diloco_spread": sd,
        "gap_dp_pct": gp,
        "gap_dp_spread": sp,
    }


def _seed_row(seed: int, mine: dict[str, Any], ref: dict[str, Any], dp: dict[str, Any]) -> dict[str, Any]:
    """One seed of a row: the variant's run against the DiLoCo and data-parallel bars."""
    return {
        "seed": seed,
        "final_loss": mine["final_loss"],
        "diloco_loss": ref["final_loss"],
        "dp_loss": dp["final_loss"],
        "gap_diloco_pct": 100.0 * (mine["final_loss"] - ref["final_loss"]) / ref["final_loss"],
        "gap_dp_pct": 100.0 * (mine["final_loss"] - dp["final_loss"]) / dp["final_loss"],
        "payload_bits_per_param_step": mine["payload_bits_per_param_step"],
        "wire_bits_per_param_step": mine["wire_bits_per_param_step"],
        "eval_loss": mine["eval_loss"],
        "diloco_eval_loss": ref["eval_loss"],
        "dp_eval_loss": dp["eval_loss"],
        "params": mine["params"],
    }


def print_row(row: dict[str, Any]) -> None:
    """One line of the table."""
    print(
        f"{row['mode']:<6} {row['label']:<44} payload {row['payload_bits_per_param_step']:.5f} "
        f"wire {row['wire_bits_per_param_step']:.5f}  vs DiLoCo {row['gap_diloco_pct']:+6.2f}% "
        f"(spread {row['gap_diloco_spread']:.2f})  vs DP {row['gap_dp_pct']:+6.2f}% "
        f"(spread {row['gap_dp_spread']:.2f})  per seed "
        + " ".join(f"{s['gap_diloco_pct']:+.2f}" for s in row["seeds"]),
        flush=True,
    )


def chosen_variant() -> dict[str, Any]:
    """The chosen recipe as a run variant."""
    return {k: CHOSEN[k] for k in ("codec", "outer", "carry", "ef_key", "merge")}
