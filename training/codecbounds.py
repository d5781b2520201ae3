"""The codecs' error bounds (the module doc of ``training.codecs`` states them) and the measured error in
the same norms; ``tests/training/test_codecs.py`` holds each bound with hypothesis. The norm and the bound
are the transform's (``training.codectransforms``): without a change of basis, the codec's own L-inf bound;
in the DCT basis, L2."""

from __future__ import annotations

import torch
from torch import Tensor

from training.codecs import CodecLike, layout_of, resolve


def error_bound(x: Tensor, cfg: CodecLike) -> Tensor:
    """Per-chunk bound on the round-trip error (the transform's ``bound``); see the module doc."""
    c = resolve(cfg)
    lay = layout_of(tuple(x.shape), c)
    out = []
    levels = (1 << c.bits) - 1
    for chunks, k in c.transform.forward(x.detach().to("cpu"), lay, c.chunk):
        mags = chunks.abs()
        s = mags.amax(dim=1)  # the largest kept magnitude: the chunk's largest, kept by every codec
        q = torch.zeros_like(s) if c.bits == 32 else s / levels
        out.append(c.transform.bound(mags, k, q, c.codec))
    return torch.cat(out) if out else torch.zeros(0)


def chunk_errors(x: Tensor, x_hat: Tensor, cfg: CodecLike) -> Tensor:
    """Measured per-chunk error in the norm :func:`error_bound` bounds (the transform's ``errors``)."""
    c = resolve(cfg)
    return c.transform.errors(x, x_hat, c.chunk)
