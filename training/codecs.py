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
error bound without a transform) is each codec's one declaration in ``training.codecregistry``; what
differs between transforms (the tiling, the basis, the error bound, the decode cost) each transform's in
``training.codectransforms``; what differs between index codings (the field's bits, pack, unpack, cost)
each coding's in ``training.indexcodings``. A :class:`CodecConfig` is resolved once into a
:class:`ResolvedCodec` holding the three (:func:`resolve`); every function here takes either and resolves
at most once, so a caller that handles many tensors resolves first and passes the resolved codec down.
This module is the shared path: chunking, quantisation, fields, and no name compared.

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

from training.bitpack import pack_bits, unpack_bits
from training.codeclayout import Layout, flat_layout
from training.codecregistry import Codec, codec_named
from training.codectransforms import Transform, transform_named
from training.config import CodecConfig
from training.errors import CodecError
from training.exact import F64
from training.indexcodings import Group, IndexCoding, field_bytes, index_coding_named


@dataclass(frozen=True)
class Encoded:
    """One compressed tensor: its shape and its byte/float fields (``idx``, ``val``, ``scale``)."""

    shape: tuple[int, ...]
    fields: dict[str, Tensor]

    @property
    def nbytes(self) -> int:
        """Payload bytes of the fields."""
        return sum(t.numel() * t.element_size() for t in self.fields.values())


@dataclass(frozen=True, eq=False)
class ResolvedCodec:
    """A :class:`CodecConfig` with its codec, transform and index coding looked up (:func:`resolve`).

    Hashed as its configuration (computed once: the layout caches key on it for every tensor)."""

    config: CodecConfig
    """The configuration it was resolved from."""
    codec: Codec
    """The codec's declaration (``training.codecregistry``)."""
    transform: Transform
    """The transform's declaration (``training.codectransforms``)."""
    index: IndexCoding
    """The index coding's declaration (``training.indexcodings``; unused by a codec that sends no
    positions)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(self.config))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined, no-any-return]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ResolvedCodec) and (
            self is other
            or (self.config, self.codec, self.transform, self.index)
            == (other.config, other.codec, other.transform, other.index)
        )

    @property
    def chunk(self) -> int:
        """Values per chunk."""
        return self.config.chunk

    @property
    def topk(self) -> int:
        """Values kept per chunk."""
        return self.config.topk

    @property
    def bits(self) -> int:
        """Bits per kept value (32: raw fp32)."""
        return self.config.bits


CodecLike = CodecConfig | ResolvedCodec
"""What the functions here take: a configuration, or one already resolved."""


def resolve(cfg: CodecLike) -> ResolvedCodec:
    """``cfg`` with its declarations looked up (itself if already resolved); :class:`CodecError` if one of
    its names is declared nowhere."""
    if isinstance(cfg, ResolvedCodec):
        return cfg
    return ResolvedCodec(
        cfg, codec_named(cfg.name), transform_named(cfg.transform), index_coding_named(cfg.index)
    )


def layout(numel: int, cfg: CodecLike) -> Layout:
    """The chunk layout of ``numel`` flattened values (what each chunk keeps: the codec's ``keep``)."""
    c = resolve(cfg)
    return flat_layout(numel, c.chunk, c.topk, c.codec.keep)


def layout_of(shape: tuple[int, ...], cfg: CodecLike) -> Layout:
    """``_layout_of`` of ``shape`` (cached: a validator asks for it about 100 times per update; a
    :class:`Layout` is immutable)."""
    return _layout_of(tuple(shape), resolve(cfg))


@lru_cache(maxsize=4096)
def _layout_of(shape: tuple[int, ...], c: ResolvedCodec) -> Layout:
    """The chunk layout of a tensor of ``shape``: the transform's tiling, each chunk keeping the codec's
    ``keep``."""
    return c.transform.layout(shape, c.chunk, c.topk, c.codec.keep)


def index_bits(cfg: CodecLike, shape: tuple[int, ...] | None = None) -> int:
    """Bits per packed index (with a transform whose tiles follow the tensor, of ``shape``'s tile; without
    a shape, the bound ``ceil(log2(chunk))``)."""
    c = resolve(cfg)
    return c.transform.index_width(shape, c.chunk)


def index_groups(shape: tuple[int, ...], cfg: CodecLike) -> list[Group]:
    """``(chunks, width, k)`` of each group of chunks of a tensor of ``shape`` that share a width and a
    ``k``, in wire order (the full chunks, then the tail), leaving out empty groups."""
    return list(_index_groups(tuple(shape), resolve(cfg)))


@lru_cache(maxsize=4096)
def _index_groups(shape: tuple[int, ...], c: ResolvedCodec) -> tuple[Group, ...]:
    """:func:`index_groups`, cached as :func:`layout_of` is."""
    groups = c.transform.groups(shape, layout_of(shape, c), c.chunk)
    return tuple((g.chunks, g.width, g.keep) for g in groups if g.chunks and g.keep)


def field_specs(shape: tuple[int, ...], cfg: CodecLike) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
    """Exact dtype and shape of each field for a tensor of ``shape`` (what a decoder checks first)."""
    return dict(_field_specs(tuple(shape), resolve(cfg)))


@lru_cache(maxsize=4096)
def _field_specs(
    shape: tuple[int, ...], c: ResolvedCodec
) -> tuple[tuple[str, tuple[torch.dtype, tuple[int, ...]]], ...]:
    """:func:`field_specs` as ``(field, (dtype, shape))`` pairs, cached as :func:`layout_of` is."""
    lay = layout_of(shape, c)
    specs: list[tuple[str, tuple[torch.dtype, tuple[int, ...]]]] = []
    if c.codec.indexed:
        nbytes = field_bytes(c.index, _index_groups(shape, c), index_bits(c, shape))
        specs.append(("idx", (torch.uint8, (nbytes,))))
    if c.bits == 32:
        specs.append(("val", (torch.float32, (lay.kept,))))
    else:
        specs.append(("val", (torch.uint8, (math.ceil(lay.kept * c.bits / 8),))))
        specs.append(("scale", (torch.float32, (lay.n_chunks,))))
    return tuple(specs)


def encoded_bits(shape: tuple[int, ...], cfg: CodecLike) -> int:
    """Payload bits of one encoded tensor of ``shape``."""
    return sum(
        8 * math.prod(s) * torch.empty((), dtype=d).element_size()
        for d, s in field_specs(shape, cfg).values()
    )


def to_chunks(x: Tensor, lay: Layout, cfg: CodecLike) -> list[tuple[Tensor, int]]:
    """``[(chunks [m, width], k)]`` for the full chunks and the tail, in the codec's basis (the
    transform's ``forward``)."""
    c = resolve(cfg)
    return c.transform.forward(x, lay, c.chunk)


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


def encode(x: Tensor, cfg: CodecLike) -> Encoded:
    """Compress one tensor (any shape, cast to fp32)."""
    if not bool(torch.isfinite(x).all()):
        raise CodecError("cannot encode non-finite values")
    c = resolve(cfg)
    x = x.detach().to("cpu")
    shape = tuple(x.shape)
    lay = layout_of(shape, c)
    positions: list[tuple[Tensor, int]] = []
    val_parts: list[Tensor] = []
    for chunks, k in c.transform.forward(x, lay, c.chunk):
        idx, values = c.codec.select(chunks, k)
        if idx is not None:
            positions.append((idx, chunks.shape[1]))
        val_parts.append(values)
    fields: dict[str, Tensor] = {}
    if c.codec.indexed:
        fields["idx"] = c.index.pack(positions, index_bits(c, shape))
    if c.bits == 32:
        fields["val"] = torch.cat([v.reshape(-1) for v in val_parts] or [torch.zeros(0)]).contiguous()
    else:
        quant = [_quantise(v, c.bits) for v in val_parts]
        codes_all = [q.reshape(-1) for q, _ in quant] or [torch.zeros(0, dtype=torch.int64)]
        fields["val"] = pack_bits(torch.cat(codes_all), c.bits)
        fields["scale"] = torch.cat([s for _, s in quant] or [torch.zeros(0)]).contiguous()
    return Encoded(shape, fields)


def check_fields(enc: Encoded, cfg: CodecLike) -> None:
    """Raise :class:`CodecError` unless the fields have exactly the dtypes and shapes of ``field_specs``."""
    specs = field_specs(enc.shape, cfg)
    if set(enc.fields) != set(specs):
        raise CodecError(f"fields {sorted(enc.fields)} != {sorted(specs)}")
    for name, (dtype, shape) in specs.items():
        t = enc.fields[name]
        if t.dtype != dtype or tuple(t.shape) != shape:
            raise CodecError(f"field {name}: {t.dtype} {tuple(t.shape)} != {dtype} {shape}")


def _decoded_values(enc: Encoded, bits: int, lay: Layout) -> tuple[Tensor, Tensor]:
    """(float64 values, int64 codes) of ``enc``'s kept values (no codes at 32 bits); :class:`CodecError`
    on a bad scale or a non-finite value."""
    if bits == 32:
        values = enc.fields["val"].to(F64)
        codes = torch.zeros(0, dtype=torch.int64)
    else:
        codes = unpack_bits(enc.fields["val"], bits, lay.kept)
        scales = enc.fields["scale"].float()
        if not bool(torch.isfinite(scales).all()) or bool((scales < 0).any()):
            raise CodecError("scales must be finite and non-negative")
        parts = []
        if lay.full_chunks:
            q = codes[: lay.full_chunks * lay.k_full].view(lay.full_chunks, lay.k_full)
            parts.append(_dequantise(q, scales[: lay.full_chunks], bits).reshape(-1))
        if lay.tail:
            q = codes[lay.full_chunks * lay.k_full :].view(1, lay.k_tail)
            parts.append(_dequantise(q, scales[lay.full_chunks :], bits).reshape(-1))
        values = torch.cat(parts) if parts else torch.zeros(0, dtype=F64)
    if not bool(torch.isfinite(values).all()):
        raise CodecError("non-finite values")
    return values, codes


def _sparse_groups(
    enc: Encoded, c: ResolvedCodec, lay: Layout, values: Tensor, codes: Tensor
) -> list[Tensor]:
    """The chunks of a codec that sends positions, rebuilt from their indices and values and turned back
    from the transform's basis: ``[m, width]`` fp32 per group (full chunks, then the tail)."""
    idx = c.index.unpack(enc.fields["idx"], index_groups(enc.shape, c), index_bits(c, enc.shape))
    groups: list[Tensor] = []
    pos = 0
    for g in c.transform.groups(enc.shape, lay, c.chunk):
        m, k = g.chunks, g.keep
        if m == 0:
            continue
        i = idx[pos : pos + m * k].view(m, k)
        if bool((i >= g.width).any()) or bool((i[:, 1:] <= i[:, :-1]).any()):
            raise CodecError("indices out of range or not strictly increasing")
        v = values[pos : pos + m * k].view(m, k)
        quant = None
        if c.bits != 32:
            quant = (codes[pos : pos + m * k].view(m, k), enc.fields["scale"][g.first : g.first + m])
        groups.append(c.transform.inverse(g, i, v, quant, c.bits))
        pos += m * k
    return groups


def decode(enc: Encoded, cfg: CodecLike) -> Tensor:
    """Decompress to an fp32 tensor of ``enc.shape``. Raises :class:`CodecError` on malformed input.

    The result is defined by IEEE-754 alone (dequantisation and the inverse DCT are fixed sequences of
    elementwise float64 operations, rounded once to fp32; see ``training.exact``), so every validator
    decodes the same bits on any CPU or GPU and the merge built on it is reproducible.
    """
    c = resolve(cfg)
    check_fields(enc, c)
    lay = layout_of(enc.shape, c)
    values, codes = _decoded_values(enc, c.bits, lay)
    if c.codec.indexed:
        groups = _sparse_groups(enc, c, lay, values, codes)
    else:
        groups = [values.to(torch.float32)]
    flat = torch.cat([g.reshape(-1) for g in groups]) if groups else torch.zeros(0)
    return c.transform.assemble(flat, enc.shape, lay)
