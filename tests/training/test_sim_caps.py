"""The simulation's wire decodes with the run's caps, as a validator does (issue 29).

The size series' 38M point failed on a GPU: first ``DecodeTooCostly`` (the simulation decoded with the
default caps, not the run's model), then ``UpdateTooLarge`` in the uncompressed DiLoCo arm (a size cap
meant for compressed updates). The big test below runs both arms at a model over both default caps
(19.2M parameters, all trained: the recipe's decode is estimated at 1.32 s > 1.00 s, the fp32 update is
76.6 MB > 64 MiB) through the bench's own entry point; one inner step keeps it a CPU test.
"""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks.training_runs import CHOSEN, REFERENCE, chosen_variant, run_config, run_variant
from protocol.wire.update import decode_update, encode_update, make_update
from protocol.wire.updatecost import UpdateCaps, decode_cost
from protocol.wire.updateerrors import DecodeTooCostly, UpdateTooLarge
from protocol.wire.updateheader import HeaderFields
from tessera.simwire import FP32, model_shapes, run_caps, wire_transport
from tests.training.training_fixtures import tiny_inner, tiny_model
from training.assignment import assign
from training.codecs import encode
from training.config import CodecConfig
from training.corpus import load_bundled_corpus
from training.inner import train_inner
from training.model import build_model, module_params, param_state

BIG = {"seq_len": 16, "d_model": 512, "n_heads": 8, "n_layers": 6, "d_ff": 2048}
"""A dense model over both default caps: 19.2M parameters."""


def test_the_big_model_is_over_both_default_caps() -> None:
    run = run_config("dense", {"model": BIG, "batch": 1}, 1, 1, CHOSEN["codec"], CHOSEN["outer"])
    model = tuple(sorted(model_shapes(run.model).items()))
    assert decode_cost(model, run.codec).work > UpdateCaps().max_decode_work
    assert decode_cost(model, FP32).payload_bytes > UpdateCaps().max_update_bytes


@pytest.mark.parametrize("arm", ["recipe", "diloco"])
def test_both_arms_train_a_model_over_the_default_caps(arm: str) -> None:
    variant = chosen_variant() if arm == "recipe" else REFERENCE
    scale = {"model": BIG, "batch": 1}
    res = run_variant("miners", "dense", scale, 1, 1, 0, variant, load_bundled_corpus(), None, windows=2)
    assert res["params"] > 19e6 and math.isfinite(res["final_loss"])
    per_param_step = res["wire_bits_per_param_step"]
    assert (per_param_step > 32) if arm == "diloco" else (0 < per_param_step < 1)


def _update(codec: CodecConfig) -> tuple[bytes, dict[str, tuple[int, ...]]]:
    """The bytes of a tiny miner's update under ``codec``, and the run's shapes."""
    cfg, inner = tiny_model("dense"), tiny_inner(steps=1)
    theta = param_state(build_model(cfg))
    a = assign(b"\0" * 32, ["0x" + "1" * 40], cfg)["0x" + "1" * 40]
    batches = torch.randint(1, 256, (1, inner.batch_size, cfg.seq_len + 1))
    res = train_inner(cfg, inner, theta, a, batches, 0)
    delta = {n: res.params[n] - t for n, t in module_params(theta, a.module_ids).items()}
    encs = {n: encode(t, codec) for n, t in delta.items()}
    tr = res.transcript
    fields = HeaderFields(
        round=0,
        miner=a.miner,
        modules=list(a.module_ids),
        codec=codec,
        base_checkpoint=b"\0" * 32,
        transcript_interval=tr.interval,
        transcript_steps=tr.steps,
        transcript_parts=tr.parts,
        tokens=res.tokens,
        ef_after=b"\0" * 32,
    )
    up = make_update(fields, encs)
    return encode_update(up), model_shapes(cfg)


@pytest.mark.parametrize("codec", [CodecConfig(chunk=256, topk=8, bits=2), FP32], ids=["topk", "fp32"])
def test_lowered_caps_refuse_the_bare_decode_and_the_runs_caps_lift_them(codec: CodecConfig) -> None:
    data, shapes = _update(codec)
    low = UpdateCaps(max_update_bytes=len(data) - 1, max_decode_work=1)
    with pytest.raises(UpdateTooLarge):
        decode_update(data, low)
    with pytest.raises(DecodeTooCostly):
        decode_update(data, UpdateCaps(max_decode_work=1))
    caps = run_caps(shapes, codec, low)
    assert caps.max_update_bytes >= len(data) and caps.max_decode_work > 1
    assert decode_update(data, caps, shapes, codec).header.codec == codec


def test_the_transport_decodes_with_the_runs_caps() -> None:
    cfg = tiny_model("dense")
    low = UpdateCaps(max_update_bytes=64, max_decode_work=1)
    transport = wire_transport(CodecConfig(chunk=256, topk=8, bits=2), cfg, low)
    theta = param_state(build_model(cfg))
    a = assign(b"\0" * 32, ["0x" + "1" * 40], cfg)["0x" + "1" * 40]
    inner = tiny_inner(steps=1)
    batches = torch.randint(1, 256, (1, inner.batch_size, cfg.seq_len + 1))
    res = train_inner(cfg, inner, theta, a, batches, 0)
    delta = {n: res.params[n] - t for n, t in module_params(theta, a.module_ids).items()}
    got, nbytes = transport(0, a, None, delta, res, b"\0" * 32)  # the fp32 arm
    assert nbytes > 64 and all(bool((got[n] == delta[n]).all()) for n in delta)
