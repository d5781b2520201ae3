"""Bit packing of the codec's fields: fixed-width integers (:func:`pack_bits`) and the Elias-Fano code of
sorted index lists (:func:`elias_fano_encode`), both little-endian in bit order.

Pure functions of their integers: the same bytes on every machine, and a decoder that accepts one byte
string per list (padding bits must be zero), so an update's digest has one preimage per content.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from training.errors import CodecError


def pack_bits(values: Tensor, width: int) -> Tensor:
    """Pack non-negative integers ``< 2**width`` into bytes, little-endian bit order.

    Value i's bit j is bit ``i * width + j`` of the stream; byte b holds stream bits ``8b .. 8b + 7``
    (least significant first). Widths 1, 2, 4, 8 and 12 take vectorised fast paths with the same output.
    """
    v = values.reshape(-1).to(torch.int64)
    n = v.numel()
    if width in (1, 2, 4, 8):
        per = 8 // width
        v = torch.nn.functional.pad(v, (0, (-n) % per)).view(-1, per)
        shifts = torch.arange(per, dtype=torch.int64) * width
        return (v << shifts).sum(dim=1).to(torch.uint8)
    if width == 12:
        v = torch.nn.functional.pad(v, (0, n % 2)).view(-1, 2)
        a, b = v[:, 0], v[:, 1]
        out = torch.stack([a & 0xFF, (a >> 8) | ((b & 0xF) << 4), b >> 4], dim=1).reshape(-1)
        return out[: (n * 12 + 7) // 8].to(torch.uint8)
    arr = v.numpy()
    bits = ((arr[:, None] >> np.arange(width, dtype=np.int64)) & 1).astype(np.uint8)
    return torch.from_numpy(np.packbits(bits.reshape(-1), bitorder="little").copy())


def unpack_bits(data: Tensor, width: int, count: int) -> Tensor:
    """Inverse of :func:`pack_bits`: ``count`` integers (``int64``)."""
    if width in (1, 2, 4, 8):
        per = 8 // width
        shifts = torch.arange(per, dtype=torch.int64) * width
        return ((data.to(torch.int64).unsqueeze(1) >> shifts) & ((1 << width) - 1)).reshape(-1)[:count]
    if width == 12:
        d = torch.nn.functional.pad(data.to(torch.int64), (0, (-data.numel()) % 3)).view(-1, 3)
        a = d[:, 0] | ((d[:, 1] & 0xF) << 8)
        b = (d[:, 1] >> 4) | (d[:, 2] << 4)
        return torch.stack([a, b], dim=1).reshape(-1)[:count]
    bits = np.unpackbits(data.numpy(), bitorder="little", count=count * width).reshape(count, width)
    return torch.from_numpy((bits.astype(np.int64) << np.arange(width, dtype=np.int64)).sum(axis=1))


def elias_fano_low(width: int, k: int) -> int:
    """Low bits per index of the Elias-Fano code of ``k`` sorted indices below ``width``:
    ``floor(log2(width / k))`` (0 when ``k >= width``)."""
    return max(0, (width // k).bit_length() - 1)


def _fixed_width(width: int) -> int:
    """Bits of one index below ``width`` written plainly."""
    return max(1, math.ceil(math.log2(width)))


def _elias_fano_shorter(width: int, k: int) -> bool:
    """Whether the Elias-Fano code of ``k`` indices below ``width`` is shorter than ``k`` plain indices
    (it is not for a chunk that keeps one or two values, as the tiles of short vectors do)."""
    low = elias_fano_low(width, k)
    return k * low + k + ((width - 1) >> low) + 1 < k * _fixed_width(width)


def elias_fano_bits(width: int, k: int) -> int:
    """Bits of one chunk's index code with ``index='elias-fano'``: ``k`` low parts of ``L`` bits, then the
    high parts (``index >> L``) as a bitmap of ``k + ((width - 1) >> L) + 1`` bits with a one at
    ``high_i + i``; or, where that is not shorter, ``k`` plain indices of ``ceil(log2(width))`` bits."""
    if not _elias_fano_shorter(width, k):
        return k * _fixed_width(width)
    low = elias_fano_low(width, k)
    return k * low + k + ((width - 1) >> low) + 1


def elias_fano_encode(groups: list[tuple[Tensor, int]]) -> Tensor:
    """The ``idx`` field of sorted index groups ``[(idx [m, k], width)]``: per group the low bits of every
    index (chunk-major, least significant first), then every chunk's high-part bitmap (or, for a group
    where that is not shorter, its indices plainly); packed 1 bit each."""
    streams: list[Tensor] = []
    for idx, width in groups:
        m, k = idx.shape
        if m == 0 or k == 0:
            continue
        if not _elias_fano_shorter(width, k):
            plain = (idx.unsqueeze(2) >> torch.arange(_fixed_width(width), dtype=torch.int64)) & 1
            streams.append(plain.reshape(-1))
            continue
        low = elias_fano_low(width, k)
        lows = (idx.unsqueeze(2) >> torch.arange(low, dtype=torch.int64)) & 1
        bitmap = torch.zeros(m, k + ((width - 1) >> low) + 1, dtype=torch.int64)
        bitmap.scatter_(1, (idx >> low) + torch.arange(k, dtype=torch.int64), 1)
        streams += [lows.reshape(-1), bitmap.reshape(-1)]
    return pack_bits(torch.cat(streams) if streams else torch.zeros(0, dtype=torch.int64), 1)


def elias_fano_decode(data: Tensor, groups: list[tuple[int, int, int]]) -> Tensor:
    """The flat indices of an ``elias-fano`` ``idx`` field (inverse of :func:`elias_fano_encode`).

    Raises :class:`CodecError` unless every chunk's bitmap holds exactly ``k`` ones and the padding bits of
    the last byte are zero (one byte string per update: the field is canonical)."""
    total = sum(m * elias_fano_bits(width, k) for m, width, k in groups)
    bits = unpack_bits(data, 1, data.numel() * 8)
    if bool(bits[total:].any()):
        raise CodecError("Elias-Fano index: padding bits must be zero")
    out: list[Tensor] = []
    pos = 0
    for m, width, k in groups:
        if not _elias_fano_shorter(width, k):
            w = _fixed_width(width)
            plain = bits[pos : pos + m * k * w].view(m * k, w)
            pos += m * k * w
            out.append((plain << torch.arange(w, dtype=torch.int64)).sum(dim=1))
            continue
        low = elias_fano_low(width, k)
        lows = bits[pos : pos + m * k * low].view(m, k, low)
        pos += m * k * low
        span = k + ((width - 1) >> low) + 1
        bitmap = bits[pos : pos + m * span].view(m, span)
        pos += m * span
        if bool((bitmap.sum(dim=1) != k).any()):
            raise CodecError("Elias-Fano index: a chunk's high part must hold exactly k ones")
        high = bitmap.nonzero()[:, 1].view(m, k) - torch.arange(k, dtype=torch.int64)
        value = (lows << torch.arange(low, dtype=torch.int64)).sum(dim=2)
        out.append(((high << low) | value).reshape(-1))
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.int64)
