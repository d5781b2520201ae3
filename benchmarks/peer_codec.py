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

* Tessera recipe: ``training.codecs.encode`` + ``decode`` with ``CodecConfig.recipe()``: top-32 of every
  4,096 DCT coefficients in 64x64 tiles that follow the tensor's shape (``transform="shaped"``), 2-bit
  values, one fp32 scale per tile, 12-bit indices. Also Tessera's ``tiles`` codec (the same without DCT).
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
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import logging
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from training.codecs import decode, encode, encoded_bits
from training.config import CodecConfig

TEMPLAR_REPO = "github.com/tplr-ai/templar"
TEMPLAR_COMMIT = "c2397ac524c9d9de550a2a126ed37505d090d69f"
"""The Templar commit the published figures used (the default of ``--templar-commit``)."""
TEMPLAR_PATH = "src/tplr/compress.py"
"""Where the compressor lives in Templar's repository."""

TESSERA_RECIPE = "tessera recipe: top-32/4096 2-bit shaped DCT"
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


def _git(cwd: Path, *args: str) -> str | None:
    """Stdout of ``git -C cwd args``, or None when git fails."""
    done = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def _checkout_commit(path: Path) -> str | None:
    """The commit of the Templar checkout holding ``path`` at src/tplr/compress.py (``-dirty`` if the file
    differs from it), or None when ``path`` is not there in a git work tree."""
    top = _git(path.parent, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() / TEMPLAR_PATH != path:
        return None
    head = _git(path.parent, "rev-parse", "HEAD")
    if head is None:
        return None
    changed = _git(path.parent, "status", "--porcelain", "--", str(path))
    return head + ("-dirty" if changed else "")


def read_templar_source(
    compress_path: str | None, git_dir: str | None, commit: str
) -> tuple[str, dict[str, Any]]:
    """Templar's ``compress.py`` source text and where it came from (for the record).

    Reads ``compress_path`` if given, else ``git show commit:src/tplr/compress.py`` in ``git_dir``.
    Raises ``SystemExit`` with a message when the file or the commit cannot be read.
    """
    if compress_path is not None:
        path = Path(compress_path)
        try:
            src = path.read_text(encoding="utf-8")
        except OSError as e:
            raise SystemExit(f"cannot read Templar's compress.py at {compress_path!r}: {e}") from None
        source = {
            "commit": _checkout_commit(path.resolve()),
            "path": TEMPLAR_PATH if path.as_posix().endswith(TEMPLAR_PATH) else path.name,
            "how": "verbatim file of a local checkout",
        }
        return src, source
    assert git_dir is not None
    shown = subprocess.run(
        ["git", "--git-dir", git_dir, "show", f"{commit}:{TEMPLAR_PATH}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if shown.returncode != 0:
        raise SystemExit(
            f"cannot read {commit}:{TEMPLAR_PATH} from the git directory {git_dir!r}: {shown.stderr.strip()}"
        )
    return shown.stdout, {"commit": commit, "path": TEMPLAR_PATH, "how": "verbatim file read with git show"}


def load_templar_compress(src: str, origin: str) -> types.ModuleType:
    """Execute Templar's ``compress.py`` source as a module in memory (nothing is written to disk).

    ``tplr.logger`` comes from a stub ``tplr`` package, present only while the module is executed.
    Raises ``SystemExit`` with a message when einops is missing or the source is not Templar's compressor.
    """
    if importlib.util.find_spec("einops") is None:
        raise SystemExit(
            "Templar's compress.py needs einops, which Tessera does not depend on: pip install einops"
        )
    stub = types.ModuleType("tplr")
    stub.logger = logging.getLogger("tplr")  # type: ignore[attr-defined]
    saved = sys.modules.get("tplr")
    sys.modules["tplr"] = stub
    mod = types.ModuleType("tplr.compress")
    mod.__file__ = origin
    try:
        exec(compile(src, origin, "exec"), mod.__dict__)
    except ModuleNotFoundError as e:
        raise SystemExit(f"Templar's compress.py ({origin}) needs {e.name!r}: pip install {e.name}") from None
    except Exception as e:  # any failure of foreign code: say which file, no traceback
        raise SystemExit(f"cannot load Templar's compress.py ({origin}): {e}") from None
    finally:
        if saved is None:
            sys.modules.pop("tplr", None)
        else:
            sys.modules["tplr"] = saved
    for name in ("ChunkingTransformer", "TopKCompressor"):
        if not hasattr(mod, name):
            raise SystemExit(f"{origin} has no {name}: not Templar's src/tplr/compress.py?")
    return mod


class _OneParam(torch.nn.Module):
    """What ChunkingTransformer.__init__ reads: named_parameters of a model holding tensors of these shapes."""

    def __init__(self, shapes: Sequence[tuple[int, ...]]) -> None:
        super().__init__()
        self.ps = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(s)) for s in shapes])


class SparseLoCo:
    """The miner's round trip of Templar's tplr/neurons.py (encode, compress, decompress, decode) on one tensor."""

    def __init__(
        self,
        tc: Any,
        shapes: Sequence[tuple[int, ...]],
        target_chunk: int,
        topk: int,
        use_dct: bool,
        bins: int,
        qrange: float,
    ) -> None:
        self.transformer: Any = tc.ChunkingTransformer(_OneParam(shapes), target_chunk=target_chunk)
        self.compressor: Any = tc.TopKCompressor(
            use_quantization=True, quantization_bins=bins, quantization_range=qrange
        )
        self.topk, self.use_dct, self.bins = topk, use_dct, bins
        self.settings: dict[str, Any] = {
            "target_chunk": target_chunk,
            "tile": f"{target_chunk}x{target_chunk} (largest divisor of each side <= target_chunk)",
            "topk_per_tile": topk,
            "use_dct": use_dct,
            "quantization_bins": bins,
            "value_bits_coded": math.ceil(math.log2(bins)),
            "value_bits_sent": 8,
            "quantization_range_sigmas": qrange,
            "index_bits": 12,
        }

    def compress(self, x: torch.Tensor) -> Any:
        """Templar's payload ``(idxs, vals, xshape, totalk, quant_params)`` for ``x``."""
        enc = self.transformer.encode(x, use_dct=self.use_dct)
        return self.compressor.compress(enc, self.topk)

    def decompress(self, p: torch.Tensor, payload: Any) -> torch.Tensor:
        """The dense tensor of ``payload``; ``p`` is the parameter it belongs to (shape, dtype, device)."""
        idxs, vals, xshape, totalk, qp = payload
        dec = self.compressor.decompress(p, idxs, vals, xshape, totalk, qp)
        out: torch.Tensor = self.transformer.decode(dec, use_dct=self.use_dct)
        return out

    @staticmethod
    def payload_bytes(payload: Any) -> int:
        """uint8 packed indices + uint8 codes + quant params (shift, scale, offset, lookup of n_bins fp32)."""
        idxs, vals, _, _, qp = payload
        return int(
            idxs.numel() * idxs.element_size() + vals.numel() * vals.element_size() + 4 * (3 + qp[3].numel())
        )


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
    tess_tiles = CodecConfig(topk=32, bits=2, transform="tiles")
    slc = {
        "published (hparams.json): top-64/4096, no DCT, 4 bins": SparseLoCo(tc, SHAPES, 64, 64, False, 4, 6),
        "budget-matched: top-32/4096, no DCT, 4 bins": SparseLoCo(tc, SHAPES, 64, 32, False, 4, 6),
        "top-32/4096 with DCT (use_dct=true), 4 bins": SparseLoCo(tc, SHAPES, 64, 32, True, 4, 6),
    }

    def tessera(cfg: CodecConfig) -> tuple[Compress, Decompress, CodecConfig]:
        return (lambda x: encode(x, cfg)), (lambda p, e: decode(e, cfg)), cfg

    coders: dict[str, tuple[Compress, Decompress, CodecConfig | SparseLoCo]] = {
        TESSERA_RECIPE: tessera(tess_cfg),
        "tessera tiles (no DCT): top-32/4096 2-bit": tessera(tess_tiles),
    }
    for label, s in slc.items():
        coders["sparseloco " + label] = (s.compress, s.decompress, s)

    rows: list[dict[str, Any]] = []
    for shape in SHAPES:
        x = tensors[shape]
        n = x.numel()
        mb = 4 * n / 1e6
        inner = max(1, (1 << 20) // n)  # about 1M values per timed block for the small shapes
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in coders}
        extra: dict[str, dict[str, float]] = {}
        for rep in range(args.repeats + 1):  # the first pass warms up (DCT bases, allocator) and is dropped
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
        res: dict[str, dict[str, Any]] = {}
        for label, ts in times.items():
            c, d = min(t[0] for t in ts), min(t[1] for t in ts)
            med = statistics.median(t[0] + t[1] for t in ts)
            res[label] = {
                "compress_mb_s": round(mb / c, 2),
                "decompress_mb_s": round(mb / d, 2),
                "round_trip_mb_s": round(mb / (c + d), 2),
                "round_trip_mb_s_median": round(mb / med, 2),
                "round_trip_ms_each_repeat": [round(1e3 * (t[0] + t[1]), 2) for t in ts],
                "bits_per_value": round(extra[label]["bits_per_value"], 4),
                "rel_l2_error_gaussian": round(extra[label]["rel_l2_error"], 4),
            }
        tess = res[TESSERA_RECIPE]["round_trip_mb_s"]
        tess_med = res[TESSERA_RECIPE]["round_trip_mb_s_median"]
        ratios = {
            k: round(tess / v["round_trip_mb_s"], 3) for k, v in res.items() if k.startswith("sparseloco")
        }
        ratios_med = {
            k: round(tess_med / v["round_trip_mb_s_median"], 3)
            for k, v in res.items()
            if k.startswith("sparseloco")
        }
        row = {
            "shape": list(shape),
            "values": n,
            "input_mb": mb,
            "calls_per_timing": inner,
            "codecs": res,
            "ratio_tessera_recipe_over_sparseloco_round_trip": ratios,
            "ratio_tessera_recipe_over_sparseloco_round_trip_median": ratios_med,
        }
        rows.append(row)
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

    head = rows[0]
    head_codecs: Any = head["codecs"]
    head_ratios: Any = head["ratio_tessera_recipe_over_sparseloco_round_trip"]
    head_ratios_med: Any = head["ratio_tessera_recipe_over_sparseloco_round_trip_median"]
    record = {
        "what": "compress+decompress (to a dense fp32 tensor) MB/s of fp32 input, 1 CPU thread; round_trip = "
        "best compress + best decompress over repeats (as codec_speed), _median = median of per-repeat "
        "round trips",
        "headline": {
            "shape": head["shape"],
            "tessera_recipe_round_trip_mb_s": head_codecs[TESSERA_RECIPE]["round_trip_mb_s"],
            "sparseloco_published_round_trip_mb_s": head_codecs[SPARSELOCO_PUBLISHED]["round_trip_mb_s"],
            "ratio_tessera_over_sparseloco": head_ratios[SPARSELOCO_PUBLISHED],
            "tessera_recipe_round_trip_mb_s_median": head_codecs[TESSERA_RECIPE]["round_trip_mb_s_median"],
            "sparseloco_published_round_trip_mb_s_median": head_codecs[SPARSELOCO_PUBLISHED][
                "round_trip_mb_s_median"
            ],
            "ratio_tessera_over_sparseloco_median": head_ratios_med[SPARSELOCO_PUBLISHED],
        },
        "tessera_settings": {
            "recipe": {
                k: getattr(tess_cfg, k) for k in ("name", "chunk", "topk", "bits", "transform", "ef_beta")
            },
            "index_bits": "ceil(log2(tile area)) = 12 for 64x64 tiles",
            "scale": "one fp32 per tile",
        },
        "sparseloco_settings": {k: s.settings for k, s in slc.items()},
        "sparseloco_source": {
            "repo": TEMPLAR_REPO,
            "commit": source["commit"],
            "path": source["path"],
            "sha256": hashlib.sha256(src.encode("utf-8")).hexdigest(),
            "pipeline": "tplr/neurons.py: transformer.encode -> compressor.compress -> "
            "compressor.decompress -> transformer.decode",
            "how": f"{source['how']}, exec'd in memory (not part of Tessera), stub tplr.logger, "
            f"einops {einops.__version__}",
        },
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


if __name__ == "__main__":
    raise SystemExit(main())
