"""What an update may cost before it is decoded: the size caps, and the decode's memory and time derived
from its header alone, so a few hundred bytes cannot make a node allocate gigabytes."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Protocol

from protocol.wire.updateerrors import DecodeTooCostly
from training.codecregistry import codec_named
from training.codecs import TILE, field_specs, index_bits, layout
from training.config import CodecConfig


class HasParams(Protocol):
    """What :func:`check_decode_cost` reads of a header."""

    @property
    def params(self) -> tuple[tuple[str, tuple[int, ...]], ...]: ...

    @property
    def codec(self) -> CodecConfig: ...


@dataclass(frozen=True)
class UpdateCaps:
    """Size caps, checked before anything is decoded."""

    max_update_bytes: int = 64 * 1024 * 1024
    """Whole message."""
    max_header_bytes: int = 1024 * 1024
    """Canonical JSON header."""
    max_params: int = 4096
    """Parameter tensors listed in the header."""
    max_param_numel: int = 1 << 28
    """Values of any one parameter."""
    max_decoded_bytes: int = 256 * 1024 * 1024
    """fp32 bytes of the decoded pseudo-gradient (every parameter the header lists): 64 M values."""
    max_decode_memory: int = 1024 * 1024 * 1024
    """Peak bytes the decode may allocate (:func:`decode_cost`'s estimate, outputs included)."""
    max_memory_ratio: int = 16
    """The decode's peak memory may be at most this multiple of the decoded bytes (plus
    :data:`MEMORY_SLACK`, which covers the fixed costs of tiny parameters)."""
    max_decode_work: int = 1_000_000_000
    """The decode's estimated time in nanoseconds (:func:`decode_cost`): one second."""

    def covering(self, cost: DecodeCost) -> UpdateCaps:
        """These caps raised, where needed, so that anything costing at most ``cost`` passes them.

        ``cost`` is that of decoding a whole model of the run with the run's codec. The decoded bytes,
        peak memory and work of a header that lists some of the model's parameters with their shapes are
        at most the model's (each is a sum, or a sum plus a maximum, over the parameters), so an honest
        update is never refused. The ratio of peak memory to decoded bytes is not monotone that way (a
        module of many tiny parameters under a DCT codec has a higher ratio than the whole model), so it
        is lifted: the absolute caps, which the model bounds, hold instead."""
        return replace(
            self,
            max_decoded_bytes=max(self.max_decoded_bytes, cost.decoded_bytes),
            max_decode_memory=max(self.max_decode_memory, cost.peak_bytes),
            max_memory_ratio=max(self.max_memory_ratio, 1 << 62),
            max_decode_work=max(self.max_decode_work, cost.work),
        )


#: Bytes of decode memory allowed on top of ``max_memory_ratio`` x the decoded bytes.
MEMORY_SLACK = 16 * 1024 * 1024

# Decode time per unit, in nanoseconds, fitted on one busy CPU core (2 cores, load ~7; torch, float64,
# deterministic settings) by the decodes of ``python -m tests.fuzz.campaign --measure`` (docs/security.md).
_NS_OUT = 60  # per decoded value: float64 zeros/scatter or tile, to fp32, concatenation
_NS_QVALUE = 260  # per kept value at 2-8 bits: unpack to int64, dequantise in float64, finiteness
_NS_FVALUE = 110  # per kept raw fp32 value: to float64, finiteness
_NS_INDEX = 200  # per kept index at widths 1, 2, 4, 8, 12 (vectorised unpacking, range and order checks)
_NS_INDEX_BIT = 25  # per index bit on numpy's generic unpacking path
_NS_MAC = 2  # per multiply-add of the quantised inverse DCT (a batched matrix product)
_NS_SLOT = 40  # per tile value per kept slot of the raw fp32 inverse DCT (an elementwise loop)
_NS_TILE = 110  # per tile value of the quantised inverse DCT after the product (scale, fp32)
_NS_PAYLOAD = 6  # per payload byte: reading the raw fields, finiteness, the canonical re-encoding


@dataclass(frozen=True)
class DecodeCost:
    """What decoding an update costs, derived from its header alone (:func:`decode_cost`)."""

    decoded_bytes: int
    """fp32 bytes of the decoded tensors (4 per value of every parameter)."""
    peak_bytes: int
    """Upper estimate of the decoder's peak allocation: every decoded output plus the largest transient
    of one parameter's decode (unpacked codes and indices, float64 values, the scatter or inverse-DCT
    buffers)."""
    work: int
    """Estimated decode time in nanoseconds (weights fitted on a busy core; see ``_NS_*``)."""
    payload_bytes: int = 0
    """Bytes of the payload the header implies (the codec's fields)."""


def _param_cost(numel: int, cfg: CodecConfig) -> tuple[int, int, float, int]:
    """(output bytes, transient bytes incl. output, nanoseconds, payload bytes) of one parameter's decode.

    Mirrors ``training.codecs.decode`` step by step (its math is not changed here, only counted):
    unpacking ``b``-bit values (int64 codes) and dequantising them in float64; unpacking indices (the
    vectorised widths 1, 2, 4, 8, 12, or numpy's bit-by-bit path at ``17 * width`` bytes per index); then
    for a codec that sends positions (its declaration's ``indexed``), a float64 scatter per chunk (no
    transform) or a float64 inverse DCT per 64x64 tile (batched matrix product over the kept slots for
    quantised values; an elementwise loop over the slots for raw fp32); for one that does not, nothing.
    """
    lay = layout(numel, cfg)
    kept = lay.kept
    payload = sum(math.prod(shape) * dtype.itemsize for dtype, shape in field_specs((numel,), cfg).values())
    transient = 4 * payload  # the payload loaded, re-encoded and re-framed (the canonical-bytes check)
    ns = float(_NS_PAYLOAD * payload)
    if cfg.bits == 32:
        transient += 16 * kept  # float64 values, finiteness mask, temporaries
        ns += _NS_FVALUE * kept
    else:
        transient += 56 * kept  # int64 codes (unpacked through three temporaries), float64 values
        ns += _NS_QVALUE * kept
    if codec_named(cfg.name).indexed:  # positions sent: unpacked, then scattered or inverse-transformed
        width = index_bits(cfg)
        if cfg.index == "elias-fano":
            # every bit of the field unpacked as int64, the low parts and the bitmap's positions
            idx_bytes = math.prod(field_specs((numel,), cfg)["idx"][1])
            transient += 64 * idx_bytes + 8 * (width + 2) * kept
            ns += _NS_INDEX * kept + _NS_INDEX_BIT * 8 * idx_bytes
        elif width in (1, 2, 4, 8, 12):
            transient += 24 * kept
            ns += _NS_INDEX * kept
        else:
            transient += 17 * width * kept  # the bits as uint8, then as int64, shifted
            ns += _NS_INDEX_BIT * width * kept + _NS_INDEX * kept
        if cfg.transform == "dct":
            area = lay.n_chunks * TILE * TILE
            out = 4 * area
            k = max(lay.k_full, lay.k_tail)
            if cfg.bits == 32:
                transient += 6 * 8 * area  # accumulator, outer product, temporaries (float64)
                ns += _NS_SLOT * k * area + _NS_OUT * area
            else:
                transient += 3 * 8 * kept * TILE + 3 * 8 * area  # gathered basis rows; product, scaled
                ns += _NS_MAC * k * area + _NS_TILE * area + _NS_OUT * area
        else:
            out = 4 * numel
            transient += 12 * numel  # float64 scatter buffer, then fp32
            ns += _NS_OUT * numel
    else:
        out = 4 * numel
        ns += _NS_OUT * numel
    return out, transient + out, ns, payload


def decode_cost(params: tuple[tuple[str, tuple[int, ...]], ...], cfg: CodecConfig) -> DecodeCost:
    """``_decode_cost`` of ``params``, cached: a validator computes the run's model's and each update's
    header's for every update it checks, and a round's headers repeat."""
    return _decode_cost(tuple((name, tuple(shape)) for name, shape in params), cfg)


@lru_cache(maxsize=1024)
def _decode_cost(params: tuple[tuple[str, tuple[int, ...]], ...], cfg: CodecConfig) -> DecodeCost:
    """The :class:`DecodeCost` of decoding ``params`` (name, shape) with ``cfg``: computed from the header
    alone, before any payload byte is read, so a decode can be refused before it allocates."""
    decoded = outputs = largest = payload = 0
    ns = 0.0
    for _, shape in params:
        numel = math.prod(shape)
        out, transient, t, pay = _param_cost(numel, cfg)
        decoded += 4 * numel
        outputs += out
        largest = max(largest, transient)
        ns += t
        payload += pay
    return DecodeCost(
        decoded_bytes=decoded, peak_bytes=outputs + largest, work=int(ns), payload_bytes=payload
    )


def check_decode_cost(header: HasParams, caps: UpdateCaps) -> DecodeCost:
    """:func:`decode_cost` of the header, or :class:`DecodeTooCostly` if it exceeds a cap."""
    cost = decode_cost(header.params, header.codec)
    if cost.decoded_bytes > caps.max_decoded_bytes:
        raise DecodeTooCostly(f"decodes to {cost.decoded_bytes} bytes > cap {caps.max_decoded_bytes}")
    if cost.peak_bytes > caps.max_decode_memory:
        raise DecodeTooCostly(f"decoding needs ~{cost.peak_bytes} bytes > cap {caps.max_decode_memory}")
    if cost.peak_bytes > caps.max_memory_ratio * cost.decoded_bytes + MEMORY_SLACK:
        raise DecodeTooCostly(
            f"decoding needs ~{cost.peak_bytes} bytes, more than {caps.max_memory_ratio}x the "
            f"{cost.decoded_bytes} decoded bytes"
        )
    if cost.work > caps.max_decode_work:
        raise DecodeTooCostly(
            f"decoding would take ~{cost.work / 1e9:.2f}s > cap {caps.max_decode_work / 1e9:.2f}s"
        )
    return cost
