"""Tensor dicts on the wire (checkpoints, transcript states): safetensors bytes addressed by state digest.

A tensor blob's digest is ``0x`` + ``training.digest.state_digest`` of its decoded tensors, so a
checkpoint fetched from any peer is checked against the certified digest of its *content*, not of one
serialisation of it. Decoding checks the size cap and the safetensors header before parsing; never pickle.

Checkpoint blobs hold ``param/<name>`` (theta) and ``momentum/<name>`` (the outer optimizer's buffers, so
a validator that joins late merges bit-identically); transcript state blobs hold what
``training.inner`` captures (``param/``, ``exp_avg/``, ``exp_avg_sq/``, ``step``).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping

from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import Tensor

from protocol.errors import ProtocolError
from protocol.wire.canonical import CanonicalJSONError, check_json_depth
from training.digest import state_digest

#: Default cap on a tensor blob (bytes).
MAX_TENSOR_BLOB = 256 * 1024 * 1024
#: The safetensors dtypes a tensor blob may declare. Anything else is refused before
#: ``safetensors.torch`` parses the blob: ``F4``, ``F6_E2M3``, ``F6_E3M2`` and ``F8_E8M0`` pass the Rust
#: parser and then raise ``KeyError`` in ``safetensors.torch``.
ALLOWED_DTYPES = frozenset({"BOOL", "U8", "I8", "I16", "I32", "I64", "F16", "BF16", "F32", "F64"})


class TensorBlobError(ProtocolError):
    """Bytes are not a well-formed tensor blob."""


def encode_tensors(tensors: Mapping[str, Tensor]) -> bytes:
    """Safetensors bytes of a tensor dict (names sorted)."""
    return st_save({k: tensors[k].detach().contiguous().cpu() for k in sorted(tensors)})


def decode_tensors(data: bytes, max_bytes: int = MAX_TENSOR_BLOB) -> dict[str, Tensor]:
    """Parse a tensor blob with a size cap; :class:`TensorBlobError` on anything malformed."""
    if len(data) > max_bytes:
        raise TensorBlobError(f"tensor blob of {len(data)} bytes exceeds {max_bytes}")
    if len(data) < 8:
        raise TensorBlobError("tensor blob is truncated")
    (n,) = struct.unpack("<Q", data[:8])
    if n > min(len(data) - 8, 16 * 1024 * 1024):
        raise TensorBlobError("tensor blob header length is out of range")
    try:
        check_json_depth(data[8 : 8 + n])
        meta = json.loads(data[8 : 8 + n])
        if not isinstance(meta, dict):
            raise ValueError("header is not an object")
        for name, entry in meta.items():
            if name == "__metadata__":
                continue
            dtype = entry.get("dtype") if isinstance(entry, dict) else None
            if not isinstance(dtype, str) or dtype not in ALLOWED_DTYPES:
                raise TensorBlobError(f"tensor {name!r}: dtype {dtype!r} is not allowed")
        return dict(st_load(data))
    except (CanonicalJSONError, SafetensorError, ValueError, RuntimeError, RecursionError) as exc:
        raise TensorBlobError(f"tensor blob does not parse: {exc}") from exc
    except (KeyError, TypeError, IndexError, OverflowError, MemoryError) as exc:  # safetensors.torch's own
        raise TensorBlobError(f"tensor blob does not load: {type(exc).__name__}: {exc}") from exc


def tensors_digest(tensors: Mapping[str, Tensor]) -> str:
    """``0x`` + state digest hex."""
    return "0x" + state_digest(tensors).hex()


def tensor_blob_digest(data: bytes) -> str:
    """The digest of a tensor blob's content (for ``protocol.p2p.transfer.fetch_blob``'s ``digest_fn``)."""
    return tensors_digest(decode_tensors(data))


def split_checkpoint(tensors: Mapping[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """(params, momentum buffers) of a checkpoint blob's tensors."""
    params = {k.removeprefix("param/"): v for k, v in tensors.items() if k.startswith("param/")}
    mom = {k: v for k, v in tensors.items() if k.startswith("momentum/")}
    if len(params) + len(mom) != len(tensors):
        raise TensorBlobError("checkpoint holds tensors other than param/ and momentum/")
    return params, mom


def join_checkpoint(params: Mapping[str, Tensor], momentum: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The tensors of a checkpoint blob."""
    out = {f"param/{k}": v for k, v in params.items()}
    out.update({k if k.startswith("momentum/") else f"momentum/{k}": v for k, v in momentum.items()})
    return out
