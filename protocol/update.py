"""The update wire format: a canonical JSON header plus the codec's tensors as safetensors.

Layout (all integers little-endian)::

    b"TSRUPD\\0\\0"            8-byte magic
    u32 header_len            canonical JSON header (protocol.canonical), at most caps.max_header_bytes
    header bytes
    u64 payload_len           safetensors bytes, exactly the rest of the message
    payload bytes             1-D tensors "idx", "val" and "scale" (training.codecs' fields), each the
                              concatenation of that field over the params in header order

The header (``UpdateHeader.to_json``) carries: ``version``, ``round``, ``miner``, ``modules`` (module
ids), ``params`` (``[[name, shape], ...]`` sorted by name), ``codec`` (its wire parameters: name, chunk,
topk, bits, transform), ``base_checkpoint`` (hex state digest of theta_r), ``transcript`` (interval,
steps, hex digests), ``tokens`` and ``ef``: the error-feedback chain, ``{"after": hex state digest of the
residual the miner keeps after this update, "source": null or {"round": s, "update": hex digest}}`` where
``source`` names the miner's own earlier committed update whose ``after`` residual this update started
from (null: it started from zero). With it a validator recomputes the compressed update exactly from the
transcript (docs/security.md F12). The update's digest is SHA-256 over the whole message; decoding
re-encodes and requires identical bytes, so one update has exactly one digest.

Checks run cheapest first: total size, magic, header size, header JSON, version, codec, field types,
payload size; then the run's expectations when the caller gives them (the codec is the run's codec, each
parameter is one of the run's model with its shape); then the cost of the decode, derived from the header
alone (:func:`decode_cost`: the decoded fp32 bytes, the decoder's peak memory and its work) against the
caps, so a few hundred bytes cannot make a node allocate gigabytes; then the safetensors header (size,
offsets, and dtypes from an explicit allow-list, before ``safetensors.torch`` parses the payload), tensor
names, dtypes and shapes (from the codec's ``field_specs``, before any value is read), finiteness, then
the decode itself. Every failure is an :class:`UpdateError` subclass. Never pickle: safetensors and JSON
only.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import Tensor

from protocol.canonical import CanonicalJSONError, check_json_depth, dumps_canonical, loads_canonical
from protocol.errors import ProtocolError
from training.codecs import TILE, Encoded, decode, field_specs, index_bits, layout
from training.config import CodecConfig
from training.errors import CodecError, ConfigError, ModuleIdError
from training.inner import Transcript
from training.model import module_of

MAGIC = b"TSRUPD\0\0"
VERSION = 2
"""Wire format version this module reads and writes (2: the ``ef`` chain, F12)."""
KNOWN_CODECS = ("dense", "topk")
_ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$|^[A-Za-z0-9_.:-]{1,64}$")
_HEX32 = re.compile(r"^[0-9a-f]{64}$")


class UpdateError(ProtocolError):
    """Root of the update wire format's errors."""


class UpdateTooLarge(UpdateError):
    """The message, its header or its payload exceeds a size cap."""


class TruncatedUpdate(UpdateError):
    """The message ends before its declared lengths (or has trailing bytes)."""


class BadMagic(UpdateError):
    """The message does not start with the update magic."""


class MalformedHeader(UpdateError):
    """The header is not canonical JSON or a field is missing or of the wrong type."""


class UnsupportedVersion(UpdateError):
    """The header's version is not :data:`VERSION`."""


class UnknownCodec(UpdateError):
    """The header names a codec (or codec parameters) this node does not implement."""


class HeaderMismatch(UpdateError):
    """The tensors do not match the header (names, modules, expected parameters)."""


class BadTensorDtype(UpdateError):
    """A tensor has the wrong dtype for its codec field."""


class BadTensorShape(UpdateError):
    """A tensor has the wrong shape for its codec field."""


class NonFiniteValues(UpdateError):
    """A float field holds NaN or infinity."""


class InvalidPayload(UpdateError):
    """The safetensors payload does not parse, or the encoded values do not decode."""


class NonCanonicalUpdate(UpdateError):
    """The bytes decode but are not the canonical encoding of their content."""


class DecodeTooCostly(UpdateTooLarge):
    """Decoding what the header declares would cost more memory or work than the caps allow."""


class CodecMismatch(UpdateError):
    """The header's codec is not the run's codec."""


#: The safetensors dtypes a payload may declare; anything else (``F4``, ``F6_E2M3``, ``F6_E3M2``,
#: ``F8_E8M0``, which the Rust parser accepts and ``safetensors.torch`` does not map) is refused before
#: the payload is parsed. The codecs use ``U8`` and ``F32`` only.
ALLOWED_DTYPES = frozenset({"U8", "F32"})


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
_NS_PAYLOAD = 6  # per payload byte: safetensors load, finiteness, the canonical re-encoding


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
    a float64 scatter per chunk (no transform), a float64 inverse DCT per 64x64 tile (batched matrix
    product over the kept slots for quantised values; an elementwise loop over the slots for raw fp32),
    or nothing (dense).
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
    if cfg.name == "topk":
        width = index_bits(cfg)
        if width in (1, 2, 4, 8, 12):
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


def check_decode_cost(header: UpdateHeader, caps: UpdateCaps) -> DecodeCost:
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


def codec_wire(cfg: CodecConfig) -> tuple[str, int, int, int, str]:
    """The codec parameters that travel in a header (``ef_beta`` and ``feedback`` are the miner's)."""
    return (cfg.name, cfg.chunk, cfg.topk, cfg.bits, cfg.transform)


def check_expected(
    header: UpdateHeader,
    expected_shapes: dict[str, tuple[int, ...]] | None,
    expected_codec: CodecConfig | None,
) -> None:
    """The run's expectations, checked before anything is decoded: the codec is the run's codec
    (:class:`CodecMismatch`), every parameter is in the run's model (:class:`HeaderMismatch`) with its
    shape (:class:`BadTensorShape`)."""
    if expected_codec is not None and codec_wire(header.codec) != codec_wire(expected_codec):
        raise CodecMismatch(f"codec {codec_wire(header.codec)} is not the run's {codec_wire(expected_codec)}")
    if expected_shapes is not None:
        for name, shape in header.params:
            if name not in expected_shapes:
                raise HeaderMismatch(f"parameter {name!r} is not in the model")
            if tuple(expected_shapes[name]) != shape:
                raise BadTensorShape(
                    f"parameter {name!r} declared {shape}, model has {expected_shapes[name]}"
                )


@dataclass(frozen=True)
class UpdateHeader:
    """The update's metadata (see the module doc for the JSON form)."""

    round: int
    """Outer round r the update is for."""
    miner: str
    """The miner's address."""
    modules: tuple[str, ...]
    """Module ids the update carries pseudo-gradients for."""
    params: tuple[tuple[str, tuple[int, ...]], ...]
    """(parameter name, shape), sorted by name."""
    codec: CodecConfig
    """The codec (only its wire parameters travel; ``ef_beta`` is the miner's business)."""
    base_checkpoint: str
    """Hex state digest of theta_r the miner trained from."""
    transcript_interval: int
    """k of the transcript."""
    transcript_steps: tuple[int, ...]
    """Recorded inner steps."""
    transcript_digests: tuple[str, ...]
    """Hex state digests at those steps."""
    tokens: int
    """Training tokens the update consumed."""
    ef_after: str = ""
    """Hex state digest of the error-feedback residual after this update (tensors ``ef/<param>``)."""
    ef_source: tuple[int, str] | None = None
    """(round, hex update digest) of the miner's earlier update whose residual this one started from."""
    version: int = VERSION
    """Wire format version."""

    def to_json(self) -> dict[str, Any]:
        """The header as a canonical-JSON-ready dict."""
        c = self.codec
        return {
            "version": self.version,
            "round": self.round,
            "miner": self.miner,
            "modules": list(self.modules),
            "params": [[n, list(s)] for n, s in self.params],
            "codec": {
                "name": c.name,
                "chunk": c.chunk,
                "topk": c.topk,
                "bits": c.bits,
                "transform": c.transform,
            },
            "base_checkpoint": self.base_checkpoint,
            "transcript": {
                "interval": self.transcript_interval,
                "steps": list(self.transcript_steps),
                "digests": list(self.transcript_digests),
            },
            "tokens": self.tokens,
            "ef": {
                "after": self.ef_after,
                "source": None
                if self.ef_source is None
                else {"round": self.ef_source[0], "update": self.ef_source[1]},
            },
        }


@dataclass(frozen=True)
class Update:
    """A decoded (or to-be-encoded) update: header and one :class:`Encoded` per parameter."""

    header: UpdateHeader
    tensors: dict[str, Encoded]
    _decoded: dict[str, Tensor] = field(default_factory=dict, compare=False, repr=False)

    def pseudo_gradient(self) -> dict[str, Tensor]:
        """Decoded fp32 pseudo-gradients by parameter name (decoded once, then cached)."""
        if not self._decoded:
            try:
                self._decoded.update(
                    {name: decode(self.tensors[name], self.header.codec) for name, _ in self.header.params}
                )
            except (CodecError, ValueError, RuntimeError, IndexError) as exc:
                # the codec's typed error, or what torch raises on values it was not meant to see
                raise InvalidPayload(f"{type(exc).__name__}: {exc}") from exc
        return dict(self._decoded)


def make_header(
    round_index: int,
    miner: str,
    modules: tuple[str, ...] | list[str],
    tensors: dict[str, Encoded],
    codec: CodecConfig,
    base_checkpoint: bytes,
    transcript_interval: int,
    transcript_steps: list[int],
    transcript_digests: list[bytes],
    tokens: int,
    *,
    ef_after: bytes,
    ef_source: tuple[int, bytes] | None = None,
) -> UpdateHeader:
    """Build a header from raw values (digests as bytes)."""
    return UpdateHeader(
        round=round_index,
        miner=miner,
        modules=tuple(modules),
        params=tuple((n, tuple(tensors[n].shape)) for n in sorted(tensors)),
        codec=codec,
        base_checkpoint=base_checkpoint.hex(),
        transcript_interval=transcript_interval,
        transcript_steps=tuple(transcript_steps),
        transcript_digests=tuple(d.hex() for d in transcript_digests),
        tokens=tokens,
        ef_after=ef_after.hex(),
        ef_source=None if ef_source is None else (ef_source[0], ef_source[1].hex()),
    )


def build_update(
    round_index: int,
    miner: str,
    modules: tuple[str, ...] | list[str],
    tensors: dict[str, Encoded],
    codec: CodecConfig,
    base_checkpoint: bytes,
    transcript: Transcript,
    tokens: int,
    *,
    ef_after: bytes,
    ef_source: tuple[int, bytes] | None = None,
) -> Update:
    """An :class:`Update` from a miner's round: its encoded pseudo-gradient and inner-loop transcript."""
    header = make_header(
        round_index,
        miner,
        modules,
        tensors,
        codec,
        base_checkpoint,
        transcript.interval,
        transcript.steps,
        transcript.digests,
        tokens,
        ef_after=ef_after,
        ef_source=ef_source,
    )
    return Update(header, tensors)


def encode_update(update: Update) -> bytes:
    """The canonical bytes of an update."""
    header = dumps_canonical(update.header.to_json())
    parts: dict[str, list[Tensor]] = {}
    for name, _ in update.header.params:
        for fname, t in update.tensors[name].fields.items():
            parts.setdefault(fname, []).append(t.reshape(-1))
    payload = st_save({fname: torch.cat(ts).contiguous() for fname, ts in parts.items()})
    return MAGIC + struct.pack("<I", len(header)) + header + struct.pack("<Q", len(payload)) + payload


def update_digest(data: bytes) -> bytes:
    """SHA-256 of an encoded update (what miners commit to)."""
    return hashlib.sha256(data).digest()


def _int(obj: dict[str, Any], key: str, lo: int = 0, hi: int = 1 << 62) -> int:
    v = obj.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise MalformedHeader(f"{key!r} must be an integer in [{lo}, {hi}]")
    return v


def _str(obj: dict[str, Any], key: str) -> str:
    v = obj.get(key)
    if not isinstance(v, str):
        raise MalformedHeader(f"{key!r} must be a string")
    return v


def _parse_codec(raw: Any) -> CodecConfig:
    if not isinstance(raw, dict) or set(raw) != {"name", "chunk", "topk", "bits", "transform"}:
        raise MalformedHeader("codec must be an object with name, chunk, topk, bits, transform")
    if raw["name"] not in KNOWN_CODECS:
        raise UnknownCodec(f"unknown codec {raw['name']!r}")
    try:
        return CodecConfig(
            name=raw["name"],
            chunk=raw["chunk"],
            topk=raw["topk"],
            bits=raw["bits"],
            transform=raw["transform"],
        )
    except (ConfigError, TypeError) as exc:
        raise UnknownCodec(f"unsupported codec parameters: {exc}") from exc


def parse_header(raw: Any, caps: UpdateCaps) -> UpdateHeader:
    """Validate a parsed header object (version first, then codec, then the rest)."""
    if not isinstance(raw, dict):
        raise MalformedHeader("header must be a JSON object")
    expected = {
        "version",
        "round",
        "miner",
        "modules",
        "params",
        "codec",
        "base_checkpoint",
        "transcript",
        "tokens",
        "ef",
    }
    if "version" in raw and raw["version"] != VERSION:
        raise UnsupportedVersion(f"update version {raw['version']!r}, this node reads {VERSION}")
    if set(raw) != expected:
        raise MalformedHeader(f"header fields {sorted(raw)} != {sorted(expected)}")
    codec = _parse_codec(raw["codec"])
    miner = _str(raw, "miner")
    if not _ADDRESS.match(miner):
        raise MalformedHeader("miner must be an address")
    base = _str(raw, "base_checkpoint")
    if not _HEX32.match(base):
        raise MalformedHeader("base_checkpoint must be 64 lowercase hex digits")
    modules = raw["modules"]
    if not isinstance(modules, list) or not all(isinstance(m, str) for m in modules) or not modules:
        raise MalformedHeader("modules must be a non-empty list of strings")
    if len(set(modules)) != len(modules):
        raise MalformedHeader("duplicate module ids")
    params_raw = raw["params"]
    if not isinstance(params_raw, list) or not params_raw:
        raise MalformedHeader("params must be a non-empty list")
    if len(params_raw) > caps.max_params:
        raise UpdateTooLarge(f"{len(params_raw)} params > cap {caps.max_params}")
    params: list[tuple[str, tuple[int, ...]]] = []
    for item in params_raw:
        if (
            not isinstance(item, list)
            or len(item) != 2
            or not isinstance(item[0], str)
            or not isinstance(item[1], list)
            or not all(isinstance(d, int) and not isinstance(d, bool) and 0 < d < (1 << 31) for d in item[1])
            or len(item[1]) > 8
        ):
            raise MalformedHeader("each param must be [name, [positive dims]]")
        if math.prod(item[1]) > caps.max_param_numel:
            raise UpdateTooLarge(f"param {item[0]!r} has more than {caps.max_param_numel} values")
        params.append((item[0], tuple(item[1])))
    names = [n for n, _ in params]
    if names != sorted(set(names)):
        raise MalformedHeader("params must be sorted by name without duplicates")
    try:
        owners = {module_of(n) for n in names}
    except ModuleIdError as exc:
        raise HeaderMismatch(str(exc)) from exc
    if owners != set(modules):
        raise HeaderMismatch(f"params belong to modules {sorted(owners)}, header lists {sorted(modules)}")
    tr = raw["transcript"]
    if not isinstance(tr, dict) or set(tr) != {"interval", "steps", "digests"}:
        raise MalformedHeader("transcript must have interval, steps, digests")
    steps, digests = tr["steps"], tr["digests"]
    if (
        not isinstance(steps, list)
        or not isinstance(digests, list)
        or len(steps) != len(digests)
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in steps)
        or steps != sorted(set(steps))
        or not all(isinstance(d, str) and _HEX32.match(d) for d in digests)
        or len(steps) > 100_000
    ):
        raise MalformedHeader("transcript steps must ascend and pair with 64-hex digests")
    ef_after, ef_source = _parse_ef(raw["ef"])
    return UpdateHeader(
        round=_int(raw, "round"),
        miner=miner,
        modules=tuple(modules),
        params=tuple(params),
        codec=codec,
        base_checkpoint=base,
        transcript_interval=_int(tr, "interval", 1),
        transcript_steps=tuple(steps),
        transcript_digests=tuple(digests),
        tokens=_int(raw, "tokens"),
        ef_after=ef_after,
        ef_source=ef_source,
    )


def _parse_ef(raw: Any) -> tuple[str, tuple[int, str] | None]:
    if not isinstance(raw, dict) or set(raw) != {"after", "source"}:
        raise MalformedHeader("ef must be an object with after and source")
    after = _str(raw, "after")
    if not _HEX32.match(after):
        raise MalformedHeader("ef.after must be 64 lowercase hex digits")
    src = raw["source"]
    if src is None:
        return after, None
    if not isinstance(src, dict) or set(src) != {"round", "update"}:
        raise MalformedHeader("ef.source must be null or an object with round and update")
    upd = _str(src, "update")
    if not _HEX32.match(upd):
        raise MalformedHeader("ef.source.update must be 64 lowercase hex digits")
    return after, (_int(src, "round"), upd)


def _tensor_spans(meta: dict[str, Any]) -> list[tuple[int, int, str]]:
    """The ``(begin, end, name)`` data offsets of every tensor entry, checked for type; sorted."""
    spans: list[tuple[int, int, str]] = []
    for name, entry in meta.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict):
            raise InvalidPayload(f"safetensors entry {name!r} is not an object")
        dtype = entry.get("dtype")
        if not isinstance(dtype, str):
            raise InvalidPayload(f"safetensors entry {name!r}: dtype is not a string")
        if dtype not in ALLOWED_DTYPES:
            raise BadTensorDtype(
                f"safetensors entry {name!r}: dtype {dtype!r} is not one of {sorted(ALLOWED_DTYPES)}"
            )
        shape = entry.get("shape")
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise InvalidPayload(f"safetensors entry {name!r}: shape is not a list of non-negative integers")
        offsets = entry.get("data_offsets")
        if not isinstance(offsets, list) or len(offsets) != 2:
            raise InvalidPayload(f"safetensors entry {name!r}: data_offsets is not a list of two integers")
        begin, end = offsets
        if not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in (begin, end)):
            raise InvalidPayload(f"safetensors entry {name!r}: data_offsets are not non-negative integers")
        if begin > end:
            raise InvalidPayload(f"safetensors entry {name!r}: data_offsets [{begin}, {end}] are reversed")
        spans.append((begin, end, name))
    spans.sort()
    return spans


def _safetensors_header_len(payload: bytes, caps: UpdateCaps) -> None:
    if len(payload) < 8:
        raise TruncatedUpdate("payload shorter than the safetensors header length")
    (n,) = struct.unpack("<Q", payload[:8])
    if n > caps.max_header_bytes:
        raise UpdateTooLarge(f"safetensors header of {n} bytes > cap {caps.max_header_bytes}")
    if 8 + n > len(payload):
        raise TruncatedUpdate("payload ends inside the safetensors header")
    try:
        check_json_depth(payload[8 : 8 + n])
        meta = json.loads(payload[8 : 8 + n])
    except (CanonicalJSONError, ValueError, RecursionError) as exc:
        raise InvalidPayload(f"safetensors header is not JSON: {exc}") from exc
    if not isinstance(meta, dict):
        raise InvalidPayload("safetensors header is not an object")
    # The tensors' data must tile the data section exactly: in order, no gap, no overlap, no excess.
    data_len = len(payload) - 8 - n
    pos = 0
    for begin, end, name in _tensor_spans(meta):
        if end > data_len:
            raise TruncatedUpdate(f"payload ends inside the tensor data of {name!r}")
        if begin != pos:
            kind = "overlaps the previous tensor" if begin < pos else "leaves a gap"
            raise InvalidPayload(f"safetensors entry {name!r}: data_offsets [{begin}, {end}] {kind}")
        pos = end
    if pos != data_len:
        raise InvalidPayload(f"safetensors tensors cover {pos} of the {data_len} data bytes")


def decode_update(
    data: bytes,
    caps: UpdateCaps | None = None,
    expected_shapes: dict[str, tuple[int, ...]] | None = None,
    expected_codec: CodecConfig | None = None,
) -> Update:
    """Parse and check an encoded update; each failure raises its own :class:`UpdateError` subclass.

    ``expected_shapes`` (parameter name -> shape of the run's model) and ``expected_codec`` (the run's
    codec) are checked right after the header is parsed, before anything is decoded; then the header's
    :func:`decode_cost` against ``caps``. Without them only the caps bound a decode.
    """
    caps = caps or UpdateCaps()
    if len(data) > caps.max_update_bytes:
        raise UpdateTooLarge(f"{len(data)} bytes > cap {caps.max_update_bytes}")
    if len(data) < len(MAGIC) + 4:
        raise TruncatedUpdate("shorter than magic and header length")
    if data[: len(MAGIC)] != MAGIC:
        raise BadMagic("not a Tessera update")
    pos = len(MAGIC)
    (hlen,) = struct.unpack_from("<I", data, pos)
    pos += 4
    if hlen > caps.max_header_bytes:
        raise UpdateTooLarge(f"header of {hlen} bytes > cap {caps.max_header_bytes}")
    if pos + hlen + 8 > len(data):
        raise TruncatedUpdate("message ends inside the header")
    try:
        raw = loads_canonical(data[pos : pos + hlen])
    except CanonicalJSONError as exc:
        raise MalformedHeader(str(exc)) from exc
    header = parse_header(raw, caps)
    pos += hlen
    (plen,) = struct.unpack_from("<Q", data, pos)
    pos += 8
    if pos + plen < len(data):
        raise TruncatedUpdate("trailing bytes after the payload")
    if pos + plen > len(data):
        raise TruncatedUpdate(f"payload of {plen} bytes declared, {len(data) - pos} present")
    payload = data[pos:]
    check_expected(header, expected_shapes, expected_codec)
    if expected_shapes is not None and expected_codec is not None:
        # the run's own model and codec are never refused: an update of some of its parameters costs
        # at most what decoding all of them costs
        model = tuple((n, tuple(s)) for n, s in sorted(expected_shapes.items()))
        caps = caps.covering(decode_cost(model, expected_codec))
    check_decode_cost(header, caps)
    _safetensors_header_len(payload, caps)
    try:
        flat = st_load(payload)
    except (SafetensorError, ValueError, RuntimeError, KeyError, TypeError, IndexError, OverflowError) as exc:
        raise InvalidPayload(f"safetensors payload does not parse: {exc}") from exc
    specs = {name: field_specs(shape, header.codec) for name, shape in header.params}
    wanted: dict[str, tuple[torch.dtype, int]] = {}
    for per_param in specs.values():
        for fname, (dtype, fshape) in per_param.items():
            wanted[fname] = (dtype, wanted.get(fname, (dtype, 0))[1] + math.prod(fshape))
    if set(flat) != set(wanted):
        raise HeaderMismatch(
            f"payload tensors {sorted(flat)} != {sorted(wanted)} for codec {header.codec.name}"
        )
    for fname, (dtype, total) in wanted.items():
        t = flat[fname]
        if t.dtype != dtype:
            raise BadTensorDtype(f"{fname}: {t.dtype}, expected {dtype}")
        if tuple(t.shape) != (total,):
            raise BadTensorShape(f"{fname}: {tuple(t.shape)}, expected ({total},)")
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise NonFiniteValues(f"{fname} holds NaN or infinity")
    offsets = dict.fromkeys(wanted, 0)
    tensors: dict[str, Encoded] = {}
    for name, shape in header.params:
        fields: dict[str, Tensor] = {}
        for fname, (_, fshape) in specs[name].items():
            n = math.prod(fshape)
            fields[fname] = flat[fname][offsets[fname] : offsets[fname] + n]
            offsets[fname] += n
        tensors[name] = Encoded(shape, fields)
    update = Update(header, tensors)
    if encode_update(update) != data:
        raise NonCanonicalUpdate("bytes are not the canonical encoding of this update")
    update.pseudo_gradient()  # raises InvalidPayload on bad indices or scales
    return update
