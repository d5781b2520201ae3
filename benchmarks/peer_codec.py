"""Tessera's recipe codec against Templar's SparseLoCo compressor: compress + decompress speed on one CPU thread.

What is measured: MB per second of fp32 input for compress + decompress back to a dense fp32 tensor, on
one CPU thread (``torch.set_num_threads(1)``), for Gaussian tensors of several shapes (2048x2048, as
``benchmarks/training.py::codec_speed``, 1024x4096, and the weight shapes of Tessera's default model).
Each codec is timed over ``--repeats`` repeats after one dropped warm-up pass; small tensors are run
several times per timing (about 1M values per timed block). Reported per codec and shape: best compress,
best decompress, ``round_trip_mb_s`` = input MB / (best compress + best decompress) (as ``codec_speed``)
and ``round_trip_mb_s_median`` = input MB / median per-repeat round trip, with bits per value and the
relative L2 error on the Gaussian input. The headline is the 2048x2048 row: Tessera's recipe against
SparseLoCo with Templar's published settings, and their ratio (best and median).

Codecs and settings:

* Tessera recipe: ``training.codecs.encode`` + ``decode`` with ``CodecConfig.recipe()``: top-110 of every
  4,096 values in 64x64 tiles that follow the tensor's shape, without the DCT (``transform="tiles"``,
  docs/decisions/training-recipe.md), 2-bit values, one fp32 scale per tile, Elias-Fano indices. Also the previous recipe (top-32, 12-bit packed
  indices) and Tessera's ``tiles`` codec (top-32 without DCT).
* SparseLoCo (Templar's ``src/tplr/compress.py``), run as the miner of ``tplr/neurons.py`` does:
  ``ChunkingTransformer.encode -> TopKCompressor.compress -> TopKCompressor.decompress ->
  ChunkingTransformer.decode``. Published settings (``hparams/hparams.json``): target_chunk 64 (64x64
  tiles, the largest divisor of each side <= 64), topk_compression 64, use_dct false,
  quantization_bins 4, quantization_range 6 (sigmas); values sent as uint8 codes, 12-bit indices.
  Also top-32 (budget-matched with Tessera's recipe) without and with DCT.

The published figures (``docs/benchmarks/codec-vs-sparseloco.json``) used Templar at commit
``c2397ac524c9d9de550a2a126ed37505d090d69f`` (github.com/tplr-ai/templar).

Templar's code is not part of this project and is never copied into it: point the benchmark at your own
checkout of github.com/tplr-ai/templar, either at the file
(``--templar-compress PATH/TO/templar/src/tplr/compress.py``) or at a git directory and commit
(``--templar-git-dir DIR --templar-commit SHA``, read with ``git show``). The module is executed verbatim
in memory; a stub ``tplr`` package supplies the only thing it takes from the rest of Templar,
``tplr.logger``. It needs ``einops``, which this project does not depend on: install it yourself
(``pip install einops``).

Run from the repository root::

    python -m benchmarks.peer_codec --templar-compress PATH/TO/templar/src/tplr/compress.py \\
        [--repeats N] [--out FILE]
    python -m benchmarks.peer_codec --templar-git-dir PATH/TO/templar/.git \\
        --templar-commit c2397ac524c9d9de550a2a126ed37505d090d69f [--repeats N] [--out FILE]

The Templar side (reading and loading its ``compress.py``, the SparseLoCo round trip) lives in
:mod:`benchmarks.peer_codec_templar`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.peer_codec_templar import (
    TEMPLAR_COMMIT,
    TEMPLAR_REPO,
    SparseLoCo,
    load_templar_compress,
    read_templar_source,
)
from training.codecs import decode, encode, encoded_bits
from training.config import CodecConfig

__all__ = [
    "SHAPES",
    "SPARSELOCO_PUBLISHED",
    "TESSERA_RECIPE",
    "main",
    "parse_args",
    "rel_err",
    "time_pair",
]

TESSERA_RECIPE = "tessera recipe: top-110/4096 2-bit shaped tiles (no DCT), Elias-Fano indices"
"""Label of ``CodecConfig.recipe()`` (checked against it in :func:`_coders`)."""
SPARSELOCO_PUBLISHED = "sparseloco published (hparams.json): top-64/4096, no DCT, 4 bins"

SHAPES: list[tuple[int, ...]] = [
    (2048, 2048),
    (1024, 4096),
    (256, 64),
    (64, 256),
    (192, 64),
    (64, 128),
    (128, 64),
]
"""2048x2048 = 4M values as ``codec_speed``; a mid-size LLM-ish matrix; the shapes of Tessera's default
model (d_model 64, d_ff 128, vocab 256)."""


Compress = Callable[[torch.Tensor], Any]
Decompress = Callable[[torch.Tensor, Any], torch.Tensor]


def time_pair(
    fn_c: Compress, fn_d: Decompress, x: torch.Tensor, inner: int
) -> tuple[float, float, Any, torch.Tensor]:
    """(compress s, decompress s) per call over ``inner`` calls each, with the last payload and output.

    ``fn_c(x)`` compresses; ``fn_d(x, payload)`` decompresses (``x`` is the parameter the payload belongs to).
    """
    t0 = time.perf_counter()
    for _ in range(inner):
        pay = fn_c(x)
    t1 = time.perf_counter()
    for _ in range(inner):
        out = fn_d(x, pay)
    t2 = time.perf_counter()
    return (t1 - t0) / inner, (t2 - t1) / inner, pay, out


def rel_err(x: torch.Tensor, y: torch.Tensor) -> float:
    """Relative L2 error of ``y`` against ``x``."""
    return float((y.float() - x).norm() / x.norm())


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line arguments of ``python -m benchmarks.peer_codec``."""
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.peer_codec",
        description="Tessera's recipe codec vs Templar's SparseLoCo: compress + decompress MB/s, 1 CPU thread. "
        "Needs your own Templar checkout and einops (pip install einops).",
    )
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--templar-compress", metavar="PATH", help="Templar's src/tplr/compress.py")
    src.add_argument("--templar-git-dir", metavar="DIR", help="a Templar git directory, read with git show")
    ap.add_argument(
        "--templar-commit",
        metavar="SHA",
        default=TEMPLAR_COMMIT,
        help=f"commit to read with --templar-git-dir (default: {TEMPLAR_COMMIT}, the published figures')",
    )
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats after one warm-up (default 5)")
    ap.add_argument("--out", default="codec-vs-sparseloco.json", help="JSON record to write")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    return args


Coder = tuple[Compress, Decompress, CodecConfig | SparseLoCo]
"""A codec under test: compress, decompress, and its settings (for its bits per value)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print per-shape ratios and the headline, and write the JSON record."""
    args = parse_args(argv)
    src, source = read_templar_source(args.templar_compress, args.templar_git_dir, args.templar_commit)
    origin = f"{TEMPLAR_REPO}@{source['commit'] or 'unknown'}:{source['path']}"
    tc = load_templar_compress(src, origin)
    import einops  # present: load_templar_compress checked

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    tensors = {s: torch.randn(*s, generator=g) for s in SHAPES}
    tess_cfg = CodecConfig.recipe()
    slc = {
        "published (hparams.json): top-64/4096, no DCT, 4 bins": SparseLoCo(tc, SHAPES, 64, 64, False, 4, 6),
        "budget-matched: top-32/4096, no DCT, 4 bins": SparseLoCo(tc, SHAPES, 64, 32, False, 4, 6),
        "top-32/4096 with DCT (use_dct=true), 4 bins": SparseLoCo(tc, SHAPES, 64, 32, True, 4, 6),
    }
    coders = _coders(tess_cfg, slc)
    rows = [_measure_shape(shape, tensors[shape], coders, args.repeats) for shape in SHAPES]
    record = {
        "what": "compress+decompress (to a dense fp32 tensor) MB/s of fp32 input, 1 CPU thread; round_trip = "
        "best compress + best decompress over repeats (as codec_speed), _median = median of per-repeat "
        "round trips",
        "headline": _headline(rows[0]),
        "tessera_settings": {
            "recipe": {
                k: getattr(tess_cfg, k)
                for k in ("name", "chunk", "topk", "bits", "transform", "ef_beta", "index")
            },
            "index_bits": "Elias-Fano: floor(log2(area / k)) low bits + unary high parts, 8.2 bits per index "
            "for top-54 of a 64x64 tile",
            "scale": "one fp32 per tile",
        },
        "sparseloco_settings": {k: s.settings for k, s in slc.items()},
        "sparseloco_source": _source_record(src, source, einops.__version__),
        "repeats": args.repeats,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(),
        "os_cpu_count": os.cpu_count(),
        "rows": rows,
    }
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record["headline"]))
    print("wrote", out_path)
    return 0


def _coders(tess_cfg: CodecConfig, slc: dict[str, SparseLoCo]) -> dict[str, Coder]:
    """Tessera's recipe and tiles codecs, then each SparseLoCo setting, by label."""

    def tessera(cfg: CodecConfig) -> Coder:
        return (lambda x: encode(x, cfg)), (lambda p, e: decode(e, cfg)), cfg

    if (tess_cfg.topk, tess_cfg.index, tess_cfg.transform) != (110, "elias-fano", "tiles"):
        raise ValueError(f"TESSERA_RECIPE's label does not describe {tess_cfg}")
    coders: dict[str, Coder] = {
        TESSERA_RECIPE: tessera(tess_cfg),
        "tessera previous recipe: top-32/4096 2-bit shaped DCT, packed indices": tessera(
            CodecConfig(topk=32, bits=2, transform="shaped", ef_beta=0.95)
        ),
        "tessera tiles (no DCT): top-32/4096 2-bit": tessera(CodecConfig(topk=32, bits=2, transform="tiles")),
    }
    for label, s in slc.items():
        coders["sparseloco " + label] = (s.compress, s.decompress, s)
    return coders


def _measure_shape(
    shape: tuple[int, ...], x: torch.Tensor, coders: dict[str, Coder], repeats: int
) -> dict[str, Any]:
    """Every codec on ``x``: its figures and the recipe's speed ratios to each SparseLoCo setting (also
    printed as one JSON line)."""
    n = x.numel()
    mb = 4 * n / 1e6
    inner = max(1, (1 << 20) // n)  # about 1M values per timed block for the small shapes
    times, extra = _time_codecs(shape, x, coders, repeats, inner)
    res = {label: _figures(mb, ts, extra[label]) for label, ts in times.items()}
    ratios = _ratios(res, "round_trip_mb_s")
    ratios_med = _ratios(res, "round_trip_mb_s_median")
    print(
        json.dumps(
            {
                "shape": list(shape),
                "ratios": ratios,
                "mb_s": {k: v["round_trip_mb_s"] for k, v in res.items()},
            }
        ),
        flush=True,
    )
    return {
        "shape": list(shape),
        "values": n,
        "input_mb": mb,
        "calls_per_timing": inner,
        "codecs": res,
        "ratio_tessera_recipe_over_sparseloco_round_trip": ratios,
        "ratio_tessera_recipe_over_sparseloco_round_trip_median": ratios_med,
    }


def _time_codecs(
    shape: tuple[int, ...], x: torch.Tensor, coders: dict[str, Coder], repeats: int, inner: int
) -> tuple[dict[str, list[tuple[float, float]]], dict[str, dict[str, float]]]:
    """Per codec: the (compress, decompress) seconds of each timed repeat, and from the warm-up pass its
    bits per value and relative L2 error (the decoded shape checked)."""
    n = x.numel()
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in coders}
    extra: dict[str, dict[str, float]] = {}
    for rep in range(repeats + 1):  # the first pass warms up (DCT bases, allocator) and is dropped
        for label, (fc, fd, obj) in coders.items():
            tce, tde, pay, out = time_pair(fc, fd, x, inner)
            if rep == 0:
                if isinstance(obj, CodecConfig):
                    bits = encoded_bits(shape, obj) / n
                else:
                    bits = 8 * SparseLoCo.payload_bytes(pay) / n
                if tuple(out.shape) != shape:
                    raise RuntimeError(f"{label}: decoded shape {tuple(out.shape)} != {shape}")
                extra[label] = {"bits_per_value": bits, "rel_l2_error": rel_err(x, out)}
                continue
            times[label].append((tce, tde))
    return times, extra


def _figures(mb: float, ts: list[tuple[float, float]], extra: dict[str, float]) -> dict[str, Any]:
    """One codec's figures on one shape: best compress, decompress and round trip, the median round trip."""
    c, d = min(t[0] for t in ts), min(t[1] for t in ts)
    med = statistics.median(t[0] + t[1] for t in ts)
    return {
        "compress_mb_s": round(mb / c, 2),
        "decompress_mb_s": round(mb / d, 2),
        "round_trip_mb_s": round(mb / (c + d), 2),
        "round_trip_mb_s_median": round(mb / med, 2),
        "round_trip_ms_each_repeat": [round(1e3 * (t[0] + t[1]), 2) for t in ts],
        "bits_per_value": round(extra["bits_per_value"], 4),
        "rel_l2_error_gaussian": round(extra["rel_l2_error"], 4),
    }


def _ratios(res: dict[str, dict[str, Any]], key: str) -> dict[str, float]:
    """The recipe's ``key`` over each SparseLoCo setting's."""
    tess = res[TESSERA_RECIPE][key]
    return {k: round(tess / v[key], 3) for k, v in res.items() if k.startswith("sparseloco")}


def _headline(head: dict[str, Any]) -> dict[str, Any]:
    """The 2048x2048 row's recipe against SparseLoCo's published settings (best and median)."""
    codecs: Any = head["codecs"]
    tess, pub = codecs[TESSERA_RECIPE], codecs[SPARSELOCO_PUBLISHED]
    return {
        "shape": head["shape"],
        "tessera_recipe_round_trip_mb_s": tess["round_trip_mb_s"],
        "sparseloco_published_round_trip_mb_s": pub["round_trip_mb_s"],
        "ratio_tessera_over_sparseloco": head["ratio_tessera_recipe_over_sparseloco_round_trip"][
            SPARSELOCO_PUBLISHED
        ],
        "tessera_recipe_round_trip_mb_s_median": tess["round_trip_mb_s_median"],
        "sparseloco_published_round_trip_mb_s_median": pub["round_trip_mb_s_median"],
        "ratio_tessera_over_sparseloco_median": head[
            "ratio_tessera_recipe_over_sparseloco_round_trip_median"
        ][SPARSELOCO_PUBLISHED],
    }


def _source_record(src: str, source: dict[str, Any], einops_version: str) -> dict[str, Any]:
    """Where Templar's compressor came from and how it was run."""
    return {
        "repo": TEMPLAR_REPO,
        "commit": source["commit"],
        "path": source["path"],
        "sha256": hashlib.sha256(src.encode("utf-8")).hexdigest(),
        "pipeline": "tplr/neurons.py: transformer.encode -> compressor.compress -> "
        "compressor.decompress -> transformer.decode",
        "how": f"{source['how']}, exec'd in memory (not part of Tessera), stub tplr.logger, einops {einops_version}",
    }


if __name__ == "__main__":
    raise SystemExit(main())
