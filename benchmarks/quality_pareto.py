"""Quality table: Tessera's codec against Templar's SparseLoCo at equal wire bits.

Each budget (wire bits per trained parameter per inner step, header included) names one configuration per
arm; :func:`run_budget` runs them through :func:`benchmarks.codec_arms.run_arm` or
:func:`benchmarks.training_runs.run_variant` (cached), and :func:`row` compares a run with uncompressed
DiLoCo (Nesterov) of the same mode and seed. ``python -m benchmarks.quality_pareto`` runs a list of
(mode, budget, arm, seed) and prints one JSON line per run; ``--table`` writes the rows from the cache.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.codec_arms import run_arm
from benchmarks.training_runs import CHOSEN, REFERENCE, RunCache, run_variant, scale_of
from training.corpus import load_bundled_corpus

NESTEROV_05: dict[str, Any] = {"lr": 1.0, "momentum": 0.5, "nesterov": True, "merge": "mean"}
"""The recipe's outer step (lr 1, Nesterov 0.5)."""
PLAIN: dict[str, Any] = {"lr": 1.0, "momentum": 0.0, "nesterov": False, "merge": "mean"}
"""SparseLoCo's outer step: SGD with lr 1 (Templar's ``outer_learning_rate``), no momentum."""


def seeded_arm(keep: int) -> dict[str, Any]:
    """The seeded shaped-DCT codec (``benchmarks.codec_arms``) keeping ``keep`` of 4,096 coefficients at
    positions drawn from the round's shared seed, 2-bit values, the recipe's error feedback and outer step."""
    return {"arm": "seeded", "keep": keep, "bits": 2, "beta": 0.95, "outer": NESTEROV_05}


def sparseloco_arm(topk: int) -> dict[str, Any]:
    """SparseLoCo as Templar runs it (``benchmarks.sparseloco``) with ``topk`` values per chunk."""
    return {"arm": "sparseloco", "topk": topk, "outer": PLAIN}


def tessera_arm(topk: int, mode: str) -> dict[str, Any]:
    """Tessera's recipe with ``topk`` of 4,096 (its own wire codec: shaped DCT, Elias-Fano indices, 2-bit
    values, EF 0.95, Nesterov 0.5); in DiPaCo mode the assignments are fixed for epochs of
    :data:`EPOCH_ROUNDS` rounds (``training.assignment.assign_epoch``)."""
    variant = {k: CHOSEN[k] for k in ("codec", "outer", "carry", "ef_key", "merge")}
    variant["codec"] = {**CHOSEN["codec"], "topk": topk}
    if mode == "dipaco":
        variant["epoch_rounds"] = EPOCH_ROUNDS
    return variant


EPOCH_ROUNDS = 8
"""DiPaCo's assignment epoch (measured -3.6% / -4.4% on top of the top-54 recipe, seeds 0 / 1)."""

TOPK: dict[float, tuple[int, int]] = {0.005: (42, 18), 0.01: (110, 48), 0.02: (280, 128), 0.05: (930, 400)}
"""Per wire budget: Tessera's top-k and SparseLoCo's top-k per chunk whose wire bits (header included)
come closest under the budget on these models."""


OUTER_KEYS = ("lr", "momentum", "merge")
CODEC_KEYS = ("ef_beta", "bits", "topk", "transform")


def tweaked(variant: dict[str, Any], tweaks: Sequence[str]) -> dict[str, Any]:
    """``variant`` with ``key=value`` changes: outer-step keys (:data:`OUTER_KEYS`), codec keys
    (:data:`CODEC_KEYS`), ``epoch_rounds`` or ``merger`` (the variant's merge); the screening runs name them in the arm,
    e.g. ``tessera+merge=sender_mean`` or ``tessera+transform=tiles`` (the shaped tiles without the DCT)."""
    out = {**variant, "outer": dict(variant["outer"]), "codec": dict(variant["codec"])}
    for t in tweaks:
        key, _, raw = t.partition("=")
        value: Any = (
            raw
            if key in ("merge", "merger", "transform")
            else (int(raw) if key in ("bits", "topk", "epoch_rounds") else float(raw))
        )
        if key in OUTER_KEYS:
            out["outer"][key] = value
        elif key in CODEC_KEYS:
            out["codec"][key] = value
        elif key == "epoch_rounds":
            out[key] = value
        elif key == "merger":  # validators, coefficients (benchmarks.training_runs)
            out["merge"] = raw
        else:
            raise ValueError(f"unknown tweak {key!r}")
    return out


def arm_variant(budget: float, arm: str, mode: str) -> dict[str, Any]:
    """The configuration of ``arm`` (``tessera``, ``sparseloco``, or ``tessera+key=value+...``, see
    :func:`tweaked`) at ``budget`` in ``mode``."""
    tessera_k, sparseloco_k = TOPK[budget]
    name, *tweaks = arm.split("+")
    if name == "sparseloco":
        return sparseloco_arm(sparseloco_k)
    return tweaked(tessera_arm(tessera_k, mode), tweaks) if tweaks else tessera_arm(tessera_k, mode)


def run_one(
    mode: str, variant: dict[str, Any], seed: int, rounds: int, corpus: Any, cache: RunCache
) -> dict[str, Any]:
    """One run of ``variant`` (an arm spec or a wire-codec variant) at the quality scale, all windows."""
    scale = scale_of(True)
    if "arm" in variant:
        return run_arm(mode, scale, rounds, 30, seed, variant, corpus, cache, 0)
    return run_variant("miners", mode, scale, rounds, 30, seed, variant, corpus, cache, 0, 1)


def row(
    mode: str, budget: float, arm: str, runs: dict[int, dict[str, Any]], bars: dict[int, float]
) -> dict[str, Any]:
    """A table row: ``runs`` (per seed) against the DiLoCo bar of the same seed."""
    seeds = sorted(runs)
    per_seed = [
        {
            "seed": s,
            "final_loss": runs[s]["final_loss"],
            "diloco_loss": bars[s],
            "gap_diloco_pct": 100.0 * (runs[s]["final_loss"] - bars[s]) / bars[s],
        }
        for s in seeds
    ]
    gaps = [p["gap_diloco_pct"] for p in per_seed]
    return {
        "mode": mode,
        "budget_wire_bits": budget,
        "arm": arm,
        "payload_bits_per_param_step": sum(runs[s]["payload_bits_per_param_step"] for s in seeds)
        / len(seeds),
        "wire_bits_per_param_step": sum(runs[s]["wire_bits_per_param_step"] for s in seeds) / len(seeds),
        "gap_diloco_pct": sum(gaps) / len(gaps),
        "gap_diloco_spread": max(gaps) - min(gaps),
        "seeds": per_seed,
    }


def _jobs(spec: Sequence[str]) -> list[tuple[str, float, str, int]]:
    """``mode:budget:arm:seed`` strings as tuples."""
    out = []
    for s in spec:
        mode, budget, arm, seed = s.split(":")
        out.append((mode, float(budget), arm, int(seed)))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run the listed jobs (one JSON line each), or with ``--table`` write the rows found in the cache."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.quality_pareto")
    p.add_argument("jobs", nargs="*", help="mode:budget:arm:seed, e.g. dipaco:0.01:tessera:0")
    p.add_argument("--cache", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=50)
    p.add_argument("--bars", type=Path, help="a quality JSON whose per-seed diloco_loss are the bars")
    p.add_argument("--table", type=Path, help="write the rows of the cached runs here")
    p.add_argument("--plot", type=Path, help="with --table: the gap against wire bits as a PNG here")
    p.add_argument("--markdown", type=Path, help="with --table: the rows as a Markdown table here")
    p.add_argument(
        "--arms",
        default="tessera,sparseloco",
        help="with --table: the arms whose rows are written, comma-separated (tweaked ones too)",
    )
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    corpus, cache = load_bundled_corpus(), RunCache(args.cache)
    if args.table is None:
        for mode, budget, arm, seed in _jobs(args.jobs):
            res = run_one(mode, arm_variant(budget, arm, mode), seed, args.rounds, corpus, cache)
            print(json.dumps({"mode": mode, "budget": budget, "arm": arm, "seed": seed, **res}), flush=True)
        return 0
    bars = _bars(args.bars, corpus, cache, args.rounds)
    rows = table(corpus, cache, args.rounds, bars, tuple(args.arms.split(",")))
    args.table.write_text(json.dumps(rows, indent=1) + "\n")
    if args.plot is not None:
        plot(rows, args.plot)
    if args.markdown is not None:
        args.markdown.write_text(markdown(rows))
    return 0


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as the Markdown table of docs/benchmarks.md (per-seed losses and bars, means, spreads)."""
    out = [
        "| mode | wire budget | arm | payload bits | wire bits | final loss (per seed) | uncompressed DiLoCo "
        "| gap to DiLoCo (mean) | spread | Tessera vs SparseLoCo (mean) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        seeds = r["seeds"]
        losses = " / ".join(f"{s['final_loss']:.3f}" for s in seeds)
        bars = " / ".join(f"{s['diloco_loss']:.3f}" for s in seeds)
        names = "s" + ",".join(str(s["seed"]) for s in seeds)
        vs = r.get("vs_sparseloco_pct")
        out.append(
            f"| {r['mode']} | {r['budget_wire_bits']:g} | {r['arm']} | {r['payload_bits_per_param_step']:.5f} "
            f"| {r['wire_bits_per_param_step']:.5f} | {losses} ({names}) | {bars} "
            f"| **{r['gap_diloco_pct']:+.1f}%** | {r['gap_diloco_spread']:.1f} "
            f"| {'' if vs is None else f'**{vs:+.1f}%**'} |"
        )
    return "\n".join(out) + "\n"


def _bars(path: Path | None, corpus: Any, cache: RunCache, rounds: int) -> dict[tuple[str, int], float]:
    """Uncompressed DiLoCo's final loss per (mode, seed): from a quality JSON, else the cache."""
    bars: dict[tuple[str, int], float] = {}
    if path is not None:
        quality = json.loads(path.read_text())["quality"]
        for mode, r in quality.items():
            bars |= {(mode, s["seed"]): s["diloco_loss"] for s in r["seeds"]}
    for mode in ("moe", "dipaco"):
        for seed in (0, 1):
            config = {
                "kind": "miners",
                "mode": mode,
                "scale": scale_of(True),
                "rounds": rounds,
                "h": 30,
                "seed": seed,
                "variant": REFERENCE,
                "corpus": corpus.digest,
                "windows": 0,
                "points": 1,
            }
            hit = cache.get(config)
            if hit is not None:
                bars[(mode, seed)] = hit["final_loss"]
    return bars


def table(
    corpus: Any,
    cache: RunCache,
    rounds: int,
    bars: dict[tuple[str, int], float],
    arms: Sequence[str] = ("tessera", "sparseloco"),
) -> list[dict[str, Any]]:
    """The rows of ``arms`` whose runs are in the cache (no run is started)."""
    rows = []
    for budget in TOPK:
        for arm in arms:
            for mode in ("moe", "dipaco"):
                variant = arm_variant(budget, arm, mode)
                runs = {}
                for seed in (0, 1):
                    if (mode, seed) not in bars:
                        continue
                    try:
                        runs[seed] = _cached(mode, variant, seed, rounds, corpus, cache)
                    except LookupError:
                        continue
                if runs:
                    rows.append(row(mode, budget, arm, runs, {s: bars[(mode, s)] for s in runs}))
    return against_sparseloco(rows)


def against_sparseloco(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each Tessera row gains ``vs_sparseloco_pct``: its mean final loss against SparseLoCo's at the same
    mode and budget, over the seeds both have (negative: Tessera lower)."""
    slc = {(r["mode"], r["budget_wire_bits"]): r for r in rows if r["arm"] == "sparseloco"}
    for r in rows:
        other = slc.get((r["mode"], r["budget_wire_bits"]))
        if not r["arm"].startswith("tessera") or other is None:
            continue
        theirs = {s["seed"]: s["final_loss"] for s in other["seeds"]}
        both = [(s["final_loss"], theirs[s["seed"]]) for s in r["seeds"] if s["seed"] in theirs]
        if both:
            mine, ref = sum(a for a, _ in both) / len(both), sum(b for _, b in both) / len(both)
            r["vs_sparseloco_pct"] = 100.0 * (mine - ref) / ref
            r["vs_sparseloco_seeds"] = sorted(s["seed"] for s in r["seeds"] if s["seed"] in theirs)
    return rows


def _cached(
    mode: str, variant: dict[str, Any], seed: int, rounds: int, corpus: Any, cache: RunCache
) -> dict[str, Any]:
    """A run's cached result; :class:`LookupError` when it has not been run."""
    scale = scale_of(True)
    if "arm" in variant:
        config = {
            "kind": "arm",
            "mode": mode,
            "scale": scale,
            "rounds": rounds,
            "h": 30,
            "seed": seed,
            "spec": variant,
            "corpus": corpus.digest,
            "windows": 0,
        }
    else:
        config = {
            "kind": "miners",
            "mode": mode,
            "scale": scale,
            "rounds": rounds,
            "h": 30,
            "seed": seed,
            "variant": variant,
            "corpus": corpus.digest,
            "windows": 0,
            "points": 1,
        }
    hit = cache.get(config)
    if hit is None:
        raise LookupError(mode, variant, seed)
    return hit


ARM_LABELS = {"tessera": "Tessera recipe", "sparseloco": "SparseLoCo (Templar)"}
"""The plot's legend for the table's arms (a tweaked arm is labelled by its name)."""


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Gap to uncompressed DiLoCo against wire bits, one panel per mode, one line per arm (seed means)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = sorted({r["mode"] for r in rows})
    fig, axes = plt.subplots(1, len(modes), figsize=(6 * len(modes), 4), squeeze=False)
    for ax, mode in zip(axes[0], modes, strict=True):
        for arm in dict.fromkeys(r["arm"] for r in rows):  # in the rows' order
            pts = sorted(
                (r["wire_bits_per_param_step"], r["gap_diloco_pct"])
                for r in rows
                if r["mode"] == mode and r["arm"] == arm
            )
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, marker="o", label=ARM_LABELS.get(arm, arm))
        ax.axhline(3.0, color="grey", linestyle="--", label="target: +3%")
        ax.set_xscale("log")
        ax.set_xlim(0.003, 0.07)  # the budgets 0.005 to 0.05
        ax.set_title(f"{mode}: 50 rounds of H = 30, 4 miners")
        ax.set_xlabel("wire bits per trained parameter per inner step (header included)")
        ax.set_ylabel("held-out loss above uncompressed DiLoCo (%)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
