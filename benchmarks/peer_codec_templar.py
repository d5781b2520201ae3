"""Templar's SparseLoCo compressor for ``benchmarks.peer_codec``: reading the user's own copy of Templar's
``src/tplr/compress.py`` (a file, or a commit of a git directory), executing it in memory with a stub
``tplr`` package, and running it as Templar's miner does. Templar's code is never copied into Tessera."""

from __future__ import annotations

import importlib.util
import logging
import math
import subprocess
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

TEMPLAR_REPO = "github.com/tplr-ai/templar"
TEMPLAR_COMMIT = "c2397ac524c9d9de550a2a126ed37505d090d69f"
"""The Templar commit the published figures used (the default of ``--templar-commit``)."""
TEMPLAR_PATH = "src/tplr/compress.py"
"""Where the compressor lives in Templar's repository."""


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
