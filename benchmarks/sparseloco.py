"""SparseLoCo as Templar runs it, reimplemented for the quality benchmark's simulation.

Source read (not copied): github.com/tplr-ai/templar at commit c2397ac524c9d9de550a2a126ed37505d090d69f
(v2.1.3): ``src/tplr/compress.py`` (``ChunkingTransformer``, ``TopKCompressor``: chunking, top-k, the
statistical quantiser), ``src/tplr/neurons.py`` (the miner's error feedback; the aggregation:
``batch_decompress(..., clip_norm=True)``), ``neurons/trainer.py`` (the outer step: ``SGD(lr=
outer_learning_rate)``) and ``hparams/hparams.json`` (``momentum_decay 0.95``, ``topk_compression 64``,
``target_chunk 64``, ``use_dct false``, ``quantization_bins 4``, ``quantization_range 6``,
``outer_learning_rate 1.0``). What it does, per parameter tensor:

- error feedback: ``e = 0.95 * e + outer_lr * delta`` (the pseudo-gradient), then ``e -= decode(C(e))``;
- chunks: each side cut at its largest divisor up to 64 (a vector in chunks of that width), no DCT;
- top-k by magnitude in each chunk, ``k = min(topk, chunk)`` rounded down to an even number, at least 2;
- indices packed at 12 bits each;
- values: the tensor's kept values centred on their mean, cut into 4 bins of width ``6 * std / 4`` around
  it, each sent as its bin (2 bits) and decoded as the mean of its bin's values (a 4-entry lookup table
  and the shift per tensor, fp32);
- aggregation: each miner's values scaled down to the median L2 norm of that tensor's contributions, then
  at every position the mean over the miners that sent it (``scatter_reduce(mean, include_self=False)``);
- outer step: plain SGD with lr 1 (no momentum: the error feedback is the momentum).

Payload counted as the SparseLoCo paper counts it: 12 index bits + 2 value bits per kept value, plus the
5 fp32 of each tensor's quantiser. (Templar's code at that commit ships the 2-bit bins in a uint8 each,
6 bits more per value on its own wire; the comparison here gives SparseLoCo the paper's 2 bits.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from benchmarks.tiles import tiles_of, untile
from training.diloco import merge

TEMPLAR = "github.com/tplr-ai/templar@c2397ac524c9d9de550a2a126ed37505d090d69f"
"""The repository and commit the reimplementation follows."""
EF_DECAY = 0.95
"""Templar's ``momentum_decay``: the error feedback's decay."""
BINS = 4
"""Templar's ``quantization_bins`` (2-bit values)."""
RANGE_SIGMAS = 6
"""Templar's ``quantization_range``: the bins span this many standard deviations."""
INDEX_BITS = 12
"""Bits per index (Templar packs two 12-bit indices into 3 bytes)."""


def chunk_topk(width: int, topk: int) -> int:
    """Values kept in a chunk of ``width``: ``min(topk, width)``, even, at least 2 (Templar's
    ``_clamp_topk``)."""
    k = max(min(topk, width), 2)
    return min(k - (k % 2), width)


def quantise(val: Tensor) -> Tensor:
    """Templar's statistical quantiser, applied and undone: every value replaced by the mean of its bin."""
    shift = val.mean()
    centred = val - shift
    n = centred.numel()
    std = centred.norm() / (n - 1) ** 0.5 if n > 1 else torch.zeros(())
    scale = RANGE_SIGMAS * std / BINS
    if not bool(torch.isfinite(scale)) or float(scale) == 0.0:
        scale = torch.ones(())
    q = (centred / scale + BINS // 2).round().clamp(0, BINS - 1).long().reshape(-1)
    sums = torch.zeros(BINS).scatter_add_(0, q, centred.reshape(-1))
    counts = torch.zeros(BINS).scatter_add_(0, q, torch.ones_like(centred.reshape(-1)))
    lookup = torch.where(counts > 0, sums / counts.clamp(min=1), torch.zeros_like(sums))
    return (lookup[q] + shift).reshape(val.shape)


class SparseLoCoCodec:
    """Templar's compressor as a :mod:`benchmarks.codec_arms` arm: ``topk`` values per chunk."""

    def __init__(self, topk: int = 64) -> None:
        self.topk = topk

    def compress(self, acc: Tensor, name: str, round: int) -> tuple[Tensor, int]:
        """What the receivers decode from ``acc`` and the payload bits (the paper's count)."""
        tiles, grid = tiles_of(acc)
        m = tiles.shape[0]
        if m == 0:
            return torch.zeros_like(acc), 0
        flat = tiles.reshape(m, -1)
        k = chunk_topk(flat.shape[1], self.topk)
        idx = flat.abs().topk(k, dim=1, sorted=False).indices
        vals = quantise(flat.gather(1, idx))
        sent = torch.zeros_like(flat).scatter_(1, idx, vals).reshape(tiles.shape)
        return untile(sent, tuple(acc.shape), grid), m * k * (INDEX_BITS + 2) + 5 * 32


def sparseloco_merge(contributions: Sequence[tuple[float, str, Mapping[str, Tensor]]]) -> dict[str, Tensor]:
    """Templar's aggregation: each contribution clipped to the median norm of its tensor's contributions,
    then per position the mean over the contributions non-zero there."""
    names = sorted({n for _, _, d in contributions for n in d})
    clipped: list[dict[str, Tensor]] = [dict(d) for _, _, d in contributions]
    for name in names:
        who = [i for i, (_, _, d) in enumerate(contributions) if name in d]
        norms = torch.stack([clipped[i][name].float().norm() for i in who])
        med = norms.median()
        for i, norm in zip(who, norms, strict=True):
            clipped[i][name] = clipped[i][name] * torch.clamp(med / (norm + 1e-8), max=1.0)
    return merge([(1.0, d) for d in clipped], "sender_mean")
