"""The update's header (wire version 4): what it says, what it derives, how it is checked, and the
transcript it commits to. One seam: the header's fields, the parameters and steps it derives from them, its
JSON form and its parse.

**Parameters.** A Tessera model's parameters are a pure function of its module ids and five dimensions
(the layout ``training.modellayout`` declares: :func:`training.modellayout.module_template`), so the header carries the module ids and ``dims`` = ``[vocab, seq_len, d_model, d_ff,
n_experts]``; the decoder derives every ``(name, shape)`` from them (:func:`derive_params`) before any
payload byte is read. A dimension no listed module uses is 0 and every used one is positive, so one set of
parameters has one ``dims`` (:func:`infer_dims`, the encoder's side). ``n_experts`` is the rows of a trunk's
router: 0 means a trunk with a dense MLP. The recorded steps are ``0, k, 2k, ..., H`` (``training.inner``),
carried as ``(k, H)`` (:func:`schedule`). A 32-byte digest travels as 43 characters of unpadded base64url
(:func:`b64`).

**Transcript.** The transcript does not travel in the header. Each recorded inner step (61 at H = 60 with
k = 1) commits to two state digests: of the state's parameters (``param/*``) and of the rest (the AdamW
moments and step), ``training.digest.part_digests``. The header carries ``transcript.root``, the state
digest of those pairs laid out as one uint8 tensor ``[steps, 2, 32]`` (:func:`transcript_tensors`); the
miner serves that blob under the root, and each part of each state under its own digest. A validator
fetches the transcript once (``fetch_blob`` checks the digest), attaches it with :func:`with_transcript`,
and then moves only the parts a check reads: none for the anchor (theta_r's parameters hash to the step-0
parameter digest), the parameters alone for the final state, both parts of a replayed segment's start
.

**Building one.** :func:`make_header` takes a :class:`HeaderFields` (the miner's raw values, digests as
bytes) and the encoded tensors.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Iterable, Mapping, Sequence
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
    UpdateTooLarge,
)
from training.codecregistry import CODECS
from training.codecs import Encoded
from training.config import CodecConfig
from training.digest import state_digest
from training.errors import ConfigError
from training.indexcodings import INDEX_CODINGS
from training.modellayout import DIMS, module_template

VERSION = 4
"""Wire format version this module reads and writes (2: the ``ef`` chain, F12; 3: the transcript root;
4: parameters derived from modules and dims, steps from (k, H), base64url digests)."""
MAX_TRANSCRIPT_STEPS = 100_000
"""Recorded inner steps a header may list."""
TRANSCRIPT_TENSOR = "transcript/digests"
"""The one tensor of a served transcript: uint8, one row of 32 bytes per recorded step."""
_ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$|^[A-Za-z0-9_.:-]{1,64}$")


# -- parameters and steps the header derives ---------------------------------------------------------------
MAX_DIM = (1 << 31) - 1
_B64_32 = re.compile(r"^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$")
_INDEX = r"(0|[1-9][0-9]{0,5})"
_MODULE = re.compile(
    rf"^(embed|head|trunk\.{_INDEX}|path\.{_INDEX}\.{_INDEX}|moe\.{_INDEX}\.expert\.{_INDEX})$"
)


def check_modules(modules: object, cap: int) -> tuple[str, ...]:
    """A header's ``modules``: a non-empty list of distinct, well-formed module ids (at most ``cap``)."""
    if not isinstance(modules, list) or not modules or not all(isinstance(m, str) for m in modules):
        raise MalformedHeader("modules must be a non-empty list of strings")
    if len(modules) > cap:
        raise UpdateTooLarge(f"{len(modules)} modules > cap {cap}")
    if len(set(modules)) != len(modules):
        raise MalformedHeader("duplicate module ids")
    for m in modules:
        if not _MODULE.match(m):
            raise HeaderMismatch(f"{m!r} is not a module id")
    return tuple(modules)


def used_dims(modules: Iterable[str], routed: bool) -> set[str]:
    """The names of the dimensions ``modules`` use (``routed``: a trunk has a router)."""
    return {d for m in modules for _, shape in module_template(m, routed) for _, d in shape}


def derive_params(
    modules: Sequence[str], dims: Sequence[int], max_params: int, max_numel: int
) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Every (name, shape) of ``modules`` under ``dims``, sorted by name; ``dims`` must give exactly the
    dimensions the modules use (:class:`MalformedHeader`), within the caps (:class:`UpdateTooLarge`)."""
    if (
        not isinstance(dims, list)
        or len(dims) != len(DIMS)
        or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_DIM for d in dims)
    ):
        raise MalformedHeader(f"dims must be {len(DIMS)} integers in [0, {MAX_DIM}]")
    size = dict(zip(DIMS, dims, strict=True))
    used = used_dims(modules, size["n_experts"] > 0)
    for name in DIMS:
        if (size[name] > 0) != (name in used) and not (name == "n_experts" and size[name] == 0):
            raise MalformedHeader(
                f"dims: {name} must be {'positive' if name in used else '0'} for these modules"
            )
    params: list[tuple[str, tuple[int, ...]]] = []
    for m in modules:
        for suffix, shape in module_template(m, size["n_experts"] > 0):
            params.append((f"{m}.{suffix}", tuple(k * size[d] for k, d in shape)))
            if len(params) > max_params:
                raise UpdateTooLarge(f"more than {max_params} params")
            if math.prod(params[-1][1]) > max_numel:
                raise UpdateTooLarge(f"param {params[-1][0]!r} has more than {max_numel} values")
    return tuple(sorted(params))


def infer_dims(modules: Sequence[str], params: Sequence[tuple[str, tuple[int, ...]]]) -> list[int]:
    """The ``dims`` of whole modules' ``params`` (the inverse of :func:`derive_params`), or ValueError
    when they are not exactly the parameters of ``modules`` of a Tessera model."""
    shapes = dict(params)
    routers = [s[0] for n, s in params if n.startswith("trunk.") and n.endswith(".router.weight") and s]
    size = dict.fromkeys(DIMS, 0)
    size["n_experts"] = routers[0] if routers else 0
    for m in modules:
        if not _MODULE.match(m):
            raise ValueError(f"{m!r} is not a module id")
        for suffix, shape in module_template(m, bool(routers)):
            got = shapes.get(f"{m}.{suffix}")
            if got is None or len(got) != len(shape):
                raise ValueError(f"{m}.{suffix} is missing or of another rank")
            for (k, d), v in zip(shape, got, strict=True):
                size[d] = size[d] or v // k
    dims = [size[d] for d in DIMS]
    if derive_params(list(modules), dims, len(params), 1 << 62) != tuple(sorted(params)):
        raise ValueError("the parameters are not exactly those of the listed modules")
    return dims


def schedule(interval: int, last: int, cap: int) -> tuple[int, ...]:
    """The recorded steps ``0, k, 2k, ..., H`` (H also when k does not divide it), at most ``cap``."""
    if -(-last // interval) + 1 > cap:
        raise MalformedHeader(f"transcript of more than {cap} recorded steps")
    return tuple(sorted({*range(0, last, interval), last}))


def b64(hex_digest: str) -> str:
    """A hex 32-byte digest as unpadded base64url (43 characters)."""
    return base64.urlsafe_b64encode(bytes.fromhex(hex_digest)).rstrip(b"=").decode()


def unb64(value: object, what: str) -> str:
    """The hex of a 43-character canonical base64url 32-byte digest, else :class:`MalformedHeader`."""
    if not isinstance(value, str) or not _B64_32.match(value):
        raise MalformedHeader(f"{what} must be a 32-byte digest in 43 characters of unpadded base64url")
    return base64.urlsafe_b64decode(value + "=").hex()


# -- the transcript ----------------------------------------------------------------------------------------


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
        """The header as a canonical-JSON-ready dict (wire version 4: see the module doc);
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


@dataclass(frozen=True)
class HeaderFields:
    """What a miner says of its update, as raw values (digests as bytes): :func:`make_header`'s and
    ``protocol.wire.update.make_update``'s one argument besides the encoded tensors."""

    round: int
    """Outer round r the update is for."""
    miner: str
    """The miner's address."""
    modules: Sequence[str]
    """Module ids the update carries pseudo-gradients for."""
    codec: CodecConfig
    """The codec the tensors were encoded with."""
    base_checkpoint: bytes
    """State digest of theta_r the miner trained from."""
    transcript_interval: int
    """k of the transcript."""
    transcript_steps: Sequence[int]
    """Recorded inner steps (``0, k, 2k, ..., H``)."""
    transcript_parts: Sequence[tuple[bytes, bytes]]
    """(parameters, rest) state digests at those steps."""
    tokens: int
    """Training tokens the update consumed."""
    ef_after: bytes
    """State digest of the error-feedback residual after this update."""
    ef_source: tuple[int, bytes] | None = None
    """(round, update digest) of the miner's earlier update whose residual this one started from."""


def make_header(fields: HeaderFields, tensors: dict[str, Encoded]) -> UpdateHeader:
    """The header of ``tensors`` (encoded pseudo-gradients by parameter name) and the miner's ``fields``."""
    f = fields
    return UpdateHeader(
        round=f.round,
        miner=f.miner,
        modules=tuple(f.modules),
        params=tuple((n, tuple(tensors[n].shape)) for n in sorted(tensors)),
        codec=f.codec,
        base_checkpoint=f.base_checkpoint.hex(),
        transcript_interval=f.transcript_interval,
        transcript_steps=tuple(f.transcript_steps),
        transcript_digests=tuple((p.hex(), r.hex()) for p, r in f.transcript_parts),
        transcript_root=transcript_root(f.transcript_parts),
        tokens=f.tokens,
        ef_after=f.ef_after.hex(),
        ef_source=None if f.ef_source is None else (f.ef_source[0], f.ef_source[1].hex()),
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
    if not isinstance(name, str) or name not in CODECS:  # the registry's names (``training.codecregistry``)
        raise UnknownCodec(f"unknown codec {name!r}")
    if index not in tuple(
        INDEX_CODINGS
    ):  # the declared codings (``training.indexcodings``); not hashed: a list
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
