"""What a version-4 update header leaves out and derives: parameter names and shapes, recorded steps, hex.

A Tessera model's parameters are a pure function of its module ids and five dimensions (``training.model``),
so the header carries the module ids and ``dims`` = ``[vocab, seq_len, d_model, d_ff, n_experts]``; the
decoder derives every ``(name, shape)`` from them (:func:`derive_params`) before any payload byte is read.
A dimension no listed module uses is 0 and every used one is positive, so one set of parameters has one
``dims`` (:func:`infer_dims`, the encoder's side). ``n_experts`` is the rows of a trunk's router: 0 means a
trunk with a dense MLP. The recorded steps are ``0, k, 2k, ..., H`` (``training.inner``), carried as
``(k, H)``. A 32-byte digest travels as 43 characters of unpadded base64url (:func:`b64`).
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Iterable, Sequence

from protocol.wire.updateerrors import HeaderMismatch, MalformedHeader, UpdateTooLarge

DIMS = ("vocab", "seq_len", "d_model", "d_ff", "n_experts")
"""The model dimensions a v4 header carries, in order."""
MAX_DIM = (1 << 31) - 1
_B64_32 = re.compile(r"^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$")
_INDEX = r"(0|[1-9][0-9]{0,5})"
_MODULE = re.compile(
    rf"^(embed|head|trunk\.{_INDEX}|path\.{_INDEX}\.{_INDEX}|moe\.{_INDEX}\.expert\.{_INDEX})$"
)

Dim = tuple[int, str]  # (multiplier, dimension name)
_BLOCK: tuple[tuple[str, tuple[Dim, ...]], ...] = (
    ("attn.proj.weight", ((1, "d_model"), (1, "d_model"))),
    ("attn.qkv.weight", ((3, "d_model"), (1, "d_model"))),
    ("ln1.bias", ((1, "d_model"),)),
    ("ln1.weight", ((1, "d_model"),)),
    ("ln2.bias", ((1, "d_model"),)),
    ("ln2.weight", ((1, "d_model"),)),
)
_MLP: tuple[tuple[str, tuple[Dim, ...]], ...] = (
    ("fc.weight", ((1, "d_ff"), (1, "d_model"))),
    ("proj.weight", ((1, "d_model"), (1, "d_ff"))),
)
_EMBED = (("pos.weight", ((1, "seq_len"), (1, "d_model"))), ("tok.weight", ((1, "vocab"), (1, "d_model"))))
_HEAD = (
    ("ln.bias", ((1, "d_model"),)),
    ("ln.weight", ((1, "d_model"),)),
    ("out.weight", ((1, "vocab"), (1, "d_model"))),
)
_ROUTER = (("router.weight", ((1, "n_experts"), (1, "d_model"))),)


def _template(module: str, routed: bool) -> tuple[tuple[str, tuple[Dim, ...]], ...]:
    """The (suffix, symbolic shape) of a module's parameters; ``routed``: a trunk has a router."""
    kind = module.split(".")[0]
    if kind == "embed":
        return _EMBED
    if kind == "head":
        return _HEAD
    if kind == "moe":
        return _MLP
    mlp = tuple((f"mlp.{s}", shape) for s, shape in _MLP)
    return _BLOCK + (_ROUTER if kind == "trunk" and routed else mlp)


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
    return {d for m in modules for _, shape in _template(m, routed) for _, d in shape}


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
        for suffix, shape in _template(m, size["n_experts"] > 0):
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
        for suffix, shape in _template(m, bool(routers)):
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
