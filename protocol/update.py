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
steps, and ``root``: the state digest of the per-step digests, served apart; ``protocol.updateheader``),
``tokens`` and ``ef``: the error-feedback chain, ``{"after": hex state digest of the
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
import struct
from dataclasses import dataclass, field
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import Tensor

from protocol.canonical import CanonicalJSONError, check_json_depth, dumps_canonical, loads_canonical
from protocol.updatecost import MEMORY_SLACK, DecodeCost, UpdateCaps, check_decode_cost, decode_cost
from protocol.updateerrors import (
    BadMagic,
    BadTensorDtype,
    BadTensorShape,
    CodecMismatch,
    DecodeTooCostly,
    HeaderMismatch,
    InvalidPayload,
    MalformedHeader,
    NonCanonicalUpdate,
    NonFiniteValues,
    TranscriptMismatch,
    TruncatedUpdate,
    UnknownCodec,
    UnsupportedVersion,
    UpdateError,
    UpdateTooLarge,
)
from protocol.updateheader import (
    KNOWN_CODECS,
    TRANSCRIPT_TENSOR,
    VERSION,
    UpdateHeader,
    check_expected,
    codec_wire,
    make_header,
    parse_header,
    transcript_root,
    transcript_tensors,
    with_transcript,
)
from training.codecs import Encoded, decode, field_specs
from training.config import CodecConfig
from training.errors import CodecError
from training.inner import Transcript

__all__ = [
    "ALLOWED_DTYPES",
    "KNOWN_CODECS",
    "MAGIC",
    "MEMORY_SLACK",
    "TRANSCRIPT_TENSOR",
    "VERSION",
    "BadMagic",
    "BadTensorDtype",
    "BadTensorShape",
    "CodecMismatch",
    "DecodeCost",
    "DecodeTooCostly",
    "HeaderMismatch",
    "InvalidPayload",
    "MalformedHeader",
    "NonCanonicalUpdate",
    "NonFiniteValues",
    "TranscriptMismatch",
    "TruncatedUpdate",
    "UnknownCodec",
    "UnsupportedVersion",
    "Update",
    "UpdateCaps",
    "UpdateError",
    "UpdateHeader",
    "UpdateTooLarge",
    "check_decode_cost",
    "check_expected",
    "codec_wire",
    "decode_cost",
    "decode_update",
    "encode_update",
    "make_header",
    "make_update",
    "parse_header",
    "transcript_root",
    "transcript_tensors",
    "update_digest",
    "with_transcript",
]

MAGIC = b"TSRUPD\0\0"

#: The safetensors dtypes a payload may declare; anything else (``F4``, ``F6_E2M3``, ``F6_E3M2``,
#: ``F8_E8M0``, which the Rust parser accepts and ``safetensors.torch`` does not map) is refused before
#: the payload is parsed. The codecs use ``U8`` and ``F32`` only.
ALLOWED_DTYPES = frozenset({"U8", "F32"})


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


def make_update(
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
        transcript.parts,
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
    header, payload = _split_frame(data, caps)
    check_expected(header, expected_shapes, expected_codec)
    if expected_shapes is not None and expected_codec is not None:
        # the run's own model and codec are never refused: an update of some of its parameters costs
        # at most what decoding all of them costs
        model = tuple((n, tuple(s)) for n, s in sorted(expected_shapes.items()))
        caps = caps.covering(decode_cost(model, expected_codec))
    check_decode_cost(header, caps)
    update = Update(header, _payload_tensors(header, payload, caps))
    if encode_update(update) != data:
        raise NonCanonicalUpdate("bytes are not the canonical encoding of this update")
    update.pseudo_gradient()  # raises InvalidPayload on bad indices or scales
    return update


def _split_frame(data: bytes, caps: UpdateCaps) -> tuple[UpdateHeader, bytes]:
    """The parsed header and the payload of ``data``: the magic, the header's length and canonical JSON,
    the payload's declared length matching what is there, each within ``caps``."""
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
    return header, payload


def _payload_tensors(header: UpdateHeader, payload: bytes, caps: UpdateCaps) -> dict[str, Encoded]:
    """The encoded tensors of the safetensors ``payload``: exactly the fields the header's parameters and
    codec call for, each of its dtype and size and finite, sliced back into one per parameter."""
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
    return tensors
