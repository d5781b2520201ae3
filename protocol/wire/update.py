"""The update wire format (version 4): a canonical JSON header plus the codec's fields as raw bytes.

Layout (all integers little-endian)::

    b"TSRUPD\\0\\0"            8-byte magic
    u32 header_len            canonical JSON header (protocol.wire.canonical), at most caps.max_header_bytes
    header bytes
    u64 payload_len           exactly the rest of the message, and exactly what the header implies
    payload bytes             the codec's fields (training.codecs) in :data:`FIELD_ORDER` ("idx" and "val"
                              uint8, "scale" float32 little-endian), each the concatenation of that field
                              over the params in header order; no names, dtypes or shapes travel

The header (``UpdateHeader.to_json``) carries: ``version`` (4), ``r`` (round), ``m`` (miner address),
``mods`` (module ids), ``dims`` (``[vocab, seq_len, d_model, d_ff, n_experts]``, 0 where no listed module
uses one: the parameters' names and shapes are derived from ``mods`` and ``dims``,
``protocol.wire.updateheader``), ``c`` (the codec's wire parameters: ``[name, chunk, topk, bits, transform,
index]``), ``b`` (state digest of theta_r), ``t`` (``[k, H, root]``: the recorded steps are 0, k, 2k, ...,
H, and ``root`` the state digest of the per-step digests, served apart; ``protocol.wire.updateheader``), ``n``
(tokens) and ``ef``: the error-feedback chain, ``[after, source]``: ``after`` the state digest of the
residual the miner keeps after this update, ``source`` null or ``[s, digest]`` naming the miner's own
earlier committed update whose ``after`` residual this update started from (null: it started from zero).
With it a validator recomputes the compressed update exactly from the transcript (docs/security.md F12).
Digests travel as 43 characters of unpadded base64url. The update's digest is SHA-256 over the whole
message; decoding re-encodes and requires identical bytes, so one update has exactly one digest.

Checks run cheapest first: total size, magic, header size, header JSON, version, codec, field types, the
modules (well-formed ids) and dims (exactly the dimensions the modules use, within the caps), from which
the parameters are derived; the payload size; then the run's expectations when the caller gives them (the
codec is the run's codec, each parameter is one of the run's model with its shape); then the cost of the
decode, derived from the header alone (``protocol.wire.updatecost.decode_cost``: the decoded fp32 bytes, the decoder's peak
memory and its work) against the caps, so a few hundred bytes cannot make a node allocate gigabytes; then
the payload's size against the one the header implies, finiteness, then the decode itself. Every failure is
a ``protocol.wire.updateerrors.UpdateError`` subclass. Never pickle. Version 3 (parameter names and shapes in the header, hex
digests, a safetensors payload) is refused with :class:`UnsupportedVersion`.
"""

from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from protocol.wire.canonical import CanonicalJSONError, dumps_canonical, loads_canonical
from protocol.wire.updatecost import UpdateCaps, check_decode_cost, decode_cost
from protocol.wire.updateerrors import (
    BadMagic,
    HeaderMismatch,
    InvalidPayload,
    MalformedHeader,
    NonCanonicalUpdate,
    NonFiniteValues,
    TruncatedUpdate,
    UnknownCodec,
    UpdateTooLarge,
)
from protocol.wire.updateheader import HeaderFields, UpdateHeader, check_expected, make_header, parse_header
from training.codecs import Encoded, decode, field_specs, resolve
from training.config import CodecConfig
from training.errors import CodecError

MAGIC = b"TSRUPD\0\0"

#: The codec fields (``training.codecs``) in the order the payload carries them.
FIELD_ORDER = ("idx", "val", "scale")


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
                codec = resolve(self.header.codec)
                self._decoded.update(
                    {name: decode(self.tensors[name], codec) for name, _ in self.header.params}
                )
            except (CodecError, ValueError, RuntimeError, IndexError) as exc:
                # the codec's typed error, or what torch raises on values it was not meant to see
                raise InvalidPayload(f"{type(exc).__name__}: {exc}") from exc
        return dict(self._decoded)


def make_update(fields: HeaderFields, tensors: dict[str, Encoded]) -> Update:
    """An :class:`Update` from a miner's round: its encoded pseudo-gradient and what it says of it
    (:class:`protocol.wire.updateheader.HeaderFields`, the transcript's interval, steps and parts among them)."""
    return Update(make_header(fields, tensors), tensors)


def encode_update(update: Update) -> bytes:
    """The canonical bytes of an update."""
    header = dumps_canonical(update.header.to_json())
    parts: dict[str, list[bytes]] = {}
    for name, _ in update.header.params:
        for fname, t in update.tensors[name].fields.items():
            parts.setdefault(fname, []).append(_field_bytes(t))
    if set(parts) - set(FIELD_ORDER):
        raise ValueError(f"codec fields {sorted(parts)} outside {FIELD_ORDER}")
    payload = b"".join(b"".join(parts[f]) for f in FIELD_ORDER if f in parts)
    return MAGIC + struct.pack("<I", len(header)) + header + struct.pack("<Q", len(payload)) + payload


def update_digest(data: bytes) -> bytes:
    """SHA-256 of an encoded update (what miners commit to)."""
    return hashlib.sha256(data).digest()


def decode_update(
    data: bytes,
    caps: UpdateCaps | None = None,
    expected_shapes: dict[str, tuple[int, ...]] | None = None,
    expected_codec: CodecConfig | None = None,
) -> Update:
    """Parse and check an encoded update; each failure raises its own
    ``protocol.wire.updateerrors.UpdateError`` subclass.

    ``expected_shapes`` (parameter name -> shape of the run's model) and ``expected_codec`` (the run's
    codec) are checked right after the header is parsed, before anything is decoded; then the header's
    ``protocol.wire.updatecost.decode_cost`` against ``caps``. Without them only the caps bound a decode.
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


def _field_bytes(t: Tensor) -> bytes:
    """A codec field's bytes on the wire: uint8 as is, float32 little-endian."""
    arr = t.detach().contiguous().reshape(-1).numpy()
    return (arr.astype("<f4") if t.dtype == torch.float32 else arr).tobytes()


def _payload_tensors(header: UpdateHeader, payload: bytes, caps: UpdateCaps) -> dict[str, Encoded]:
    """The encoded tensors of the raw ``payload``: each codec field (in :data:`FIELD_ORDER`) concatenated
    over the header's parameters, of exactly the size the header implies, the floats finite; sliced back
    into one :class:`Encoded` per parameter."""
    codec = resolve(header.codec)
    specs = {name: field_specs(shape, codec) for name, shape in header.params}
    wanted: dict[str, tuple[torch.dtype, int]] = {}
    for per_param in specs.values():
        for fname, (dtype, fshape) in per_param.items():
            wanted[fname] = (dtype, wanted.get(fname, (dtype, 0))[1] + math.prod(fshape))
    if set(wanted) - set(FIELD_ORDER):
        raise UnknownCodec(f"codec fields {sorted(wanted)} outside {FIELD_ORDER}")
    size = sum(n * dtype.itemsize for dtype, n in wanted.values())
    if len(payload) != size:
        raise HeaderMismatch(f"payload of {len(payload)} bytes, the header implies {size}")
    flat: dict[str, Tensor] = {}
    pos = 0
    for fname in (f for f in FIELD_ORDER if f in wanted):
        dtype, n = wanted[fname]
        raw = payload[pos : pos + n * dtype.itemsize]
        pos += len(raw)
        arr = np.frombuffer(raw, dtype="<f4" if dtype == torch.float32 else np.uint8).astype(
            np.float32 if dtype == torch.float32 else np.uint8
        )
        t = torch.from_numpy(arr.copy())
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise NonFiniteValues(f"{fname} holds NaN or infinity")
        flat[fname] = t
    offsets = dict.fromkeys(wanted, 0)
    tensors: dict[str, Encoded] = {}
    for name, shape in header.params:
        fields: dict[str, Tensor] = {}
        for fname, (_, fshape) in specs[name].items():
            n = math.prod(fshape)
            fields[fname] = flat[fname][offsets[fname] : offsets[fname] + n].reshape(fshape)
            offsets[fname] += n
        tensors[name] = Encoded(shape, fields)
    return tensors
