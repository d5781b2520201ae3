"""What an update may cost before it is decoded: the size caps, and the decode's memory and time derived
from its header alone, so a few hundred bytes cannot make a node allocate gigabytes."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Protocol

from protocol.wire.updateerrors import DecodeTooCostly
from training.codeccost import NS_FVALUE, NS_OUT, NS_PAYLOAD, NS_QVALUE
from training.codecs import ResolvedCodec, field_specs, index_bits, layout, resolve
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
    """Estimated decode time in nanoseconds (weights fitted on a busy core: ``training.codeccost``)."""
    payload_bytes: int = 0
    """Bytes of the payload the header implies (the codec's fields)."""


def _param_cost(numel: int, codec: ResolvedCodec) -> tuple[int, int, float, int]:
    """(output bytes, transient bytes incl. output, nanoseconds, payload bytes) of one parameter's decode.

    Mirrors ``training.codecs.decode`` step by step (its math is not changed here, only counted):
    unpacking ``b``-bit values (int64 codes) and dequantising them in float64; then for a codec that sends
    positions (its declaration's ``indexed``), unpacking them (the index coding's ``cost``) and rebuilding
    the chunks from them (the transform's ``decode_cost``: a float64 scatter, or an inverse DCT per tile);
    for one that does not, only the output.
    """
    lay = layout(numel, codec)
    kept = lay.kept
    specs = field_specs((numel,), codec)
    payload = sum(math.prod(shape) * dtype.itemsize for dtype, shape in specs.values())
    transient = 4 * payload  # the payload loaded, re-encoded and re-framed (the canonical-bytes check)
    ns = float(NS_PAYLOAD * payload)
    if codec.bits == 32:
        transient += 16 * kept  # float64 values, finiteness mask, temporaries
        ns += NS_FVALUE * kept
    else:
        transient += 56 * kept  # int64 codes (unpacked through three temporaries), float64 values
        ns += NS_QVALUE * kept
    if codec.codec.indexed:  # positions sent: unpacked, then scattered or inverse-transformed
        index_transient, index_ns = codec.index.cost(kept, index_bits(codec), math.prod(specs["idx"][1]))
        transient += index_transient
        ns += index_ns
        out, rebuild_transient, rebuild_ns = codec.transform.decode_cost(lay, codec.bits)
        transient += rebuild_transient
        ns += rebuild_ns
    else:
        out = 4 * numel
        ns += NS_OUT * numel
    return out, transient + out, ns, payload


def decode_cost(params: tuple[tuple[str, tuple[int, ...]], ...], cfg: CodecConfig) -> DecodeCost:
    """``_decode_cost`` of ``params``, cached: a validator computes the run's model's and each update's
    header's for every update it checks, and a round's headers repeat."""
    return _decode_cost(tuple((name, tuple(shape)) for name, shape in params), cfg)


@lru_cache(maxsize=1024)
def _decode_cost(params: tuple[tuple[str, tuple[int, ...]], ...], cfg: CodecConfig) -> DecodeCost:
    """The :class:`DecodeCost` of decoding ``params`` (name, shape) with ``cfg``: computed from the header
    alone, before any payload byte is read, so a decode can be refused before it allocates."""
    codec = resolve(cfg)
    decoded = outputs = largest = payload = 0
    ns = 0.0
    for _, shape in params:
        numel = math.prod(shape)
        out, transient, t, pay = _param_cost(numel, codec)
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
