"""Crafted updates whose header declares a costly decode (issue 11), and a per-input memory probe.

``crafted_update(params, codec)`` builds the canonical bytes of a well-formed update for any parameter
shapes and codec parameters: every field has the size ``field_specs`` asks for, indices are ``0..k-1``
per chunk (strictly increasing), values and scales are zero. Its payload is a few bytes per kept value,
while the decode it declares can be as large as the header says: the issue's reproducers are such
updates (a 799-byte "topk" update with one chunk as large as its parameter; a 95 KB DCT update).

``PeakRSS`` measures the peak resident memory of the process during a call, torch's allocations included
(``tracemalloc`` sees only Python's): it resets the kernel's high-water mark (``/proc/self/clear_refs``,
value 5) before the call and reads ``VmHWM`` after it. Where that file cannot be written, it reports the
growth of ``ru_maxrss`` instead (a lower bound: only new high-water marks count).
"""

from __future__ import annotations

import math
import re
import resource
from collections.abc import Callable
from typing import Any

import torch

from protocol import update as wire
from training.codecs import Encoded, field_specs, index_bits, layout, pack_bits
from training.config import CodecConfig

MINER = "0x" + "ab" * 20


def crafted_fields(shape: tuple[int, ...], codec: CodecConfig) -> Encoded:
    """Fields of the sizes ``field_specs`` gives, with indices ``0..k-1`` in every chunk and zero values."""
    lay = layout(math.prod(shape), codec)
    fields: dict[str, torch.Tensor] = {}
    for name, (dtype, fshape) in field_specs(shape, codec).items():
        fields[name] = torch.zeros(fshape, dtype=dtype)
    if codec.name == "topk":
        parts = []
        if lay.full_chunks:
            parts.append(torch.arange(lay.k_full, dtype=torch.int64).repeat(lay.full_chunks))
        if lay.tail:
            parts.append(torch.arange(lay.k_tail, dtype=torch.int64))
        idx = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64)
        fields["idx"] = pack_bits(idx, index_bits(codec))
    return Encoded(tuple(shape), fields)


def crafted_update(params: dict[str, tuple[int, ...]], codec: CodecConfig, *, round: int = 3) -> bytes:
    """Canonical bytes of an update carrying ``params`` (name -> shape) encoded with ``codec``."""
    from training.model import module_of

    tensors = {n: crafted_fields(s, codec) for n, s in params.items()}
    modules = sorted({module_of(n) for n in params})
    header = wire.make_header(
        round, MINER, modules, tensors, codec, b"\x11" * 32, 2, [0, 2], [b"\x01" * 32, b"\x02" * 32], 512,
        ef_after=b"\x03" * 32,
    )  # fmt: skip
    return wire.encode_update(wire.Update(header, tensors))


#: The issue's reproducers, as (label, params, codec): each decoded to gigabytes before any header check.
ISSUE_BOMBS: list[tuple[str, dict[str, tuple[int, ...]], CodecConfig]] = [
    # 799 bytes: one chunk as large as the parameter, one value kept -> +2 GiB float64 scatter buffer
    (
        "topk-chunk-as-large-as-param",
        {"head.out.weight": (1 << 28,)},
        CodecConfig(chunk=1 << 28, topk=1, bits=32),
    ),
    # ~840 bytes: the same at 2 bits, two parameters -> +3 GiB
    (
        "topk-two-huge-chunks-2bit",
        {"head.out.weight": (1 << 28,), "head.ln.weight": (1 << 27,)},
        CodecConfig(chunk=1 << 28, topk=1, bits=2),
    ),
    # ~95 KB: DCT tiles keeping one coefficient each -> hundreds of MiB of float64 tiles
    (
        "dct-one-coefficient-per-tile",
        {"head.out.weight": (1 << 26,)},
        CodecConfig(chunk=4096, topk=1, transform="dct"),
    ),
    # generic (numpy, bit-by-bit) index width: 8 bytes per bit per index
    (
        "topk-generic-index-width",
        {"head.out.weight": (1 << 26,)},
        CodecConfig(chunk=1 << 20, topk=1 << 14, bits=2),
    ),
    # DCT with every coefficient kept: [tiles, k, 64] float64 basis rows
    (
        "dct-all-coefficients",
        {"head.out.weight": (1 << 22,)},
        CodecConfig(chunk=4096, topk=4096, transform="dct"),
    ),
]


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        m = re.search(rf"^{field}:\s+(\d+) kB", fh.read(), re.M)
    return int(m.group(1)) if m else 0


def _can_reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


class PeakRSS:
    """Peak resident bytes added by a call (see the module doc)."""

    def __init__(self) -> None:
        self.exact = _can_reset_hwm()

    def measure(self, fn: Callable[[], Any]) -> tuple[int, BaseException | None]:
        """(peak bytes above the resident size before the call, the exception ``fn`` raised or None)."""
        err: BaseException | None = None
        if self.exact:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
            before = _status_kib("VmRSS")
        else:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            fn()
        except Exception as exc:
            err = exc
        after = _status_kib("VmHWM") if self.exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return max(0, after - before) * 1024, err
