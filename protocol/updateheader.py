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

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from protocol.updatecost import UpdateCaps
from protocol.updateerrors import (
    BadTensorShape,
    CodecMismatch,
    HeaderMismatch,
    MalformedHeader,
    TranscriptMismatch,
    UnknownCodec,
    UnsupportedVersion,
    UpdateTooLarge,
)
from training.codecs import Encoded
from training.config import CodecConfig
from training.digest import state_digest
from training.errors import ConfigError, ModuleIdError
from training.model import module_of

VERSION = 3
"""Wire format version this module reads and writes (2: the ``ef`` chain, F12; 3: the transcript root)."""
KNOWN_CODECS = ("dense", "topk")
MAX_TRANSCRIPT_STEPS = 100_000
"""Recorded inner steps a header may list."""
TRANSCRIPT_TENSOR = "transcript/digests"
"""The one tensor of a served transcript: uint8, one row of 32 bytes per recorded step."""
_ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$|^[A-Za-z0-9_.:-]{1,64}$")
_HEX32 = re.compile(r"^[0-9a-f]{64}$")


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
                **({} if c.index == "packed" else {"index": c.index}),
            },
            "base_checkpoint": self.base_checkpoint,
            "transcript": {
                "interval": self.transcript_interval,
                "steps": list(self.transcript_steps),
                "root": self.transcript_root,
            },
            "tokens": self.tokens,
            "ef": {
                "after": self.ef_after,
                "source": None
                if self.ef_source is None
                else {"round": self.ef_source[0], "update": self.ef_source[1]},
            },
        }


def make_header(
    round_index: int,
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
        round=round_index,
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
    keys = {"name", "chunk", "topk", "bits", "transform"}
    if not isinstance(raw, dict) or set(raw) - {"index"} != keys:
        raise MalformedHeader("codec must be an object with name, chunk, topk, bits, transform (and index)")
    if raw.get("index", "elias-fano") not in ("elias-fano",):
        # the default coding is written by leaving the key out, so each header has one spelling
        raise UnknownCodec(f"unknown index coding {raw['index']!r}")
    if raw["name"] not in KNOWN_CODECS:
        raise UnknownCodec(f"unknown codec {raw['name']!r}")
    try:
        return CodecConfig(
            name=raw["name"],
            chunk=raw["chunk"],
            topk=raw["topk"],
            bits=raw["bits"],
            transform=raw["transform"],
            index=raw.get("index", "packed"),
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
    params = _parse_params(raw["params"], modules, caps)
    tr = raw["transcript"]
    steps, root = _parse_transcript(tr)
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
        transcript_digests=(),
        transcript_root=root,
        tokens=_int(raw, "tokens"),
        ef_after=ef_after,
        ef_source=ef_source,
    )


def _parse_params(params_raw: Any, modules: list[str], caps: UpdateCaps) -> list[tuple[str, tuple[int, ...]]]:
    """The header's ``params``: [name, [positive dims]] pairs sorted by name, within ``caps``, of exactly
    the listed ``modules``."""
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
    return params


def _parse_transcript(tr: Any) -> tuple[list[int], str]:
    """The header's ``transcript``: its recorded steps (ascending, at most ``MAX_TRANSCRIPT_STEPS``) and
    root; its ``interval`` is read with the other integers."""
    if not isinstance(tr, dict) or set(tr) != {"interval", "steps", "root"}:
        raise MalformedHeader("transcript must have interval, steps, root")
    steps = tr["steps"]
    if (
        not isinstance(steps, list)
        or not steps
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in steps)
        or steps != sorted(set(steps))
        or len(steps) > MAX_TRANSCRIPT_STEPS
    ):
        raise MalformedHeader(f"transcript steps must be 1 to {MAX_TRANSCRIPT_STEPS} ascending integers")
    root = _str(tr, "root")
    if not _HEX32.match(root):
        raise MalformedHeader("transcript.root must be 64 lowercase hex digits")
    return steps, root


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
