"""The simulation transport that sends each update through the real wire format.

``tessera simulate`` and ``tessera bench training`` both use it; it lives here, beside neither, so that
``benchmarks`` need not import ``tessera.commands`` (which imports ``benchmarks``: an import cycle).

Each update is decoded with the run's caps, as a validator decodes it (``validator.pipeline``): the header
must match the run's parameter shapes and the codec it was sent with, and the decode's memory and time
caps are lifted to what decoding the whole model costs (``UpdateCaps.covering``), so an honest update of
a model larger than the default caps assume is never refused. The size cap is lifted the same way, to the
bytes of a whole-model update under the codec used: the uncompressed (fp32) reference arm sends about 4
bytes per trained parameter, which a cap meant for compressed updates would refuse at tens of millions of
parameters.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from protocol.wire.update import MAGIC, decode_update, encode_update, make_update
from protocol.wire.updatecost import UpdateCaps, decode_cost
from protocol.wire.updateheader import HeaderFields
from training.codecs import encode
from training.config import CodecConfig, ModelConfig
from training.model import TesseraModel

FP32 = CodecConfig(name="dense", chunk=4096, bits=32)
"""The codec of the uncompressed arm: every value as fp32."""


def model_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Parameter name -> shape of the run's model (built on the meta device: nothing allocated)."""
    with torch.device("meta"):
        shell = TesseraModel(cfg, init=False)
    return {n: tuple(p.shape) for n, p in shell.named_parameters()}


def run_caps(
    shapes: dict[str, tuple[int, ...]], codec: CodecConfig, base: UpdateCaps | None = None
) -> UpdateCaps:
    """``base`` (default :class:`UpdateCaps`) with every cap an update of the run's model under ``codec``
    could reach lifted to it: the whole model's decode cost (``covering``, what ``decode_update`` applies
    given the run's shapes and codec) and its bytes (framing, the largest header, the payload)."""
    base = base or UpdateCaps()
    model = tuple(sorted(shapes.items()))
    cost = decode_cost(model, codec)
    whole = len(MAGIC) + 4 + base.max_header_bytes + 8 + cost.payload_bytes
    return dataclasses.replace(base.covering(cost), max_update_bytes=max(base.max_update_bytes, whole))


def wire_transport(codec: CodecConfig, model: ModelConfig, base: UpdateCaps | None = None) -> Any:
    """A simulation transport that sends each update through ``protocol.wire.update``, decodes it with the
    run's caps (:func:`run_caps` over ``base``) and counts its bytes."""
    shapes = model_shapes(model)
    caps = {c: run_caps(shapes, c, base) for c in (codec, FP32)}

    def transport(round, assignment, encs, delta, res, base_digest):  # type: ignore[no-untyped-def]
        used = codec
        if encs is None:
            encs = {n: encode(t, FP32) for n, t in delta.items()}
            used = FP32
        data = encode_update(
            make_update(
                HeaderFields(
                    round=round,
                    miner=assignment.miner,
                    modules=list(assignment.module_ids),
                    codec=used,
                    base_checkpoint=base_digest,
                    transcript_interval=res.transcript.interval,
                    transcript_steps=res.transcript.steps,
                    transcript_parts=res.transcript.parts,
                    tokens=res.tokens,
                    ef_after=b"\0" * 32,  # the simulation keeps no residual chain: only the bytes count
                ),
                encs,
            )
        )
        return decode_update(data, caps[used], shapes, used).pseudo_gradient(), len(data)

    return transport
