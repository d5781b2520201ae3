"""Issue 14: a version-4 header derives the parameters from modules and dims; the derivation is the model's.

``protocol.wire.updateheader`` spells out the parameters of each module kind; these tests pin it to
``training.model`` for every mode, so a change to the model that the wire format does not follow fails
here rather than as refused honest updates."""

from __future__ import annotations

import pytest

from protocol.wire import update as wire
from protocol.wire import updateerrors
from protocol.wire.updateheader import HeaderFields, derive_params, infer_dims, schedule
from training.config import ModelConfig
from training.model import build_model, module_ids, module_params, param_state
from training.modellayout import DIMS

CONFIGS = [
    ModelConfig(mode="moe"),
    ModelConfig(mode="dipaco", n_layers=3, n_choices=3, d_ff=96),
    ModelConfig(mode="dense", vocab_size=300, seq_len=16, d_model=32, n_heads=2, n_layers=3, d_ff=48),
    ModelConfig(
        mode="moe", vocab_size=97, seq_len=12, d_model=8, n_heads=2, n_layers=2, d_ff=24, n_experts=3
    ),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=[f"{c.mode}-{c.d_model}" for c in CONFIGS])
def test_derived_parameters_are_the_models(cfg: ModelConfig) -> None:
    state = param_state(build_model(cfg))
    ids = module_ids(cfg)
    for modules in ([m] for m in ids):
        want = tuple(sorted((n, tuple(t.shape)) for n, t in module_params(state, modules).items()))
        dims = infer_dims(modules, want)
        assert derive_params(modules, dims, 4096, 1 << 62) == want, modules
    want = tuple(sorted((n, tuple(t.shape)) for n, t in state.items()))
    dims = infer_dims(ids, want)
    assert derive_params(ids, dims, 4096, 1 << 62) == want
    expect = {"vocab": cfg.vocab_size, "seq_len": cfg.seq_len, "d_model": cfg.d_model, "d_ff": cfg.d_ff}
    expect["n_experts"] = cfg.n_experts if cfg.mode == "moe" else 0
    assert dict(zip(DIMS, dims, strict=True)) == expect


def test_parameters_that_are_not_whole_modules_cannot_be_encoded() -> None:
    state = param_state(build_model(ModelConfig()))
    head = sorted((n, tuple(t.shape)) for n, t in module_params(state, ["head"]).items())
    with pytest.raises(ValueError):
        infer_dims(["head"], head[:-1])
    with pytest.raises(ValueError):
        infer_dims(["head"], [*head, ("embed.tok.weight", (256, 64))])
    with pytest.raises(ValueError):
        infer_dims(["head"], [(n, (s[0] + 1, *s[1:])) for n, s in head])


def test_recorded_steps_are_the_inner_loops() -> None:
    assert schedule(1, 3, 10) == (0, 1, 2, 3)
    assert schedule(4, 10, 10) == (0, 4, 8, 10)
    assert schedule(5, 10, 10) == (0, 5, 10)
    with pytest.raises(updateerrors.MalformedHeader):
        schedule(1, 10, 10)


def test_the_header_of_a_devnet_sized_update_stays_small() -> None:
    """Issue 14: <= 0.006 wire bits per trained parameter per step at H = 30 needs a header of about 500
    bytes or less on these models; wire version 3's was 1.7 kB."""
    import torch

    from training.codecs import encode
    from training.config import CodecConfig
    from training.inner import Transcript

    cfg = ModelConfig(mode="moe")
    modules = [
        "embed",
        "trunk.0",
        "trunk.1",
        "moe.0.expert.0",
        "moe.0.expert.1",
        "moe.1.expert.2",
        "moe.1.expert.3",
        "head",
    ]
    codec = CodecConfig(chunk=4096, topk=54, bits=2, transform="shaped", index="elias-fano")
    state = module_params(param_state(build_model(cfg)), modules)
    tensors = {n: encode(torch.randn(t.shape), codec) for n, t in state.items()}
    steps = list(range(0, 31, 10))
    tr = Transcript(interval=10, steps=steps, parts=[(b"\x01" * 32, b"\x02" * 32)] * len(steps))
    fields = HeaderFields(
        round=99, miner="0x" + "ab" * 20, modules=modules, codec=codec, base_checkpoint=b"\x11" * 32,
        transcript_interval=tr.interval, transcript_steps=tr.steps, transcript_parts=tr.parts, tokens=30720,
        ef_after=b"\x03" * 32, ef_source=(98, b"\x04" * 32),
    )  # fmt: skip
    up = wire.make_update(fields, tensors)
    data = wire.encode_update(up)
    header_len = int.from_bytes(data[8:12], "little")
    assert header_len <= 500, header_len
    fields = sum(t.numel() * t.element_size() for e in tensors.values() for t in e.fields.values())
    assert len(data) == 8 + 4 + header_len + 8 + fields  # nothing else travels
