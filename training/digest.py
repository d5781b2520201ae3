"""The one digest of a tensor dict: checkpoints, transcript states and decoded updates.

``state_digest`` is SHA-256 (FIPS 180-4, ``hashlib.sha256``) over a canonical byte string:

    b"tessera.state.v1\\0"
    for each name in sorted(names) (Python string order, i.e. by code point):
        u32 len(name_utf8) || name_utf8
        u8 len(dtype) || dtype            e.g. b"float32" (torch dtype name without "torch.")
        u8 ndim || u64 dim for each dim
        u64 nbytes || the tensor's bytes, C-contiguous, little-endian

All integers are little-endian. The digest therefore depends on names, dtypes, shapes and exact bit
patterns, and on nothing else (not on dict order, device or strides). On-chain commitments wrap this
32-byte value with keccak in ``protocol``; SHA-256 keeps ``training`` free of non-stdlib hashes.
"""

from __future__ import annotations

import hashlib
import struct
import sys
from collections.abc import Mapping

import torch
from torch import Tensor

DOMAIN = b"tessera.state.v1\0"


def tensor_bytes(t: Tensor) -> bytes:
    """The little-endian C-contiguous bytes of a CPU copy of ``t``."""
    t = t.detach().to("cpu").contiguous()
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    if sys.byteorder != "little":  # pragma: no cover - torch supports little-endian hosts only
        raise RuntimeError("state_digest needs a little-endian host")
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def _tensor_view(t: Tensor) -> memoryview:
    """The bytes :func:`tensor_bytes` returns, as a view of a CPU tensor's own memory where it is already
    contiguous (no copy of a large state to hash it)."""
    t = t.detach().to("cpu").contiguous()
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    if sys.byteorder != "little":  # pragma: no cover - torch supports little-endian hosts only
        raise RuntimeError("state_digest needs a little-endian host")
    return t.reshape(-1).view(torch.uint8).numpy().data if t.numel() else memoryview(b"")


def state_digest(tensors: Mapping[str, Tensor]) -> bytes:
    """32-byte SHA-256 digest of a name -> tensor mapping (see the module doc for the byte layout)."""
    h = hashlib.sha256(DOMAIN)
    for name in sorted(tensors):
        t = tensors[name]
        nb = name.encode()
        dt = str(t.dtype).removeprefix("torch.").encode()
        h.update(struct.pack("<I", len(nb)) + nb + struct.pack("<B", len(dt)) + dt)
        h.update(struct.pack("<B", t.dim()) + b"".join(struct.pack("<Q", d) for d in t.shape))
        data = _tensor_view(t)
        h.update(struct.pack("<Q", data.nbytes))
        h.update(data)
    return h.digest()


#: Prefix of a training state's parameters (``training.inner``: ``param/<name>``); the rest of a state is
#: the optimizer's (AdamW moments and step counters).
PARAM_PREFIX = "param/"


def split_state(state: Mapping[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """A training state as (its parameters ``param/*``, the rest): the two parts a transcript step
    commits to apart, so a check that reads parameters only never moves the optimizer's moments."""
    params = {k: v for k, v in state.items() if k.startswith(PARAM_PREFIX)}
    return params, {k: v for k, v in state.items() if not k.startswith(PARAM_PREFIX)}


def part_digests(state: Mapping[str, Tensor]) -> tuple[bytes, bytes]:
    """(state digest of the parameters, state digest of the rest) of a training state (:func:`split_state`)."""
    params, rest = split_state(state)
    return state_digest(params), state_digest(rest)
