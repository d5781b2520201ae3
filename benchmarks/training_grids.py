"""The grids of ``tessera bench training``: the trade-off study and the recipe screen, the rows they run,
and the quality and trade-off plots."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from benchmarks.training_runs import CHOSEN, NESTEROV, REFERENCE, RunCache, chosen_variant, compare, print_row


def plot_curves(path: Path, rows: dict[str, dict[str, Any]]) -> None:
    """Held-out loss curves of the quality rows (first seed) against both bars, one panel per mode."""
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


def plot_tradeoff(path: Path, rows: list[dict[str, Any]]) -> None:
    """Gap to DiLoCo against payload bits of the trade-off rows, as a PNG."""
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
"""(label, H, variant) rows of a study."""


AVERAGE = {"lr": 1.0, "momentum": 0.0, "nesterov": False, "merge": "mean"}
"""Plain averaging of the local models (FedAvg): the outer step of the "average" rows."""


def tradeoff_grid(full: bool) -> Grid:
    """(label, H, variant) of the trade-off study (codec None: fp32); the chosen recipe is first."""
    ch = chosen_variant()
    c = ch["codec"]
    grid: Grid = [
        ("chosen", CHOSEN["inner_steps"], ch),
        ("fp32 DiLoCo, average", 30, {**REFERENCE, "outer": AVERAGE}),
    ]
    k = c["topk"]
    if full:
        grid += [
            ("top-16", 30, {**ch, "codec": {**c, "topk": 16}}),
            ("top-64", 30, {**ch, "codec": {**c, "topk": 64}}),
            (f"top-{k} 8b", 30, {**ch, "codec": {**c, "bits": 8}}),
            (f"top-{k}, H=15", 15, ch),
            (f"top-{k}, H=60", 60, ch),
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


def grid_rows(
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
    """Every (label, H, variant) of ``grid`` in every mode as a :func:`compare` row, at ``total_steps``
    inner steps each; printed, and saved with ``sink(title, rows)`` after each row."""
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
