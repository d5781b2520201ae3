"""The size series of ``tessera bench training --only sizes``: the chosen recipe against both bars over a
series of MoE model sizes, and the least-squares slope of its gaps against log10(params)."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from benchmarks.training_runs import CHOSEN, RunCache, chosen_variant, compare


def size_series(full: bool, big: bool = False) -> list[dict[str, Any]]:
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
        if big:  # 38.1M parameters: size for a GPU (--device cuda); too slow for this CPU
            shapes.append(
                ("38M", {"seq_len": 128, "d_model": 512, "n_heads": 8, "n_layers": 6, "d_ff": 1280}, 30)
            )
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
    log10(params). ``sink(result)`` is called after each size and after each run (arm) of a size, whose
    finished arms are under ``result["partial"]`` until its row is in (partial results survive)."""
    h = CHOSEN["inner_steps"]
    result: dict[str, Any] = {"inner_steps": h, "mode": "moe", "rows": []}
    for size in series:
        if size["rounds"] < 1:
            continue
        t0 = time.perf_counter()
        on_arm = _arm_sink(result, size["label"], t0, sink)
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
            on_arm=on_arm,
        )
        result.pop("partial", None)
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


def _arm_sink(result: dict[str, Any], label: str, t0: float, sink: Any) -> Any:
    """The ``on_arm`` callback of a size: its finished arms (final loss, seconds since the size began) under
    ``result["partial"]``, then ``sink(result)``."""

    def on_arm(seed: int, arm: str, run: dict[str, Any]) -> None:
        partial = result.setdefault("partial", {"label": label, "arms": []})
        partial["arms"].append(
            {
                "seed": seed,
                "arm": arm,
                "final_loss": run["final_loss"],
                "params": run["params"],
                "run_seconds": run["seconds"],
                "seconds_since_size_start": time.perf_counter() - t0,
            }
        )
        print(f"size {label}: seed {seed} {arm} done, loss {run['final_loss']:.4f}", flush=True)
        if sink is not None:
            sink(result)

    return on_arm


def _fit_sizes(result: dict[str, Any]) -> None:
    """Refit both slopes over the rows so far."""
    rows = result["rows"]
    params = [float(r["params"]) for r in rows]
    result["slope_gap_dp_per_decade"] = log_slope(params, [r["gap_dp_pct"] for r in rows])
    result["slope_gap_diloco_per_decade"] = log_slope(params, [r["gap_diloco_pct"] for r in rows])


def plot_sizes(path: Path, result: dict[str, Any]) -> None:
    """The gaps against model size (log) with their fitted lines, as a PNG."""
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
