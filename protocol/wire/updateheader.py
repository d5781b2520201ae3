"""The update's header: what it says, how it is checked, and the transcript it commits to.

The transcript does not travel in the header. Each recorded inner step (61 at H = 60 with k = 1) commits to
two state digests: of the state's parameters (``param/*``) and of the rest (the AdamW moments and step),
``training.digest.part_digests``. The header carries ``transcript.root``, the state digest of those pairs
laid out as one uint8 tensor ``[steps, 2, 32]`` (:func:`transcript_tensors`); the miner serves that blob
under the root, and each part of each state under its own digest. A validator fetches the transcript once
(``fetch_blob`` checks the digest), attaches it with :func:`with_transcript`, and then moves only the parts
a check reads: none for the anchor (theta_r's parameters hash to the step-0 parameter digest), the
parameters alone for the final state, both parts of a replayed segment's start (issue 13).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from protocol.wire.updatecost import UpdateCaps
from protocol.wire.updateerrors import (
    BadTensorShape,
    CodecMismatch,
    HeaderMismatch,
    MalformedHeader,
    TranscriptMismatch,
    UnknownCodec,
    UnsupportedVersion,
)
from protocol.wire.updateparams import b64, check_modules, derive_params, infer_dims, schedule, unb64
from training.codecs import Encoded
from training.config import CodecConfig
from training.digest import state_digest
from training.errors import ConfigError

VERSION = 4
"""Wire format version this module reads and writes (2: the ``ef`` chain, F12; 3: the transcript root;
4: parameters derived from modules and dims, steps from (k, H), base64url digests: issue 14)."""
KNOWN_CODECS = ("dense", "topk")
MAX_TRANSCRIPT_STEPS = 100_000
"""Recorded inner steps a header may list."""
TRANSCRIPT_TENSOR = "transcript/digests"
"""The one tensor of a served transcript: uint8, one row of 32 bytes per recorded step."""
_ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$|^[A-Za-z0-9_.:-]{1,64}$")


def transcript_tensors(parts: Sequence[tuple[bytes, bytes]]) -> dict[str, Tensor]:
    """The transcript as the tensor blob a miner serves under :func:`transcript_root`: for each recorded
    step, the digest of its parameters and the digest of the rest (``training.digest.part_digests``)."""
    if any(len(p) != 32 or len(r) != 32 for p, r in parts):
        raise ValueError("transcript digests are 32 bytes each")
    raw = b"".join(p + r for p, r in parts)
    rows = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.zeros(0, dtype=torch.uint8)
    return {TRANSCRIPT_TENSOR: rows.reshape(len(parts), 2, 32).clone()}


def transcript_root(parts: Sequence[tuple[bytes, bytes]]) -> str:
    """Hex state digest of :func:`transcript_tensors` (what a header's ``transcript.root`` holds)."""
    return state_digest(transcript_tensors(parts)).hex()


def with_transcript(header: UpdateHeader, tensors: Mapping[str, Tensor]) -> UpdateHeader:
    """``header`` with its transcript (hex digest pairs) attached from the served blob ``tensors``;
    :class:`TranscriptMismatch` unless it is exactly the transcript the header commits to."""
    t = tensors.get(TRANSCRIPT_TENSOR)
    if set(tensors) != {TRANSCRIPT_TENSOR} or t is None or t.dtype != torch.uint8:
        raise TranscriptMismatch(f"a transcript is one uint8 tensor {TRANSCRIPT_TENSOR!r}")
    if tuple(t.shape) != (len(header.transcript_steps), 2, 32):
        raise TranscriptMismatch(
            f"transcript of shape {tuple(t.shape)} for {len(header.transcript_steps)} recorded steps"
        )
    if state_digest(tensors).hex() != header.transcript_root:
        raise TranscriptMismatch("transcript does not hash to the header's transcript.root")
    raw = t.contiguous().numpy().tobytes()
    pairs = tuple((raw[i : i + 32].hex(), raw[i + 32 : i + 64].hex()) for i in range(0, len(raw), 64))
    return replace(header, transcript_digests=pairs)


def codec_wire(cfg: CodecConfig) -> tuple[str, int, int, int, str, str]:
    """The codec parameters that travel in a header (``ef_beta`` and ``feedback`` are the miner's)."""
    return (cfg.name, cfg.chunk, cfg.topk, cfg.bits, cfg.transform, cfg.index)


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
    transcript_digests: tuple[tuple[str, str], ...] = field(compare=False)
    """(parameters, rest) hex state digests at those steps. Not on the wire: a decoded header has none
    until :func:`with_transcript` attaches the transcript the miner serves (the blob ``transcript_root``
    names)."""
    transcript_root: str
    """Hex state digest of :func:`transcript_tensors` of the digest pairs: what the wire carries."""
    tokens: int
    """Training tokens the update consumed."""
    ef_after: str = ""
    """Hex state digest of the error-feedback residual after this update (tensors ``ef/<param>``)."""
    ef_source: tuple[int, str] | None = None
    """(round, hex update digest) of the miner's earlier update whose residual this one started from."""
    version: int = VERSION
    """Wire format version."""

    def to_json(self) -> dict[str, Any]:
        """The header as a canonical-JSON-ready dict (wire version 4: see :mod:`protocol.wire.updateparams`);
        ValueError if it cannot travel (parameters that are not whole modules, steps off the schedule)."""
        c = self.codec
        interval, steps = self.transcript_interval, self.transcript_steps
        if not steps or steps != schedule(interval, steps[-1], MAX_TRANSCRIPT_STEPS):
            raise ValueError(f"transcript steps {steps} are not 0, {interval}, ..., H")
        return {
            "version": self.version,
            "r": self.round,
            "m": self.miner,
            "mods": list(self.modules),
            "dims": infer_dims(self.modules, self.params),
            "c": [c.name, c.chunk, c.topk, c.bits, c.transform, c.index],
            "b": b64(self.base_checkpoint),
            "t": [interval, steps[-1], b64(self.transcript_root)],
            "n": self.tokens,
            "ef": [
                b64(self.ef_after),
                None if self.ef_source is None else [self.ef_source[0], b64(self.ef_source[1])],
            ],
        }


def make_header(
    round: int,
    miner: str,
    modules: tuple[str, ...] | list[str],
    tensors: dict[str, Encoded],
    codec: CodecConfig,
    base_checkpoint: bytes,
    transcript_interval: int,
    transcript_steps: list[int],
    transcript_parts: Sequence[tuple[bytes, bytes]],
    tokens: int,
    *,
    ef_after: bytes,
    ef_source: tuple[int, bytes] | None = None,
) -> UpdateHeader:
    """Build a header from raw values (digests as bytes)."""
    return UpdateHeader(
        round=round,
        miner=miner,
        modules=tuple(modules),
        params=tuple((n, tuple(tensors[n].shape)) for n in sorted(tensors)),
        codec=codec,
        base_checkpoint=base_checkpoint.hex(),
        transcript_interval=transcript_interval,
        transcript_steps=tuple(transcript_steps),
        transcript_digests=tuple((p.hex(), r.hex()) for p, r in transcript_parts),
        transcript_root=transcript_root(transcript_parts),
        tokens=tokens,
        ef_after=ef_after.hex(),
        ef_source=None if ef_source is None else (ef_source[0], ef_source[1].hex()),
    )


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
    if not isinstance(raw, list) or len(raw) != 6:
        raise MalformedHeader("codec must be [name, chunk, topk, bits, transform, index]")
    name, chunk, topk, bits, transform, index = raw
    if name not in KNOWN_CODECS:
        raise UnknownCodec(f"unknown codec {name!r}")
    if index not in ("packed", "elias-fano"):
        raise UnknownCodec(f"unknown index coding {index!r}")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (chunk, topk, bits)):
        raise MalformedHeader("codec chunk, topk and bits must be integers")
    try:
        return CodecConfig(name=name, chunk=chunk, topk=topk, bits=bits, transform=transform, index=index)
    except (ConfigError, TypeError) as exc:
        raise UnknownCodec(f"unsupported codec parameters: {exc}") from exc


#: The v4 header's keys: version, round, miner, modules, dims, codec, base checkpoint, transcript, tokens, ef.
_FIELDS = {"version", "r", "m", "mods", "dims", "c", "b", "t", "n", "ef"}


def parse_header(raw: Any, caps: UpdateCaps) -> UpdateHeader:
    """Validate a parsed header object (version first, then codec, then the rest); the parameters are
    derived from the modules and dims, within ``caps``, before any payload byte is read."""
    if not isinstance(raw, dict):
        raise MalformedHeader("header must be a JSON object")
    if "version" in raw and raw["version"] != VERSION:
        raise UnsupportedVersion(f"update version {raw['version']!r}, this node reads {VERSION}")
    if set(raw) != _FIELDS:
        raise MalformedHeader(f"header fields {sorted(raw)} != {sorted(_FIELDS)}")
    codec = _parse_codec(raw["c"])
    miner = _str(raw, "m")
    if not _ADDRESS.match(miner):
        raise MalformedHeader("miner must be an address")
    modules = check_modules(raw["mods"], caps.max_params)
    params = derive_params(modules, raw["dims"], caps.max_params, caps.max_param_numel)
    tr = raw["t"]
    if not isinstance(tr, list) or len(tr) != 3:
        raise MalformedHeader("transcript must be [interval, last step, root]")
    interval = _int({"interval": tr[0]}, "interval", 1)
    steps = schedule(interval, _int({"last step": tr[1]}, "last step", 1), MAX_TRANSCRIPT_STEPS)
    ef_after, ef_source = _parse_ef(raw["ef"])
    return UpdateHeader(
        round=_int(raw, "r"),
        miner=miner,
        modules=modules,
        params=params,
        codec=codec,
        base_checkpoint=unb64(raw["b"], "base"),
        transcript_interval=interval,
        transcript_steps=steps,
        transcript_digests=(),
        transcript_root=unb64(tr[2], "transcript root"),
        tokens=_int(raw, "n"),
        ef_after=ef_after,
        ef_source=ef_source,
    )


def _parse_ef(raw: Any) -> tuple[str, tuple[int, str] | None]:
    if not isinstance(raw, list) or len(raw) != 2:
        raise MalformedHeader("ef must be [after, source]")
    after = unb64(raw[0], "ef after")
    src = raw[1]
    if src is None:
        return after, None
    if not isinstance(src, list) or len(src) != 2:
        raise MalformedHeader("ef source must be null or [round, update]")
    return after, (_int({"round": src[0]}, "round"), unb64(src[1], "ef source update"))
