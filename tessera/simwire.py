"""The simulation transport that sends each update through the real wire format.

``tessera simulate`` and ``tessera bench training`` both use it; it lives here, beside neither, so that
``benchmarks`` need not import ``tessera.commands`` (which imports ``benchmarks``: an import cycle).
"""

from __future__ import annotations

from typing import Any

from protocol.wire.update import decode_update, encode_update, make_update
from training.codecs import encode
from training.config import CodecConfig


def wire_transport(codec: Any) -> Any:
    """A simulation transport that sends each update through ``protocol.wire.update`` and counts its bytes."""
    fp32 = CodecConfig(name="dense", chunk=4096, bits=32)

    def transport(round, assignment, encs, delta, res, base_digest):  # type: ignore[no-untyped-def]
        used = codec
        if encs is None:
            encs = {n: encode(t, fp32) for n, t in delta.items()}
            used = fp32
        data = encode_update(
            make_update(
                round,
                assignment.miner,
                list(assignment.module_ids),
                encs,
                used,
                base_digest,
                res.transcript,
                res.tokens,
                ef_after=b"\0" * 32,  # the simulation keeps no residual chain: only the bytes are measured
            )
        )
        return decode_update(data).pseudo_gradient(), len(data)

    return transport
