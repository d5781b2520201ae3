"""The codecs' error bounds (the module doc of ``training.codecs`` states them) and the measured error in
the same norms; ``tests/training/test_codecs.py`` holds each bound with hypothesis."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from training.codecregistry import codec_named
from training.codecs import DCT, DCT_RTOL, SHAPED, layout, layout_of, shaped_tiles, to_chunks
from training.config import CodecConfig


def error_bound(x: Tensor, cfg: CodecConfig) -> Tensor:
    """Per-chunk bound on the round-trip error (L-inf without transform: the codec's ``bound``; L2 with
    DCT); see the module doc."""
    lay = layout_of(tuple(x.shape), cfg)
    out = []
    levels = (1 << cfg.bits) - 1
    codec = codec_named(cfg.name)
    for chunks, k in to_chunks(x.detach().to("cpu"), lay, cfg):
        mags = chunks.abs()
        s = mags.amax(dim=1)  # the largest kept magnitude: the chunk's largest, kept by every codec
        q = torch.zeros_like(s) if cfg.bits == 32 else s / levels
        if cfg.transform in DCT:
            dropped = (
                (mags.pow(2).sum(dim=1) - mags.topk(k, dim=1).values.pow(2).sum(dim=1)).clamp_min(0).sqrt()
            )
            out.append(dropped + math.sqrt(k) * q + DCT_RTOL * mags.pow(2).sum(dim=1).sqrt())
        else:
            out.append(codec.bound(mags, k, q))
    return torch.cat(out) if out else torch.zeros(0)


def chunk_errors(x: Tensor, x_hat: Tensor, cfg: CodecConfig) -> Tensor:
    """Measured per-chunk error in the norm :func:`error_bound` bounds."""
    if cfg.transform in SHAPED:
        diff = shaped_tiles(x_hat.float() - x.float()).flatten(1)
        return diff.norm(dim=1) if cfg.transform == "shaped" else diff.abs().amax(dim=1)
    lay = layout(x.numel(), cfg)
    diff = (x_hat.float() - x.float()).reshape(-1)
    out = []
    for i in range(lay.n_chunks):
        seg = diff[i * cfg.chunk : (i + 1) * cfg.chunk]
        out.append(seg.norm() if cfg.transform == "dct" else seg.abs().max())
    return torch.stack(out) if out else torch.zeros(0)
