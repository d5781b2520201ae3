"""``tessera bench training``: compressed DiLoCo against uncompressed DiLoCo and data-parallel training.

Protocol (docs/benchmarks.md): every row runs on two seeds (``--seeds``, init and round seeds) and is
scored on every held-out window (``--windows 0``); its bars, uncompressed DiLoCo with the Nesterov outer
step and carried moments (:data:`REFERENCE`) and synchronous data-parallel training on the very same
batches, run once per seed and config and are cached by config (:class:`RunCache`, ``--cache``), so
rows and reruns reuse them. Columns: payload bits and whole wire-message bits per trained parameter per
inner step, gap to DiLoCo, gap to data-parallel (mean over seeds) and their spread (max - min).

Parts (printed, and written to ``<out>/training.json`` with PNGs):

- quality: the chosen recipe (:data:`CHOSEN`, what the devnet runs, merged by the validators' merge)
  in MoE and DiPaCo mode, with loss curves;
- trade-off: gap against bits as density, bits and H vary (table + plot);
- screen: the recipe study of docs/decisions/training-recipe.md (``--only screen``);
- overhead: the miner's inner loop (transcript digests every k steps included) against a plain PyTorch
  loop on the same model and batches, in tokens per second;
- codec speed: compress + decompress throughput in MB/s of fp32 input;
- sizes: the chosen recipe against both bars over a series of model sizes (:func:`size_series`, MoE mode,
  ``--only sizes``, not run by default): the gap at each size and the least-squares slope of the gap
  against log10(params).

The default is a quick, small run; ``--full`` is the campaign recorded in docs/benchmarks.md (the
full-size model, 50 rounds of H = 30, 4 miners x batch 8). This module's import is light; everything
heavy is imported inside ``main``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path
from typing import Any


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``tessera bench training``."""
    p.add_argument("--out", default="bench-training", help="output directory")
    p.add_argument(
        "--full", action="store_true", help="the campaign: full-size model, 50 rounds of H=30, 4 miners x 8"
    )
    p.add_argument("--rounds", type=int, help="override the number of outer rounds of the quality runs")
    p.add_argument("--tradeoff-rounds", type=int, help="outer rounds (at H=30) of each trade-off run")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument(
        "--mode",
        choices=["moe", "dipaco"],
        action="append",
        help="quality runs for these modes (default both)",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="run seeds (init and rounds)")
    p.add_argument(
        "--windows",
        type=int,
        default=0,
        help="held-out windows per evaluation (0: every window of the held-out stream)",
    )
    p.add_argument(
        "--cache",
        help="directory of cached runs keyed by their config (default <out>/cache): baselines and rows "
        "already measured are reused",
    )
    p.add_argument(
        "--only",
        choices=["codec", "overhead", "quality", "tradeoff", "screen", "sizes"],
        action="append",
        help="run only these parts (repeatable; 'screen' is the recipe study and 'sizes' the model-size "
        "series, neither run by default)",
    )
    p.add_argument(
        "--size-rounds",
        type=int,
        nargs="+",
        help="outer rounds (at H=30) of each size of the size series, smallest first (0 skips a size; "
        "default: the series' own, see size_series)",
    )


# The configuration the figures are about (see docs/decisions/training-recipe.md for why).
CHOSEN: dict[str, Any] = {
    "inner_steps": 30,
    "codec": {"name": "topk", "chunk": 4096, "topk": 32, "bits": 2, "transform": "shaped", "ef_beta": 0.95},
    "outer": {"lr": 1.0, "momentum": 0.0, "nesterov": False, "merge": "mean"},
    "carry": True,
    "ef_key": "name",
    "merge": "validators",
}

NESTEROV: dict[str, Any] = {"lr": 0.7, "momentum": 0.9, "nesterov": True, "merge": "mean"}
"""DiLoCo's outer step (lr 0.7, Nesterov momentum 0.9): the reference's."""

REFERENCE: dict[str, Any] = {"codec": None, "outer": NESTEROV, "carry": True, "ef_key": "name"}
"""The bar: uncompressed (fp32) DiLoCo with the Nesterov outer step and carried inner AdamW moments, as
DiLoCo runs it."""

CACHE_VERSION = 3
"""Part of every cache key: bump it when the simulation's math changes, so stale results are not reused."""


def _scale(full: bool) -> dict[str, Any]:
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


def size_series(full: bool) -> list[dict[str, Any]]:
    """The model sizes of ``--only sizes`` (MoE mode, 4 experts, top-2), smallest first: a label, the
    model's shape and the outer rounds (at H=30) each size runs for. The recipe and its two bars run the
    same rounds at a size (equal tokens). ``--full`` runs 30 rounds at every size (equal tokens across
    sizes too, so the slope is about size alone): measured at 82, 138, 468 and 1295 s for all three runs
    of each size (1 thread, niced, loaded 2-core machine), 33 minutes in all; ``--size-rounds`` overrides."""
    if full:
        shapes = [  # about 0.06M, 0.2M (the campaign's model), 1.05M and 4.06M parameters
            ("0.06M", {"seq_len": 64, "d_model": 32, "n_heads": 2, "n_layers": 2, "d_ff": 64}, 30),
            ("0.2M", {"seq_len": 64, "d_model": 64, "n_heads": 4, "n_layers": 2, "d_ff": 128}, 30),
            ("1M", {"seq_len": 64, "d_model": 128, "n_heads": 4, "n_layers": 3, "d_ff": 256}, 30),
            ("4M", {"seq_len": 64, "d_model": 256, "n_heads": 4, "n_layers": 3, "d_ff": 512}, 30),
        ]
        batch = 8
    else:  # a quick look: tiny models, few rounds
        shapes = [
            ("tiny", {"seq_len": 32, "d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32}, 4),
            ("small", {"seq_len": 32, "d_model": 32, "n_heads": 2, "n_layers": 2, "d_ff": 64}, 4),
        ]
        batch = 4
    return [
        {"label": label, "scale": {"model": model, "rounds": rounds, "batch": batch}, "rounds": rounds}
        for label, model, rounds in shapes
    ]


def log_slope(params: list[float], gaps: list[float]) -> float | None:
    """Least-squares slope of ``gaps`` against log10(``params``) (percentage points per decade); None
    with fewer than two distinct sizes."""
    import math

    xs = [math.log10(p) for p in params]
    if len(xs) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(gaps) / len(gaps)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, gaps, strict=True)) / sxx


def sizes(
    series: list[dict[str, Any]],
    seeds: list[int],
    corpus: Any,
    cache: RunCache | None,
    windows: int = 0,
    sink: Any = None,
) -> dict[str, Any]:
    """The chosen recipe against uncompressed DiLoCo and data-parallel training (:func:`compare`) at each
    size of ``series`` (MoE mode, H = :data:`CHOSEN` inner steps), and the slopes of both gaps against
    log10(params). ``sink(result)`` is called after each size (partial results survive)."""
    h = CHOSEN["inner_steps"]
    result: dict[str, Any] = {"inner_steps": h, "mode": "moe", "rows": []}
    for size in series:
        if size["rounds"] < 1:
            continue
        t0 = time.perf_counter()
        row = compare(
            size["label"],
            "moe",
            size["scale"],
            size["rounds"],
            h,
            seeds,
            chosen_variant(),
            corpus,
            cache,
            windows,
        )
        row["model"] = size["scale"]["model"]
        row["batch"] = size["scale"]["batch"]
        row["tokens"] = size["rounds"] * h * size["scale"]["batch"] * size["scale"]["model"]["seq_len"] * 4
        row["final_loss"] = sum(s["final_loss"] for s in row["seeds"]) / len(row["seeds"])
        row["diloco_loss"] = sum(s["diloco_loss"] for s in row["seeds"]) / len(row["seeds"])
        row["dp_loss"] = sum(s["dp_loss"] for s in row["seeds"]) / len(row["seeds"])
        row["seconds"] = time.perf_counter() - t0  # 0-ish when every run came from the cache
        print(
            f"size {row['label']:<6} {row['params']:>9} params {row['rounds']:>3} rounds  payload "
            f"{row['payload_bits_per_param_step']:.5f}  loss recipe {row['final_loss']:.4f} DiLoCo "
            f"{row['diloco_loss']:.4f} DP {row['dp_loss']:.4f}  vs DiLoCo {row['gap_diloco_pct']:+6.2f}%  "
            f"vs DP {row['gap_dp_pct']:+6.2f}%  ({row['seconds']:.0f} s)",
            flush=True,
        )
        result["rows"].append(row)
        _fit_sizes(result)
        if sink is not None:
            sink(result)
    return result


def _fit_sizes(result: dict[str, Any]) -> None:
    rows = result["rows"]
    params = [float(r["params"]) for r in rows]
    result["slope_gap_dp_per_decade"] = log_slope(params, [r["gap_dp_pct"] for r in rows])
    result["slope_gap_diloco_per_decade"] = log_slope(params, [r["gap_diloco_pct"] for r in rows])


def _plot_sizes(path: Path, result: dict[str, Any]) -> None:
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    fig, ax = plt.subplots(figsize=(8, 5))
    params = [r["params"] for r in rows]
    for key, slope_key, label in (
        ("gap_dp_pct", "slope_gap_dp_per_decade", "vs data-parallel"),
        ("gap_diloco_pct", "slope_gap_diloco_per_decade", "vs uncompressed DiLoCo (Nesterov)"),
    ):
        gaps = [r[key] for r in rows]
        slope = result.get(slope_key)
        line = ax.plot(
            params,
            gaps,
            marker="o",
            label=f"{label}: slope {slope:+.2f} pts/decade" if slope is not None else label,
        )
        if slope is not None:
            xs = [math.log10(p) for p in params]
            mx, my = sum(xs) / len(xs), sum(gaps) / len(gaps)
            ax.plot(params, [my + slope * (x - mx) for x in xs], ls="--", lw=0.8, color=line[0].get_color())
    for r in rows:
        ax.annotate(f"{r['label']}, {r['rounds']} rounds", (r["params"], r["gap_dp_pct"]), fontsize=7)
    ax.set_xscale("log")
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xlabel("model parameters (log)")
    ax.set_ylabel("final held-out loss gap of the recipe (%)")
    ax.set_title(f"size series (MoE, H={result['inner_steps']}): gap vs model size")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _run_config(
    mode: str,
    scale: dict[str, Any],
    rounds: int,
    h: int,
    codec: dict[str, Any],
    outer: dict[str, Any],
    carry: bool = False,
) -> Any:
    from training.config import CodecConfig, InnerConfig, ModelConfig, OuterConfig, RunConfig

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


def _validators_merge() -> Any:
    """The validators' merge (``validator.merge.robust_merge`` with the default policy: each contribution
    clipped to twice the median norm, then the mean): what the devnet computes."""
    from validator.merge import MergePolicy, robust_merge

    policy = MergePolicy()
    return lambda contributions: robust_merge(contributions, policy)


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
    step, carried moments and error-feedback keying) or ``kind='dp'`` (synchronous data-parallel training
    on the same batches). Returns the held-out loss curve, the final loss and the bit counts; cached."""
    from tessera.simwire import wire_transport
    from training.data import prepare
    from training.model import module_params
    from training.simulation import Baseline, Simulation

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
    run = _run_config(
        mode, scale, rounds, h, variant["codec"] or CHOSEN["codec"], variant["outer"], variant["carry"]
    )
    ds = prepare(corpus, run.model)
    miners = [f"0x{i + 1:040x}" for i in range(4)]
    sim = Simulation(
        run,
        ds,
        miners,
        run_seed=seed,
        compress=variant["codec"] is not None,
        transport=wire_transport(run.codec),
        eval_windows=windows or 10**9,
        ef_key=variant.get("ef_key", "name"),
        merger=_validators_merge() if variant.get("merge") == "validators" else None,
    )
    stepper: Any = Baseline(sim) if kind == "dp" else sim
    at = _eval_rounds(rounds, points)
    curve, wire_bytes, payload_bits = [], 0, []
    t0 = time.perf_counter()
    for r in range(rounds):
        st = stepper.step(r, evaluate_after=(r + 1) in at)
        wire_bytes += st.bytes_sent
        payload_bits.append(st.payload_bits_per_param_step)
        if (r + 1) in at:
            curve.append((r + 1, st.eval_loss))
    per_round_params = sum(
        sum(t.numel() for t in module_params(sim.params, a.module_ids).values())
        for a in sim.assignments(0).values()
    )
    result = {
        "params": sum(t.numel() for t in sim.params.values()),
        "tokens": rounds * h * run.inner.batch_size * run.model.seq_len * len(miners),
        "eval_loss": curve,
        "final_loss": curve[-1][1],
        "payload_bits_per_param_step": sum(payload_bits) / len(payload_bits),
        "wire_bits_per_param_step": 8.0 * wire_bytes / (per_round_params * rounds * h)
        if kind == "miners"
        else 32.0,
        "seconds": time.perf_counter() - t0,
    }
    if cache is not None:
        cache.put(config, result)
    return result


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
) -> dict[str, Any]:
    """A table row: ``variant`` on every seed against uncompressed DiLoCo (Nesterov, :data:`REFERENCE`) and
    data-parallel training at the same rounds, H and seed (both run once per seed and cached).

    Gaps are ``100 * (loss - bar) / bar`` per seed; the row gives their mean and spread (max - min)."""
    per_seed = []
    for seed in seeds:
        args = (mode, scale, rounds, h, seed)
        mine = run_variant("miners", *args, variant, corpus, cache, windows, points)
        ref = run_variant("miners", *args, REFERENCE, corpus, cache, windows, points)
        dp = run_variant("dp", *args, REFERENCE, corpus, cache, windows, points)
        per_seed.append(
            {
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
        )

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


def codec_speed(n_values: int = 1 << 22, repeats: int = 3) -> list[dict[str, Any]]:
    """Compress + decompress MB/s (fp32 input) for the codecs the bench uses, on the CPU."""
    import torch

    from training.codecs import decode, encode, encoded_bits
    from training.config import CodecConfig

    side = int(n_values**0.5)
    # a square matrix: the shaped codecs tile it by rows and columns, the others flatten it
    x = torch.randn(side, side, generator=torch.Generator().manual_seed(0))
    n_values = side * side
    rows = []
    for label, cfg in [
        ("recipe: top-32/4096 2-bit shaped DCT", CodecConfig.recipe()),
        ("top-32/4096 2-bit tiles (no DCT)", CodecConfig(topk=32, bits=2, transform="tiles")),
        ("top-32/4096, 2-bit", CodecConfig(topk=32, bits=2)),
        ("top-64/4096, 2-bit", CodecConfig(topk=64, bits=2)),
        ("top-64/4096, 4-bit", CodecConfig(topk=64, bits=4)),
        ("top-32/4096, 2-bit, DCT", CodecConfig(topk=32, bits=2, transform="dct")),
        ("dense 8-bit", CodecConfig(name="dense", bits=8)),
    ]:
        best_e = best_d = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            enc = encode(x, cfg)
            t1 = time.perf_counter()
            decode(enc, cfg)
            t2 = time.perf_counter()
            best_e, best_d = min(best_e, t1 - t0), min(best_d, t2 - t1)
        mb = 4 * n_values / 1e6
        rows.append(
            {
                "codec": label,
                "device": "cpu",
                "input_mb": mb,
                "compress_mb_s": mb / best_e,
                "decompress_mb_s": mb / best_d,
                "round_trip_mb_s": mb / (best_e + best_d),
                "bits_per_value": encoded_bits((side, side), cfg) / n_values,
            }
        )
    return rows


def overhead(scale: dict[str, Any], steps: int = 30, repeats: int = 3) -> dict[str, Any]:
    """Tokens/s of ``train_inner`` (transcript every k steps) against a plain PyTorch AdamW loop."""
    import torch

    from training.assignment import assign
    from training.corpus import load_bundled_corpus
    from training.data import miner_batches, prepare
    from training.inner import train_inner
    from training.model import build_model, lm_loss, module_params, param_state

    run = _run_config("moe", scale, 10, steps, CHOSEN["codec"], CHOSEN["outer"])
    ds = prepare(load_bundled_corpus(), run.model)
    a = assign(b"bench", ["m0"], run.model)["m0"]
    batches = miner_batches(ds, b"bench", a, steps, run.inner.batch_size, run.model.seq_len)
    theta = param_state(build_model(run.model))
    tokens = steps * run.inner.batch_size * run.model.seq_len

    def plain() -> float:
        model = build_model(run.model)
        trained = set(module_params(dict(model.named_parameters()), a.module_ids))
        params = [p for n, p in model.named_parameters() if n in trained]
        for n, p in model.named_parameters():
            p.requires_grad_(n in trained)
        opt = torch.optim.AdamW(params, lr=run.inner.lr, betas=(0.9, 0.95), weight_decay=0.1, foreach=False)
        t0 = time.perf_counter()
        for s in range(steps):
            _, loss = lm_loss(model, batches[s])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=False)
            opt.step()
        return time.perf_counter() - t0

    def miner() -> float:
        model = build_model(run.model)
        t0 = time.perf_counter()
        train_inner(run.model, run.inner, theta, a, batches, 0, model=model)
        return time.perf_counter() - t0

    plain_t, miner_t = [], []
    for _ in range(repeats):
        plain_t.append(plain())
        miner_t.append(miner())
    p, m = min(plain_t), min(miner_t)
    return {
        "steps": steps,
        "tokens": tokens,
        "transcript_interval": run.inner.transcript_interval,
        "plain_tokens_per_s": tokens / p,
        "miner_tokens_per_s": tokens / m,
        "ratio_pct": 100.0 * p / m,
    }


def chosen_variant() -> dict[str, Any]:
    """The chosen recipe as a run variant."""
    return {k: CHOSEN[k] for k in ("codec", "outer", "carry", "ef_key", "merge")}


def _plot_curves(path: Path, rows: dict[str, dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(rows), figsize=(6 * len(rows), 4), squeeze=False)
    for ax, (mode, row) in zip(axes[0], rows.items(), strict=True):
        s = row["seeds"][0]
        for key, label in (
            ("eval_loss", f"miners: {row['payload_bits_per_param_step']:.4f} bits/param/step"),
            ("diloco_eval_loss", "uncompressed DiLoCo, Nesterov (32 bits every H steps)"),
            ("dp_eval_loss", "synchronous data-parallel (32 bits/param/step)"),
        ):
            xs, ys = zip(*s[key], strict=True)
            ax.plot(xs, ys, marker=".", label=label)
        ax.set_title(
            f"{mode} seed {s['seed']}: {s['gap_diloco_pct']:+.1f}% vs DiLoCo, "
            f"{s['gap_dp_pct']:+.1f}% vs DP ({row['rounds']} rounds)"
        )
        ax.set_xlabel("outer round")
        ax.set_ylabel("held-out loss (nats/byte)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_tradeoff(path: Path, rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for r in rows:
        ax.errorbar(
            r["payload_bits_per_param_step"],
            r["gap_diloco_pct"],
            yerr=r["gap_diloco_spread"] / 2,
            fmt="o" if r["mode"] == "dipaco" else "s",
            capsize=2,
        )
        ax.annotate(
            f"{r['mode']}: {r['label']}", (r["payload_bits_per_param_step"], r["gap_diloco_pct"]), fontsize=6
        )
    ax.set_xscale("log")
    ax.axvline(0.005, color="grey", ls="--", lw=0.8)
    ax.axhline(3.0, color="grey", ls="--", lw=0.8)
    ax.set_xlabel("payload bits per trained parameter per inner step (log)")
    ax.set_ylabel("final held-out loss gap vs uncompressed DiLoCo (%, mean of seeds; bar: spread)")
    ax.set_title("trade-off: communication vs quality")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


Grid = list[tuple[str, int, dict[str, Any]]]


def tradeoff_grid(full: bool) -> Grid:
    """(label, H, variant) of the trade-off study (codec None: fp32); the chosen recipe is first."""
    ch = chosen_variant()
    c = ch["codec"]
    grid: Grid = [
        ("chosen", CHOSEN["inner_steps"], ch),
        ("fp32 DiLoCo, average", 30, {**REFERENCE, "outer": CHOSEN["outer"]}),
    ]
    if full:
        grid += [
            ("top-16", 30, {**ch, "codec": {**c, "topk": 16}}),
            ("top-64", 30, {**ch, "codec": {**c, "topk": 64}}),
            ("top-32 8b", 30, {**ch, "codec": {**c, "bits": 8}}),
            ("top-32, H=15", 15, ch),
            ("top-32, H=60", 60, ch),
            ("top-256 8b", 30, {**ch, "codec": {**c, "topk": 256, "bits": 8}}),
            ("top-1024 8b", 30, {**ch, "codec": {**c, "topk": 1024, "bits": 8}}),
        ]
    return grid


def screen_grid() -> Grid:
    """The recipe study (docs/decisions/training-recipe.md): each change from the old default, one at a
    time and stacked."""
    old_codec = {"name": "topk", "chunk": 4096, "topk": 32, "bits": 2, "transform": "dct", "ef_beta": 1.0}
    avg = {"lr": 1.0, "momentum": 0.0, "nesterov": False, "merge": "mean"}
    old = {"codec": old_codec, "outer": avg, "carry": False, "ef_key": "name"}
    carry = {**old, "carry": True}
    ef95 = {**carry, "codec": {**old_codec, "ef_beta": 0.95}}
    shaped = {**ef95, "codec": {**old_codec, "ef_beta": 0.95, "transform": "shaped"}}
    tiles = {**ef95, "codec": {**old_codec, "ef_beta": 0.95, "transform": "tiles"}}
    return [
        ("old default (fresh moments)", 30, old),
        ("+ carried moments", 30, carry),
        ("+ carried, EF decay 0.95", 30, ef95),
        ("+ carried, EF 0.95, shaped tiles", 30, shaped),
        ("+ carried, EF 0.95, shaped, EF keyed by assignment", 30, {**shaped, "ef_key": "assignment"}),
        ("+ carried, EF 0.95, shaped, outer lr 1.2", 30, {**shaped, "outer": {**avg, "lr": 1.2}}),
        ("+ carried, EF 0.95, shaped, Nesterov 0.7/0.9", 30, {**shaped, "outer": NESTEROV}),
        ("+ carried, EF 0.95, tiles without DCT (SparseLoCo)", 30, tiles),
        (
            "+ carried, EF 0.95, tiles, sender-mean (SparseLoCo)",
            30,
            {**tiles, "outer": {**avg, "merge": "sender_mean"}},
        ),
    ]


def _rows(
    title: str,
    grid: Grid,
    modes: list[str],
    scale: dict[str, Any],
    total_steps: int,
    args: argparse.Namespace,
    corpus: Any,
    cache: RunCache,
    sink: Any,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for label, h, variant in grid:
        for mode in modes:
            row = compare(
                label,
                mode,
                scale,
                max(1, total_steps // h),
                h,
                args.seeds,
                variant,
                corpus,
                cache,
                args.windows,
            )
            print_row(row)
            rows.append(row)
            sink(title, rows)
    return rows


def main(args: argparse.Namespace) -> int:
    """Run the benchmark; print the figures; write JSON and PNGs under ``args.out``."""
    import torch

    from training.corpus import load_bundled_corpus

    torch.set_num_threads(max(1, args.threads))
    parts = set(args.only or ["codec", "overhead", "quality", "tradeoff"])
    scale = _scale(args.full)
    rounds = args.rounds or scale["rounds"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = RunCache(Path(args.cache) if args.cache else out / "cache")
    corpus = load_bundled_corpus()
    modes = args.mode or ["moe", "dipaco"]
    result: dict[str, Any] = {
        "command": "tessera bench training" + (" --full" if args.full else ""),
        "scale": scale,
        "rounds": rounds,
        "miners": 4,
        "seeds": args.seeds,
        "windows": args.windows or "all",
        "chosen": CHOSEN,
        "reference": REFERENCE,
        "corpus_digest": corpus.digest,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }

    def save(part: str | None = None, rows: Any = None) -> None:  # partial results survive
        if part is not None:
            result[part] = rows
        (out / "training.json").write_text(json.dumps(result, indent=1) + "\n")

    if "codec" in parts:
        result["codec_speed"] = codec_speed(n_values=(1 << 22) if args.full else (1 << 20))
        for row in result["codec_speed"]:
            print(
                f"codec {row['codec']:<26} {row['round_trip_mb_s']:8.1f} MB/s round trip, {row['bits_per_value']:.4f} bits/value"
            )
    if "overhead" in parts:
        result["overhead"] = overhead(_scale(True))  # the campaign's model: what a miner runs
        o = result["overhead"]
        print(
            f"overhead: miner loop {o['miner_tokens_per_s']:.0f} tok/s vs plain {o['plain_tokens_per_s']:.0f} tok/s = {o['ratio_pct']:.1f}%"
        )
    if "quality" in parts:
        quality: dict[str, dict[str, Any]] = {}
        for mode in modes:
            row = compare(
                "chosen",
                mode,
                scale,
                rounds,
                CHOSEN["inner_steps"],
                args.seeds,
                chosen_variant(),
                corpus,
                cache,
                args.windows,
                points=5,
            )
            print_row(row)
            quality[mode] = row
            save("quality", quality)
        _plot_curves(out / "training_quality.png", quality)
    # the grids run on the small model (many rows), at the same inner steps per row
    t_scale = _scale(False)
    t_total = (args.tradeoff_rounds or (50 if args.full else rounds)) * 30
    if "tradeoff" in parts:
        rows = _rows("tradeoff", tradeoff_grid(args.full), modes, t_scale, t_total, args, corpus, cache, save)
        _plot_tradeoff(out / "training_tradeoff.png", rows)
    if "screen" in parts:
        _rows("screen", screen_grid(), modes, t_scale, t_total, args, corpus, cache, save)
    if "sizes" in parts:
        series = size_series(args.full)
        for size, r in zip(series, getattr(args, "size_rounds", None) or [], strict=False):
            size["rounds"] = size["scale"]["rounds"] = r
        res = sizes(series, args.seeds, corpus, cache, args.windows, lambda res: save("sizes", res))
        save("sizes", res)
        if res["rows"]:
            _plot_sizes(out / "training_sizes.png", res)
        print(
            f"sizes: gap slope per decade of params: vs DP {res['slope_gap_dp_per_decade']}, "
            f"vs DiLoCo {res['slope_gap_diloco_per_decade']}"
        )
    save()
    print(f"wrote {out / 'training.json'}")
    return 0
