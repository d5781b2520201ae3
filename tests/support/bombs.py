"""Crafted updates whose header declares a costly decode (issue 11), and a per-input memory probe.

``crafted_update(params, codec)`` builds the canonical bytes of a well-formed update for any whole modules
(wire version 4 declares modules and dimensions, not parameters: :func:`model_params`, :func:`head`) and
codec parameters: every field has the size ``field_specs`` asks for, indices are ``0..k-1``
per chunk (strictly increasing), values and scales are zero. Its payload is a few bytes per kept value,
while the decode it declares can be as large as the header says: the issue's reproducers are such
updates (a 799-byte "topk" update with one chunk as large as its parameter; a 95 KB DCT update).

``PeakRSS`` measures the peak resident memory of the process during a call, torch's allocations included
(``tracemalloc`` sees only Python's): it resets the kernel's high-water mark (``/proc/self/clear_refs``,
value 5) before the call and reads ``VmHWM`` after it. Where that file cannot be written, it reports the
growth of ``ru_maxrss`` instead (a lower bound: only new high-water marks count).
"""

from __future__ import annotations

import functools
import math
import re
import resource
from collections.abc import Callable
from typing import Any

import torch

from protocol.wire import update as wire
from protocol.wire import updatecost, updateheader
from training.bitpack import pack_bits
from training.codecs import Encoded, field_specs, index_bits, layout
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


def model_params(modules: list[str], **dims: int) -> dict[str, tuple[int, ...]]:
    """The parameters (name -> shape) of ``modules`` with the given dimensions (``vocab``, ``seq_len``,
    ``d_model``, ``d_ff``, ``n_experts``; those the modules do not use are ignored)."""
    from protocol.wire.updateheader import derive_params, used_dims
    from training.modellayout import DIMS

    used = used_dims(modules, dims.get("n_experts", 0) > 0)
    sizes = [dims.get(d, 1) if d in used else 0 for d in DIMS]
    return dict(derive_params(modules, sizes, 1 << 20, 1 << 62))


def head(n: int, d_model: int = 1) -> dict[str, tuple[int, ...]]:
    """The head module with ``n`` x ``d_model`` output values (and two norm vectors of ``d_model``)."""
    return model_params(["head"], vocab=n, d_model=d_model)


def crafted_update(params: dict[str, tuple[int, ...]], codec: CodecConfig, *, round: int = 3) -> bytes:
    """Canonical bytes of an update carrying ``params`` (name -> shape) encoded with ``codec``."""
    from training.model import module_of

    tensors = {n: crafted_fields(s, codec) for n, s in params.items()}
    modules = sorted({module_of(n) for n in params})
    fields = updateheader.HeaderFields(
        round=round, miner=MINER, modules=modules, codec=codec, base_checkpoint=b"\x11" * 32,
        transcript_interval=2, transcript_steps=[0, 2],
        transcript_parts=[(b"\x01" * 32, b"\x05" * 32), (b"\x02" * 32, b"\x06" * 32)], tokens=512,
        ef_after=b"\x03" * 32,
    )  # fmt: skip
    return wire.encode_update(wire.make_update(fields, tensors))


#: The issue's reproducers, as (label, params, codec): each decoded to gigabytes before any header check.
ISSUE_BOMBS: list[tuple[str, dict[str, tuple[int, ...]], CodecConfig]] = [
    # 799 bytes: one chunk as large as the parameter, one value kept -> +2 GiB float64 scatter buffer
    (
        "topk-chunk-as-large-as-param",
        head(1 << 28),
        CodecConfig(chunk=1 << 28, topk=1, bits=32),
    ),
    # ~840 bytes: the same at 2 bits, two parameters -> +3 GiB
    (
        "topk-two-huge-chunks-2bit",
        model_params(["embed", "head"], vocab=1 << 28, seq_len=1 << 27),
        CodecConfig(chunk=1 << 28, topk=1, bits=2),
    ),
    # ~95 KB: DCT tiles keeping one coefficient each -> hundreds of MiB of float64 tiles
    (
        "dct-one-coefficient-per-tile",
        head(1 << 26),
        CodecConfig(chunk=4096, topk=1, transform="dct"),
    ),
    # generic (numpy, bit-by-bit) index width: 8 bytes per bit per index
    (
        "topk-generic-index-width",
        head(1 << 26),
        CodecConfig(chunk=1 << 20, topk=1 << 14, bits=2),
    ),
    # DCT with every coefficient kept: [tiles, k, 64] float64 basis rows
    (
        "dct-all-coefficients",
        head(1 << 22),
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


def _malloc_trim() -> Callable[[], Any]:
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        return lambda: libc.malloc_trim(0)
    except (OSError, AttributeError):
        return lambda: None


class PeakRSS:
    """Peak resident bytes added by a call (see the module doc). Free heap memory is handed back to the
    kernel first (``malloc_trim``), so an allocation that reuses it is counted too."""

    def __init__(self) -> None:
        self.exact = _can_reset_hwm()
        self._trim = _malloc_trim()

    def measure(self, fn: Callable[[], Any]) -> tuple[int, BaseException | None]:
        """(peak bytes above the resident size before the call, the exception ``fn`` raised or None)."""
        err: BaseException | None = None
        self._trim()
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


#: Codec families whose largest admitted update (at the default caps) the measuring campaign decodes.
CAP_FAMILIES: list[tuple[str, CodecConfig]] = [
    ("run-codec topk32 2-bit", CodecConfig()),
    ("topk chunk64 k4 2-bit", CodecConfig(chunk=64, topk=4, bits=2)),
    ("dense 2-bit", CodecConfig(name="dense", bits=2)),
    ("dense 8-bit", CodecConfig(name="dense", bits=8)),
    ("dense fp32", CodecConfig(name="dense", bits=32)),
    ("topk one huge chunk fp32", CodecConfig(chunk=1 << 28, topk=1, bits=32)),
    ("topk one huge chunk 2-bit", CodecConfig(chunk=1 << 28, topk=1, bits=2)),
    ("topk generic index width 20", CodecConfig(chunk=1 << 20, topk=1 << 10, bits=2)),
    ("dct k32 2-bit", CodecConfig(chunk=4096, topk=32, transform="dct")),
    ("dct k1 2-bit", CodecConfig(chunk=4096, topk=1, transform="dct")),
    ("dct k256 8-bit", CodecConfig(chunk=4096, topk=256, bits=8, transform="dct")),
    ("dct k32 fp32", CodecConfig(chunk=4096, topk=32, bits=32, transform="dct")),
]


def _admitted(numel: int, codec: CodecConfig, caps: updatecost.UpdateCaps) -> bool:
    if numel > caps.max_param_numel:
        return False
    cost = updatecost.decode_cost(tuple(sorted(head(numel).items())), codec)
    return (
        cost.decoded_bytes <= caps.max_decoded_bytes
        and cost.peak_bytes <= caps.max_decode_memory
        and cost.peak_bytes <= caps.max_memory_ratio * cost.decoded_bytes + updatecost.MEMORY_SLACK
        and cost.work <= caps.max_decode_work
        and cost.payload_bytes + 4096 <= caps.max_update_bytes
    )


def largest_admitted(codec: CodecConfig, caps: updatecost.UpdateCaps | None = None) -> int:
    """The most values one parameter may have under ``caps`` with ``codec`` (0 if none): binary search."""
    caps = caps or updatecost.UpdateCaps()
    lo, hi = 0, caps.max_param_numel
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _admitted(mid, codec, caps):
            lo = mid
        else:
            hi = mid - 1
    return lo


def at_cap_updates(
    caps: updatecost.UpdateCaps | None = None, families: list[tuple[str, CodecConfig]] | None = None
) -> list[tuple[str, bytes]]:
    """(label, bytes) of the largest update each codec of ``families`` (default :data:`CAP_FAMILIES`) may
    send under ``caps``."""
    out = []
    for label, codec in CAP_FAMILIES if families is None else families:
        n = largest_admitted(codec, caps)
        if n:
            out.append((f"{label} at the cap ({n} values)", crafted_update(head(n), codec)))
    return out


def measure_at_cap(
    caps: updatecost.UpdateCaps | None = None,
    repeat: int = 2,
    families: list[tuple[str, CodecConfig]] | None = None,
) -> list[dict[str, Any]]:
    """Decode each :func:`at_cap_updates` update ``repeat`` times at ``caps`` (the first decode of a family
    also warms its caches); the best-of wall time and worst peak RSS per family, with the declared size."""
    import time

    caps = caps or updatecost.UpdateCaps()
    probe = PeakRSS()
    rows = []
    for label, data in at_cap_updates(caps, families):
        header_len = int.from_bytes(data[8:12], "little")
        from protocol.wire.canonical import loads_canonical

        h = updateheader.parse_header(loads_canonical(data[12 : 12 + header_len]), caps)
        cost = updatecost.decode_cost(h.params, h.codec)
        times, peaks, outcome = [], [], "accepted"
        for _ in range(repeat):
            t = time.perf_counter()
            peak, err = probe.measure(functools.partial(wire.decode_update, data, caps))
            times.append(time.perf_counter() - t)
            peaks.append(peak)
            if err is not None:
                outcome = type(err).__name__
        rows.append(
            {
                "family": label,
                "bytes": len(data),
                "declared_decoded_mib": round(cost.decoded_bytes / 2**20, 1),
                "estimated_peak_mib": round(cost.peak_bytes / 2**20, 1),
                "estimated_seconds": round(cost.work / 1e9, 2),
                "seconds": round(min(times), 3),
                "seconds_first": round(times[0], 3),
                "peak_mib": round(max(peaks) / 2**20, 1),
                "peak_over_declared": round(max(peaks) / max(1, cost.decoded_bytes), 2),
                "outcome": outcome,
            }
        )
    return rows


class TracePeak:
    """Peak bytes Python allocated during a call (``tracemalloc``): exact for pure-Python decoders such as
    ``decode_record``, blind to torch's allocations (use :class:`PeakRSS` there)."""

    def measure(self, fn: Callable[[], Any]) -> tuple[int, BaseException | None]:
        """(peak traced bytes during the call, the exception ``fn`` raised or None)."""
        import tracemalloc

        err: BaseException | None = None
        if not tracemalloc.is_tracing():
            tracemalloc.start()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        try:
            fn()
        except Exception as exc:
            err = exc
        return max(0, tracemalloc.get_traced_memory()[1] - base), err
