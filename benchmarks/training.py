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

The rooms: :mod:`benchmarks.training_runs` (the recipe, its bars, one run, a row),
:mod:`benchmarks.training_grids` (the trade-off and screen grids, plots), :mod:`benchmarks.training_speed`
(codec speed, overhead) and :mod:`benchmarks.training_sizes` (the size series); this module holds the
command's arguments and ``main``, and re-exports the names callers import from it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.training_grids import (
    Grid,
    grid_rows,
    plot_curves,
    plot_tradeoff,
    screen_grid,
    tradeoff_grid,
)
from benchmarks.training_runs import (
    CHOSEN,
    REFERENCE,
    RunCache,
    chosen_variant,
    compare,
    print_row,
    scale_of,
)
from benchmarks.training_sizes import plot_sizes, size_series, sizes
from benchmarks.training_speed import codec_speed, overhead
from training.corpus import load_bundled_corpus

_plot_sizes = plot_sizes  # the name tests/training/test_bench_sizes.py imports

__all__ = [
    "add_arguments",
    "main",
]


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
        "--device",
        default="cpu",
        help="where the simulated miners, the baselines and the evaluations compute: cpu, cuda or cuda:N "
        "(states, updates and the merge stay on the CPU, as on the network); part of the cache key",
    )
    p.add_argument(
        "--big-size",
        action="store_true",
        help="add a 38M-parameter size (d_model 512, 6 layers, context 128) to the size series: the GPU "
        "run (e.g. --only sizes --full --big-size --device cuda --size-rounds 0 0 0 0 30)",
    )
    p.add_argument(
        "--size-rounds",
        type=int,
        nargs="+",
        help="outer rounds (at H=30) of each size of the size series, smallest first (0 skips a size; "
        "default: the series' own, see size_series)",
    )


@dataclass
class _Bench:
    """What the parts of one ``tessera bench training`` share: its arguments, scale, cache and corpus, and
    the result it writes after each row (partial results survive)."""

    args: argparse.Namespace
    out: Path
    scale: dict[str, Any]
    rounds: int
    cache: RunCache
    corpus: Any
    modes: list[str]
    result: dict[str, Any] = field(default_factory=dict)

    def save(self, part: str | None = None, rows: Any = None) -> None:
        """Write ``training.json``, with ``rows`` as its ``part`` first when given."""
        if part is not None:
            self.result[part] = rows
        (self.out / "training.json").write_text(json.dumps(self.result, indent=1) + "\n")


def main(args: argparse.Namespace) -> int:
    """Run the benchmark; print the figures; write JSON and PNGs under ``args.out``."""
    import torch

    torch.set_num_threads(max(1, args.threads))
    parts = set(args.only or ["codec", "overhead", "quality", "tradeoff"])
    scale = _on_device(scale_of(args.full), args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    b = _Bench(
        args,
        out,
        scale,
        rounds=args.rounds or scale["rounds"],
        cache=RunCache(Path(args.cache) if args.cache else out / "cache"),
        corpus=load_bundled_corpus(),
        modes=args.mode or ["moe", "dipaco"],
    )
    b.result = _header(b, torch)
    runners: list[tuple[str, Callable[[_Bench], None]]] = [
        ("codec", _codec),
        ("overhead", _overhead),
        ("quality", _quality),
        ("tradeoff", _tradeoff),
        ("screen", _screen),
        ("sizes", _sizes),
    ]
    for part, runner in runners:
        if part in parts:
            runner(b)
    b.save()
    print(f"wrote {out / 'training.json'}")
    return 0


def _on_device(scale: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """``scale`` with the ``--device`` to compute on (left out on the CPU, so CPU cache keys are unchanged)."""
    device = getattr(args, "device", "cpu")
    return scale if device == "cpu" else {**scale, "device": device}


def _header(b: _Bench, torch: Any) -> dict[str, Any]:
    """The result's opening fields: how it was run."""
    return {
        "command": "tessera bench training" + (" --full" if b.args.full else ""),
        "scale": b.scale,
        "rounds": b.rounds,
        "miners": 4,
        "seeds": b.args.seeds,
        "windows": b.args.windows or "all",
        "chosen": CHOSEN,
        "reference": REFERENCE,
        "corpus_digest": b.corpus.digest,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


def _codec(b: _Bench) -> None:
    """Codec speed (on 4M values with ``--full``, else 1M)."""
    b.result["codec_speed"] = codec_speed(n_values=(1 << 22) if b.args.full else (1 << 20))
    for row in b.result["codec_speed"]:
        print(
            f"codec {row['codec']:<26} {row['round_trip_mb_s']:8.1f} MB/s round trip, {row['bits_per_value']:.4f} bits/value"
        )


def _overhead(b: _Bench) -> None:
    """The miner loop's overhead, on the campaign's model (what a miner runs) whatever the scale."""
    b.result["overhead"] = overhead(scale_of(True))
    o = b.result["overhead"]
    print(
        f"overhead: miner loop {o['miner_tokens_per_s']:.0f} tok/s vs plain {o['plain_tokens_per_s']:.0f} tok/s = {o['ratio_pct']:.1f}%"
    )


def _quality(b: _Bench) -> None:
    """The chosen recipe in each mode against both bars, with loss curves at five points."""
    quality: dict[str, dict[str, Any]] = {}
    for mode in b.modes:
        row = compare(
            "chosen",
            mode,
            b.scale,
            b.rounds,
            CHOSEN["inner_steps"],
            b.args.seeds,
            chosen_variant(),
            b.corpus,
            b.cache,
            b.args.windows,
            points=5,
        )
        print_row(row)
        quality[mode] = row
        b.save("quality", quality)
    plot_curves(b.out / "training_quality.png", quality)


def _grid(b: _Bench, title: str, grid: Grid) -> list[dict[str, Any]]:
    """The rows of ``grid``: on the small model (many rows), at the same inner steps per row."""
    total = (b.args.tradeoff_rounds or (50 if b.args.full else b.rounds)) * 30
    scale = _on_device(scale_of(False), b.args)
    return grid_rows(title, grid, b.modes, scale, total, b.args, b.corpus, b.cache, b.save)


def _tradeoff(b: _Bench) -> None:
    """The trade-off grid and its plot."""
    rows = _grid(b, "tradeoff", tradeoff_grid(b.args.full))
    plot_tradeoff(b.out / "training_tradeoff.png", rows)


def _screen(b: _Bench) -> None:
    """The recipe screen."""
    _grid(b, "screen", screen_grid())


def _sizes(b: _Bench) -> None:
    """The size series (``--size-rounds`` overriding each size's rounds), its plot and slopes."""
    series = size_series(b.args.full, big=getattr(b.args, "big_size", False))
    for size in series:
        size["scale"] = _on_device(size["scale"], b.args)
    for size, r in zip(series, getattr(b.args, "size_rounds", None) or [], strict=False):
        size["rounds"] = size["scale"]["rounds"] = r
    res = sizes(series, b.args.seeds, b.corpus, b.cache, b.args.windows, lambda res: b.save("sizes", res))
    b.save("sizes", res)
    if res["rows"]:
        plot_sizes(b.out / "training_sizes.png", res)
    print(
        f"sizes: gap slope per decade of params: vs DP {res['slope_gap_dp_per_decade']}, "
        f"vs DiLoCo {res['slope_gap_diloco_per_decade']}"
    )
