"""The codec's transforms: how a tensor is cut into chunks and in which basis a codec selects from them,
one declaration per transform, by wire name (``CodecConfig.transform``, the fifth entry of an update
header's ``c``).

A :class:`Transform` says everything that differs between transforms; the shared path
(``training.codecs``) calls it and never compares a transform's name:

- tiling: ``layout`` (the chunks of a tensor and how many values each keeps), ``groups`` (the chunks in
  wire order, by width), ``index_width`` (the bits of one plainly written position);
- ``forward`` (the chunks in the transform's basis) and ``inverse`` (one group of chunks rebuilt from
  its kept positions and values), then ``assemble`` (the tensor from the rebuilt chunks);
- ``bound`` (the per-chunk error bound of the round trip) and ``errors`` (the measured error in the same
  norm; ``training.codecbounds``);
- ``decode_cost`` (what rebuilding the chunks costs a decoder, in ``training.codeccost``'s units).

The four: ``none`` (chunks of ``chunk`` values of the flattened tensor), ``dct`` (those chunks as 64x64
tiles, the tail zero-padded, in the orthonormal 2-D DCT-II basis, as DeMo does), ``tiles`` (tiles that
follow the tensor's rows and columns, :func:`tile_grid`, as SparseLoCo does) and ``shaped`` (those tiles
in the DCT basis). Adding a transform is a declaration here, its name in a codec's ``transforms``
(``training.codecregistry``), and its tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from training.codeccost import NS_MAC, NS_OUT, NS_SLOT, NS_TILE
from training.codeclayout import (
    TILE,
    ChunkGroup,
    Keep,
    Layout,
    dct_matrix,
    flat_layout,
    position_bits,
    shaped_tiles,
    tile_grid,
    untile,
)
from training.codecregistry import Codec
from training.errors import CodecError
from training.exact import F64, quantised_idct_tiles, sparse_idct_tiles

DCT_RTOL = 1e-5
"""fp32 rounding allowance of the DCT round trip, relative to the chunk's L2 norm."""


def _scatter(group: ChunkGroup, idx: Tensor, values: Tensor) -> Tensor:
    """The chunks ``[m, width]`` (fp32) holding ``values`` at positions ``idx`` and zeros elsewhere."""
    g = torch.zeros(group.chunks, group.width, dtype=F64)
    g.scatter_(1, idx, values)
    return g.to(torch.float32)


def _idct(
    group: ChunkGroup, idx: Tensor, values: Tensor, quant: tuple[Tensor, Tensor] | None, bits: int
) -> Tensor:
    """The tiles ``[m, rows * cols]`` (fp32) whose DCT coefficients at ``idx`` are ``values``: with
    quantised ``(codes, scales)``, the exact integer inverse DCT of the numerators ``2q - (L - 1)`` times
    ``scale / (L - 1)`` per tile; with raw fp32 values, the elementwise one (``training.exact``)."""
    tc = group.cols
    if quant is None:
        return sparse_idct_tiles(idx // tc, idx % tc, values, group.rows, tc)
    codes, scales = quant
    levels = (1 << bits) - 1
    num = codes * 2 - levels
    factor = scales.to(F64) / levels
    return quantised_idct_tiles(idx // tc, idx % tc, num, factor, group.rows, bits, tc)


def _l2_bound(magnitudes: Tensor, k: int, q: Tensor) -> Tensor:
    """``||x_hat - x||_2`` per chunk in an orthonormal basis: the dropped coefficients' norm plus
    ``sqrt(k) * q``, up to fp32 rounding (:data:`DCT_RTOL` of the chunk's norm)."""
    squares = magnitudes.pow(2).sum(dim=1)
    dropped = (squares - magnitudes.topk(k, dim=1).values.pow(2).sum(dim=1)).clamp_min(0).sqrt()
    return dropped + math.sqrt(k) * q + DCT_RTOL * squares.sqrt()


class Transform(Protocol):
    """One transform's declaration (see the module doc)."""

    @property
    def name(self) -> str:
        """Wire name."""
        ...

    def layout(self, shape: tuple[int, ...], chunk: int, topk: int, keep: Keep) -> Layout:
        """The chunks of a tensor of ``shape`` and what each keeps (the codec's ``keep``)."""
        ...

    def index_width(self, shape: tuple[int, ...] | None, chunk: int) -> int:
        """Bits of one plainly written position in a chunk of a tensor of ``shape`` (without a shape, the
        bound for any tensor)."""
        ...

    def groups(self, shape: tuple[int, ...], lay: Layout, chunk: int) -> tuple[ChunkGroup, ...]:
        """The chunk groups of a tensor of ``shape`` in wire order (the full chunks, then the tail; a group
        may be empty)."""
        ...

    def forward(self, x: Tensor, lay: Layout, chunk: int) -> list[tuple[Tensor, int]]:
        """``[(chunks [m, width], k)]`` of ``x`` in the transform's basis, for the non-empty groups."""
        ...

    def inverse(
        self, group: ChunkGroup, idx: Tensor, values: Tensor, quant: tuple[Tensor, Tensor] | None, bits: int
    ) -> Tensor:
        """One group's chunks ``[m, width]`` (fp32) rebuilt from their kept positions ``idx [m, k]`` and
        float64 values ``[m, k]``; ``quant``: the int64 codes ``[m, k]`` and scales ``[m]`` at ``bits``
        bits (None at 32 bits)."""
        ...

    def assemble(self, flat: Tensor, shape: tuple[int, ...], lay: Layout) -> Tensor:
        """The tensor of ``shape`` from its rebuilt chunks, concatenated in wire order."""
        ...

    def bound(self, magnitudes: Tensor, k: int, q: Tensor, codec: Codec) -> Tensor:
        """Per-chunk bound of the round trip, given the chunks' absolute values in the basis, ``k`` kept
        and the quantisation step ``q`` per chunk (``codec``: its bound without a change of basis)."""
        ...

    def errors(self, x: Tensor, x_hat: Tensor, chunk: int) -> Tensor:
        """Measured per-chunk error of ``x_hat`` in the norm :meth:`bound` bounds."""
        ...

    def decode_cost(self, lay: Layout, bits: int) -> tuple[int, int, int]:
        """(output bytes, transient bytes, nanoseconds) of rebuilding a flattened tensor of layout ``lay``
        from its kept positions and values."""
        ...


@dataclass(frozen=True)
class FlatChunks:
    """``none``: chunks of ``chunk`` values of the flattened tensor, as they are; the L-inf bound is the
    codec's."""

    name: str = "none"

    def layout(self, shape: tuple[int, ...], chunk: int, topk: int, keep: Keep) -> Layout:
        """:func:`flat_layout` of the tensor's size."""
        return flat_layout(math.prod(shape), chunk, topk, keep)

    def index_width(self, shape: tuple[int, ...] | None, chunk: int) -> int:
        """``ceil(log2(chunk))``."""
        return position_bits(chunk)

    def _tail_width(self, lay: Layout, chunk: int) -> int:
        return lay.tail

    def groups(self, shape: tuple[int, ...], lay: Layout, chunk: int) -> tuple[ChunkGroup, ...]:
        """The full chunks, then the partial tail."""
        return (
            ChunkGroup(0, lay.full_chunks, chunk, lay.k_full),
            ChunkGroup(lay.full_chunks, 1 if lay.tail else 0, self._tail_width(lay, chunk), lay.k_tail),
        )

    def _chunks(self, x: Tensor, lay: Layout, chunk: int, pad: bool) -> list[tuple[Tensor, int]]:
        flat = x.reshape(-1).float()
        groups: list[tuple[Tensor, int]] = []
        if lay.full_chunks:
            groups.append((flat[: lay.full_chunks * chunk].view(lay.full_chunks, chunk), lay.k_full))
        if lay.tail:
            tail = flat[lay.full_chunks * chunk :].unsqueeze(0)
            if pad:
                tail = torch.nn.functional.pad(tail, (0, chunk - lay.tail))
            groups.append((tail, lay.k_tail))
        return groups

    def forward(self, x: Tensor, lay: Layout, chunk: int) -> list[tuple[Tensor, int]]:
        """The chunks as they are."""
        return self._chunks(x, lay, chunk, pad=False)

    def inverse(
        self, group: ChunkGroup, idx: Tensor, values: Tensor, quant: tuple[Tensor, Tensor] | None, bits: int
    ) -> Tensor:
        """The values scattered to their positions."""
        return _scatter(group, idx, values)

    def assemble(self, flat: Tensor, shape: tuple[int, ...], lay: Layout) -> Tensor:
        """The first ``numel`` values, reshaped."""
        return flat[: lay.numel].view(shape)

    def bound(self, magnitudes: Tensor, k: int, q: Tensor, codec: Codec) -> Tensor:
        """The codec's own bound (L-inf)."""
        return codec.bound(magnitudes, k, q)

    def _segment_error(self, seg: Tensor) -> Tensor:
        return seg.abs().max()

    def errors(self, x: Tensor, x_hat: Tensor, chunk: int) -> Tensor:
        """The error's norm over each chunk of the flattened tensor."""
        diff = (x_hat.float() - x.float()).reshape(-1)
        out = [self._segment_error(diff[i * chunk : (i + 1) * chunk]) for i in range(-(-x.numel() // chunk))]
        return torch.stack(out) if out else torch.zeros(0)

    def decode_cost(self, lay: Layout, bits: int) -> tuple[int, int, int]:
        """A float64 scatter buffer of the tensor, then fp32."""
        return 4 * lay.numel, 12 * lay.numel, NS_OUT * lay.numel


@dataclass(frozen=True)
class FlatDct(FlatChunks):
    """``dct``: the flattened chunks as 64x64 tiles (the tail zero-padded) in the orthonormal 2-D DCT-II
    basis; the L2 bound of :func:`_l2_bound`."""

    name: str = "dct"

    def _tail_width(self, lay: Layout, chunk: int) -> int:
        return chunk

    def forward(self, x: Tensor, lay: Layout, chunk: int) -> list[tuple[Tensor, int]]:
        """``D @ tile @ D.T`` of each (padded) chunk."""
        d = dct_matrix()
        return [
            ((d @ c.view(-1, TILE, TILE) @ d.T).reshape(c.shape[0], -1), k)
            for c, k in self._chunks(x, lay, chunk, pad=True)
        ]

    def inverse(
        self, group: ChunkGroup, idx: Tensor, values: Tensor, quant: tuple[Tensor, Tensor] | None, bits: int
    ) -> Tensor:
        """The inverse DCT of the sparse tiles (:func:`_idct`)."""
        return _idct(group, idx, values, quant, bits)

    def bound(self, magnitudes: Tensor, k: int, q: Tensor, codec: Codec) -> Tensor:
        """:func:`_l2_bound`."""
        return _l2_bound(magnitudes, k, q)

    def _segment_error(self, seg: Tensor) -> Tensor:
        return seg.norm()

    def decode_cost(self, lay: Layout, bits: int) -> tuple[int, int, int]:
        """Every tile rebuilt: raw fp32 by an elementwise loop over the kept slots, quantised values by a
        batched product over the gathered basis rows."""
        area = lay.n_chunks * TILE * TILE
        k = max(lay.k_full, lay.k_tail)
        if bits == 32:
            return 4 * area, 6 * 8 * area, NS_SLOT * k * area + NS_OUT * area
        return (
            4 * area,
            3 * 8 * lay.kept * TILE + 3 * 8 * area,
            NS_MAC * k * area + NS_TILE * area + NS_OUT * area,
        )


@dataclass(frozen=True)
class ShapedTiles:
    """``tiles``: tiles that follow the tensor's rows and columns (:func:`tile_grid`; nothing padded), each
    keeping ``ceil(topk * tile area / chunk)`` values as they are; the L-inf bound is the codec's."""

    name: str = "tiles"

    def layout(self, shape: tuple[int, ...], chunk: int, topk: int, keep: Keep) -> Layout:
        """One chunk per tile, each keeping the codec's ``keep`` of its area."""
        rows, cols, tr, tc = tile_grid(shape)
        tiles = (rows // tr) * (cols // tc) if rows and cols else 0
        return Layout(rows * cols, tiles, 0, keep(tr * tc, chunk, topk), 0)

    def index_width(self, shape: tuple[int, ...] | None, chunk: int) -> int:
        """``ceil(log2(tile area))`` of ``shape``'s tiles; without a shape, ``ceil(log2(chunk))``."""
        if shape is None:
            return position_bits(chunk)
        _, _, tr, tc = tile_grid(shape)
        return position_bits(tr * tc)

    def groups(self, shape: tuple[int, ...], lay: Layout, chunk: int) -> tuple[ChunkGroup, ...]:
        """Every tile (there is no tail)."""
        _, _, tr, tc = tile_grid(shape)
        return (ChunkGroup(0, lay.full_chunks, tr * tc, lay.k_full, tr, tc),)

    def forward(self, x: Tensor, lay: Layout, chunk: int) -> list[tuple[Tensor, int]]:
        """The tiles, flattened."""
        tiles = shaped_tiles(x.float())
        if tiles.shape[0] == 0:
            return []
        return [(tiles.reshape(tiles.shape[0], -1), lay.k_full)]

    def inverse(
        self, group: ChunkGroup, idx: Tensor, values: Tensor, quant: tuple[Tensor, Tensor] | None, bits: int
    ) -> Tensor:
        """The values scattered to their positions."""
        return _scatter(group, idx, values)

    def assemble(self, flat: Tensor, shape: tuple[int, ...], lay: Layout) -> Tensor:
        """The tiles put back in place."""
        return untile(flat, shape) if lay.numel else torch.zeros(shape)

    def bound(self, magnitudes: Tensor, k: int, q: Tensor, codec: Codec) -> Tensor:
        """The codec's own bound (L-inf)."""
        return codec.bound(magnitudes, k, q)

    def errors(self, x: Tensor, x_hat: Tensor, chunk: int) -> Tensor:
        """The error's largest magnitude in each tile."""
        return shaped_tiles(x_hat.float() - x.float()).flatten(1).abs().amax(dim=1)

    def decode_cost(self, lay: Layout, bits: int) -> tuple[int, int, int]:
        """A float64 scatter buffer of the tensor, then fp32."""
        return 4 * lay.numel, 12 * lay.numel, NS_OUT * lay.numel


@dataclass(frozen=True)
class ShapedDct(ShapedTiles):
    """``shaped``: the :class:`ShapedTiles` tiles in the 2-D DCT-II basis of their sides; the L2 bound of
    :func:`_l2_bound`. Its decode is priced as the scatter of :class:`ShapedTiles` (the price the network
    has used since the transform was added)."""

    name: str = "shaped"

    def forward(self, x: Tensor, lay: Layout, chunk: int) -> list[tuple[Tensor, int]]:
        """``D_r @ tile @ D_c.T`` of each tile."""
        tiles = shaped_tiles(x.float())
        if tiles.shape[0] == 0:
            return []
        dr, dc = dct_matrix(tiles.shape[1]), dct_matrix(tiles.shape[2])
        return [((dr @ tiles @ dc.T).reshape(tiles.shape[0], -1), lay.k_full)]

    def inverse(
        self, group: ChunkGroup, idx: Tensor, values: Tensor, quant: tuple[Tensor, Tensor] | None, bits: int
    ) -> Tensor:
        """The inverse DCT of the sparse tiles (:func:`_idct`)."""
        return _idct(group, idx, values, quant, bits)

    def bound(self, magnitudes: Tensor, k: int, q: Tensor, codec: Codec) -> Tensor:
        """:func:`_l2_bound`."""
        return _l2_bound(magnitudes, k, q)

    def errors(self, x: Tensor, x_hat: Tensor, chunk: int) -> Tensor:
        """The error's L2 norm over each tile."""
        return shaped_tiles(x_hat.float() - x.float()).flatten(1).norm(dim=1)


FLAT = FlatChunks()
"""``none``."""
FLAT_DCT = FlatDct()
"""``dct``."""
TILES = ShapedTiles()
"""``tiles``."""
SHAPED_DCT = ShapedDct()
"""``shaped``."""

TRANSFORMS: dict[str, Transform] = {t.name: t for t in (FLAT, FLAT_DCT, SHAPED_DCT, TILES)}
"""Every transform by wire name."""


def transform_named(name: str) -> Transform:
    """The declaration of the transform called ``name``; :class:`CodecError` if there is none."""
    try:
        return TRANSFORMS[name]
    except KeyError:
        raise CodecError(f"unknown transform {name!r} (known: {', '.join(TRANSFORMS)})") from None
