"""Pseudo-gradient codecs (chunked top-k, optional DCT, 2/4/8-bit values, packed indices) and error feedback.

A codec works tensor by tensor. The flattened tensor is cut into chunks of ``chunk`` values; the last,
partial chunk keeps ``ceil(topk * len / chunk)`` values so small tensors are not over-sent. With
``transform='dct'`` each chunk is a 64x64 tile (zero-padded) moved to the orthonormal 2-D DCT-II basis
(as DeMo does) before selection, and back after decoding.

Per chunk, ``topk`` keeps the k largest-magnitude values (indices sorted ascending, packed at
``ceil(log2(chunk))`` bits each, or with ``index='elias-fano'`` in the Elias-Fano code of a sorted list:
``floor(log2(width / k))`` low bits each and the high parts in unary, about ``2 + log2(width / k)`` bits
each); values are quantised uniformly and symmetrically to ``L = 2**bits``
levels ``s * (-1 + 2q/(L-1))`` with ``s`` the chunk's largest kept magnitude (one fp32 scale per chunk)
and packed at ``bits`` bits each; ``bits=32`` sends raw fp32 and no scale. ``dense`` keeps every value.
What differs between codecs (what a chunk keeps, which values, whether their positions travel, the
error bound) is each codec's one declaration in ``training.codecregistry``; this module is the shared path.

Error bounds (``training.codecbounds.error_bound`` computes them; ``tests/training/test_codecs.py`` holds them with hypothesis),
with ``q = s / (L - 1)`` (0 for 32 bits) and ``tau`` the smallest kept magnitude of a chunk:

- ``dense``: ``|x_hat_i - x_i| <= q`` for every value i of the chunk;
- ``topk``, no transform: ``|x_hat_i - x_i| <= max(tau, q)``: a dropped value is no larger than ``tau``;
- ``topk`` with DCT: ``||x_hat - x||_2 <= sqrt(sum of dropped coefficients^2) + sqrt(k) * q`` per chunk
  (the transform is orthonormal), up to fp32 rounding (``DCT_RTOL`` of the chunk norm).

Error feedback (``training.feedback.ErrorFeedback``, kept by the miner): ``e = ef_beta * e + delta``; send
``C(e)``; ``e = e - decode(C(e))``. Nothing dropped is lost, only delayed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch
from torch import Tensor

from training.bitpack import (
    elias_fano_bits,
    elias_fano_decode,
    elias_fano_encode,
    pack_bits,
    unpack_bits,
)
from training.codecregistry import codec_named
from training.config import CodecConfig
from training.errors import CodecError
from training.exact import F64, dct_basis, quantised_idct_tiles, sparse_idct_tiles

TILE = 64
"""Side of a DCT tile (``chunk`` must be ``TILE * TILE`` with the dct transform)."""
SHAPED = ("shaped", "tiles")
"""Transforms whose chunks are tiles that follow the tensor's shape (:func:`tile_grid`)."""
DCT = ("dct", "shaped")
"""Transforms that select in the 2-D DCT-II basis of each tile."""
DCT_RTOL = 1e-5
"""fp32 rounding allowance of the DCT round trip, relative to the chunk's L2 norm."""


@dataclass(frozen=True)
class Encoded:
    """One compressed tensor: its shape and its byte/float fields (``idx``, ``val``, ``scale``)."""

    shape: tuple[int, ...]
    fields: dict[str, Tensor]

    @property
    def nbytes(self) -> int:
        """Payload bytes of the fields."""
        return sum(t.numel() * t.element_size() for t in self.fields.values())


@dataclass(frozen=True)
class Layout:
    """How a tensor of ``numel`` values is chunked and how many values each chunk keeps."""

    numel: int
    full_chunks: int
    tail: int
    k_full: int
    k_tail: int

    @property
    def n_chunks(self) -> int:
        """Chunks including a partial tail."""
        return self.full_chunks + (1 if self.tail else 0)

    @property
    def kept(self) -> int:
        """Values sent."""
        return self.full_chunks * self.k_full + (self.k_tail if self.tail else 0)


def layout(numel: int, cfg: CodecConfig) -> Layout:
    """The chunk layout of a tensor with ``numel`` values (what each chunk keeps: the codec's ``keep``)."""
    full, tail = divmod(numel, cfg.chunk)
    keep = codec_named(cfg.name).keep
    return Layout(numel, full, tail, keep(cfg.chunk, cfg.chunk, cfg.topk), keep(tail, cfg.chunk, cfg.topk))


def _side(n: int) -> int:
    """The largest divisor of ``n`` that is at most :data:`TILE` (1 for an empty side)."""
    for d in range(min(n, TILE), 0, -1):
        if n % d == 0:
            return d
    return 1


def tile_grid(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """``_tile_grid`` of ``shape`` (cached: a validator asks for it about 100 times per update)."""
    return _tile_grid(tuple(shape))


@lru_cache(maxsize=4096)
def _tile_grid(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """``(R, C, tr, tc)`` of the ``shaped`` transform: the tensor seen as ``R x C`` (its first dimension by
    the rest; a vector or scalar is one row) cut into ``tr x tc`` tiles, each side the largest divisor up to
    :data:`TILE` of the tensor's, so no tile is padded."""
    if len(shape) >= 2:
        rows, cols = shape[0], math.prod(shape[1:])
    else:
        rows, cols = 1, math.prod(shape)
    return rows, cols, _side(rows), _side(cols)


def layout_of(shape: tuple[int, ...], cfg: CodecConfig) -> Layout:
    """``_layout_of`` of ``shape`` (cached, as :func:`tile_grid`; a :class:`Layout` is immutable)."""
    return _layout_of(tuple(shape), cfg)


@lru_cache(maxsize=4096)
def _layout_of(shape: tuple[int, ...], cfg: CodecConfig) -> Layout:
    """The chunk layout of a tensor of ``shape``: :func:`layout` of its size, or with the ``shaped``
    transform one chunk per tile of :func:`tile_grid`, each keeping ``ceil(topk * area / chunk)``."""
    if cfg.transform not in SHAPED:
        return layout(math.prod(shape), cfg)
    rows, cols, tr, tc = tile_grid(shape)
    area = tr * tc
    tiles = (rows // tr) * (cols // tc) if rows and cols else 0
    return Layout(rows * cols, tiles, 0, codec_named(cfg.name).keep(area, cfg.chunk, cfg.topk), 0)


def index_bits(cfg: CodecConfig, shape: tuple[int, ...] | None = None) -> int:
    """Bits per packed index (with the ``shaped`` transform, of ``shape``'s tile; without a shape, the
    bound ``ceil(log2(chunk))``)."""
    if cfg.transform in SHAPED and shape is not None:
        _, _, tr, tc = tile_grid(shape)
        return max(1, math.ceil(math.log2(tr * tc)))
    return max(1, math.ceil(math.log2(cfg.chunk)))


def index_groups(shape: tuple[int, ...], cfg: CodecConfig) -> list[tuple[int, int, int]]:
    """``(chunks, width, k)`` of each group of chunks of a tensor of ``shape`` that share a width and a
    ``k``, in wire order (the full chunks, then the tail), leaving out empty groups."""
    lay = layout_of(shape, cfg)
    if cfg.transform in SHAPED:
        _, _, tr, tc = tile_grid(shape)
        groups = [(lay.full_chunks, tr * tc, lay.k_full)]
    else:
        tail_width = cfg.chunk if cfg.transform == "dct" else lay.tail
        groups = [(lay.full_chunks, cfg.chunk, lay.k_full), (1 if lay.tail else 0, tail_width, lay.k_tail)]
    return [(m, w, k) for m, w, k in groups if m and k]


def field_specs(shape: tuple[int, ...], cfg: CodecConfig) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
    """Exact dtype and shape of each field for a tensor of ``shape`` (what a decoder checks first)."""
    lay = layout_of(shape, cfg)
    specs: dict[str, tuple[torch.dtype, tuple[int, ...]]] = {}
    indexed = codec_named(cfg.name).indexed
    if indexed and cfg.index == "elias-fano":
        bits = sum(m * elias_fano_bits(width, k) for m, width, k in index_groups(shape, cfg))
        specs["idx"] = (torch.uint8, (math.ceil(bits / 8),))
    elif indexed:
        specs["idx"] = (torch.uint8, (math.ceil(lay.kept * index_bits(cfg, shape) / 8),))
    if cfg.bits == 32:
        specs["val"] = (torch.float32, (lay.kept,))
    else:
        specs["val"] = (torch.uint8, (math.ceil(lay.kept * cfg.bits / 8),))
        specs["scale"] = (torch.float32, (lay.n_chunks,))
    return specs


def encoded_bits(shape: tuple[int, ...], cfg: CodecConfig) -> int:
    """Payload bits of one encoded tensor of ``shape``."""
    return sum(
        8 * math.prod(s) * torch.empty((), dtype=d).element_size()
        for d, s in field_specs(shape, cfg).values()
    )


def dct_matrix(n: int = TILE) -> Tensor:
    """Orthonormal DCT-II matrix ``D`` (``D @ D.T = I``) in fp32, the same bits on every machine
    (:func:`training.exact.dct_basis`)."""
    return dct_basis(n)


def shaped_tiles(x: Tensor) -> Tensor:
    """The ``shaped`` tiles of ``x`` in spatial order, ``[m, tr, tc]`` (row-major over the tile grid)."""
    rows, cols, tr, tc = tile_grid(tuple(x.shape))
    t = x.reshape(rows // tr, tr, cols // tc, tc).permute(0, 2, 1, 3)
    return t.reshape(-1, tr, tc)


def _untile(tiles: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Inverse of :func:`shaped_tiles`: ``[m, tr * tc]`` back to ``shape``."""
    rows, cols, tr, tc = tile_grid(shape)
    t = tiles.reshape(rows // tr, cols // tc, tr, tc).permute(0, 2, 1, 3)
    return t.reshape(shape)


def to_chunks(x: Tensor, lay: Layout, cfg: CodecConfig) -> list[tuple[Tensor, int]]:
    """``[(chunks [m, width], k)]`` for the full chunks and the tail, in the codec's basis."""
    if cfg.transform in SHAPED:
        tiles = shaped_tiles(x.float())
        if tiles.shape[0] == 0:
            return []
        if cfg.transform == "tiles":
            return [(tiles.reshape(tiles.shape[0], -1), lay.k_full)]
        dr, dc = dct_matrix(tiles.shape[1]), dct_matrix(tiles.shape[2])
        return [((dr @ tiles @ dc.T).reshape(tiles.shape[0], -1), lay.k_full)]
    flat = x.reshape(-1).float()
    groups: list[tuple[Tensor, int]] = []
    if lay.full_chunks:
        groups.append((flat[: lay.full_chunks * cfg.chunk].view(lay.full_chunks, cfg.chunk), lay.k_full))
    if lay.tail:
        tail = flat[lay.full_chunks * cfg.chunk :].unsqueeze(0)
        if cfg.transform == "dct":
            tail = torch.nn.functional.pad(tail, (0, cfg.chunk - lay.tail))
        groups.append((tail, lay.k_tail))
    if cfg.transform == "dct":
        d = dct_matrix()
        groups = [((d @ c.view(-1, TILE, TILE) @ d.T).reshape(c.shape[0], -1), k) for c, k in groups]
    return groups


def _quantise(v: Tensor, bits: int) -> tuple[Tensor, Tensor]:
    """Codes ``[m, k]`` and per-row scales of ``v`` at ``bits`` bits."""
    levels = (1 << bits) - 1
    scale = v.abs().amax(dim=1)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale)).unsqueeze(1)
    codes = torch.round((v / safe + 1.0) * (levels / 2.0)).clamp_(0, levels).to(torch.int64)
    return codes, scale


def _dequantise(codes: Tensor, scale: Tensor, bits: int) -> Tensor:
    """float64 values ``[m, k]``: elementwise, so the same bits on every machine (``training.exact``)."""
    levels = (1 << bits) - 1
    return (codes.to(F64) * (2.0 / levels) - 1.0) * scale.to(F64).unsqueeze(1)


def encode(x: Tensor, cfg: CodecConfig) -> Encoded:
    """Compress one tensor (any shape, cast to fp32)."""
    if not bool(torch.isfinite(x).all()):
        raise CodecError("cannot encode non-finite values")
    x = x.detach().to("cpu")
    lay = layout_of(tuple(x.shape), cfg)
    codec = codec_named(cfg.name)
    idx_parts: list[Tensor] = []
    idx_groups: list[tuple[Tensor, int]] = []
    val_parts: list[Tensor] = []
    for chunks, k in to_chunks(x, lay, cfg):
        idx, values = codec.select(chunks, k)
        if idx is not None:
            idx_parts.append(idx)
            idx_groups.append((idx, chunks.shape[1]))
        val_parts.append(values)
    fields: dict[str, Tensor] = {}
    if codec.indexed and cfg.index == "elias-fano":
        fields["idx"] = elias_fano_encode(idx_groups)
    elif codec.indexed:
        idx_all = (
            torch.cat([i.reshape(-1) for i in idx_parts]) if idx_parts else torch.zeros(0, dtype=torch.int64)
        )
        fields["idx"] = pack_bits(idx_all, index_bits(cfg, tuple(x.shape)))
    if cfg.bits == 32:
        fields["val"] = torch.cat([v.reshape(-1) for v in val_parts] or [torch.zeros(0)]).contiguous()
    else:
        quant = [_quantise(v, cfg.bits) for v in val_parts]
        codes_all = [c.reshape(-1) for c, _ in quant] or [torch.zeros(0, dtype=torch.int64)]
        fields["val"] = pack_bits(torch.cat(codes_all), cfg.bits)
        fields["scale"] = torch.cat([s for _, s in quant] or [torch.zeros(0)]).contiguous()
    return Encoded(tuple(x.shape), fields)


def check_fields(enc: Encoded, cfg: CodecConfig) -> None:
    """Raise :class:`CodecError` unless the fields have exactly the dtypes and shapes of ``field_specs``."""
    specs = field_specs(enc.shape, cfg)
    if set(enc.fields) != set(specs):
        raise CodecError(f"fields {sorted(enc.fields)} != {sorted(specs)}")
    for name, (dtype, shape) in specs.items():
        t = enc.fields[name]
        if t.dtype != dtype or tuple(t.shape) != shape:
            raise CodecError(f"field {name}: {t.dtype} {tuple(t.shape)} != {dtype} {shape}")


def _decoded_values(enc: Encoded, cfg: CodecConfig, lay: Layout) -> tuple[Tensor, Tensor]:
    """(float64 values, int64 codes) of ``enc``'s kept values (no codes at 32 bits); :class:`CodecError`
    on a bad scale or a non-finite value."""
    if cfg.bits == 32:
        values = enc.fields["val"].to(F64)
        codes = torch.zeros(0, dtype=torch.int64)
    else:
        codes = unpack_bits(enc.fields["val"], cfg.bits, lay.kept)
        scales = enc.fields["scale"].float()
        if not bool(torch.isfinite(scales).all()) or bool((scales < 0).any()):
            raise CodecError("scales must be finite and non-negative")
        parts = []
        if lay.full_chunks:
            c = codes[: lay.full_chunks * lay.k_full].view(lay.full_chunks, lay.k_full)
            parts.append(_dequantise(c, scales[: lay.full_chunks], cfg.bits).reshape(-1))
        if lay.tail:
            c = codes[lay.full_chunks * lay.k_full :].view(1, lay.k_tail)
            parts.append(_dequantise(c, scales[lay.full_chunks :], cfg.bits).reshape(-1))
        values = torch.cat(parts) if parts else torch.zeros(0, dtype=F64)
    if not bool(torch.isfinite(values).all()):
        raise CodecError("non-finite values")
    return values, codes


def _sparse_groups(
    enc: Encoded, cfg: CodecConfig, lay: Layout, values: Tensor, codes: Tensor
) -> list[Tensor]:
    """The ``topk`` chunks rebuilt from their indices and values, in the codec's basis turned back to
    values: ``[m, width]`` fp32 per group (full chunks, then the tail)."""
    width_tail = cfg.chunk if cfg.transform == "dct" else lay.tail
    width_full = cfg.chunk
    tr = tc = TILE  # the tile's sides (with a transform)
    if cfg.transform in SHAPED:
        _, _, tr, tc = tile_grid(enc.shape)
        width_full = tr * tc
    if cfg.index == "elias-fano":
        idx = elias_fano_decode(enc.fields["idx"], index_groups(enc.shape, cfg))
    else:
        idx = unpack_bits(enc.fields["idx"], index_bits(cfg, enc.shape), lay.kept)
    groups: list[Tensor] = []
    pos = 0
    for first, m, width, k in (
        (0, lay.full_chunks, width_full, lay.k_full),
        (lay.full_chunks, 1 if lay.tail else 0, width_tail, lay.k_tail),
    ):
        if m == 0:
            continue
        i = idx[pos : pos + m * k].view(m, k)
        if bool((i >= width).any()) or bool((i[:, 1:] <= i[:, :-1]).any()):
            raise CodecError("indices out of range or not strictly increasing")
        v = values[pos : pos + m * k].view(m, k)
        if cfg.transform in DCT and cfg.bits != 32:
            # exact integer inverse DCT of the numerators 2q - (L - 1), times scale / (L - 1) per tile
            levels = (1 << cfg.bits) - 1
            num = codes[pos : pos + m * k].view(m, k) * 2 - levels
            factor = enc.fields["scale"][first : first + m].to(F64) / levels
            groups.append(quantised_idct_tiles(i // tc, i % tc, num, factor, tr, cfg.bits, tc))
        elif cfg.transform in DCT:
            groups.append(sparse_idct_tiles(i // tc, i % tc, v, tr, tc))
        else:
            g = torch.zeros(m, width, dtype=F64)
            g.scatter_(1, i, v)
            groups.append(g.to(torch.float32))
        pos += m * k
    return groups


def decode(enc: Encoded, cfg: CodecConfig) -> Tensor:
    """Decompress to an fp32 tensor of ``enc.shape``. Raises :class:`CodecError` on malformed input.

    The result is defined by IEEE-754 alone (dequantisation and the inverse DCT are fixed sequences of
    elementwise float64 operations, rounded once to fp32; see ``training.exact``), so every validator
    decodes the same bits on any CPU or GPU and the merge built on it is reproducible.
    """
    check_fields(enc, cfg)
    lay = layout_of(enc.shape, cfg)
    values, codes = _decoded_values(enc, cfg, lay)
    if codec_named(cfg.name).indexed:
        groups = _sparse_groups(enc, cfg, lay, values, codes)
    else:
        groups = [values.to(torch.float32)]
    flat = torch.cat([g.reshape(-1) for g in groups]) if groups else torch.zeros(0)
    if cfg.transform in SHAPED:
        return _untile(flat, enc.shape) if lay.numel else torch.zeros(enc.shape)
    return flat[: lay.numel].view(enc.shape)
