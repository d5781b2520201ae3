"""Codecs: stated error bounds (hypothesis), exact layouts, bit packing and error feedback."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from training.bitpack import pack_bits, unpack_bits
from training.codecbounds import chunk_errors, error_bound
from training.codecs import Encoded, decode, encode, encoded_bits, field_specs
from training.config import CodecConfig
from training.errors import CodecError, ConfigError
from training.feedback import ErrorFeedback, same_encoding

CODECS = [
    CodecConfig(name="topk", chunk=64, topk=4, bits=2),
    CodecConfig(name="topk", chunk=64, topk=8, bits=4),
    CodecConfig(name="topk", chunk=100, topk=10, bits=8),
    CodecConfig(name="topk", chunk=64, topk=5, bits=32),
    CodecConfig(name="topk", chunk=4096, topk=32, bits=2, transform="dct"),
    CodecConfig(name="topk", chunk=4096, topk=64, bits=8, transform="dct"),
    CodecConfig(name="dense", chunk=64, bits=2),
    CodecConfig(name="dense", chunk=50, bits=8),
]


@st.composite
def tensors(draw: st.DrawFn) -> torch.Tensor:
    n = draw(st.integers(1, 9000))
    seed = draw(st.integers(0, 2**31 - 1))
    scale = draw(st.sampled_from([1e-6, 1e-2, 1.0, 1e3]))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * scale
    if draw(st.booleans()):
        x = x * (torch.rand(n, generator=g) < 0.3)  # sparse, with zeros and ties
    return x


@pytest.mark.parametrize("cfg", CODECS, ids=lambda c: f"{c.name}-{c.chunk}-{c.topk}-{c.bits}-{c.transform}")
@settings(max_examples=25, deadline=None)
@given(x=tensors())
def test_error_bound_holds(cfg: CodecConfig, x: torch.Tensor) -> None:
    enc = encode(x, cfg)
    y = decode(enc, cfg)
    assert y.shape == x.shape
    err, bound = chunk_errors(x, y, cfg), error_bound(x, cfg)
    slack = 1e-6 * bound + 1e-30 + (1e-6 * x.abs().max() if cfg.bits != 32 else 0)
    assert bool((err <= bound + slack).all()), (err - bound).max()
    for name, (dtype, shape) in field_specs(tuple(x.shape), cfg).items():
        assert enc.fields[name].dtype == dtype and tuple(enc.fields[name].shape) == shape
    assert 8 * enc.nbytes == encoded_bits(tuple(x.shape), cfg)


@settings(max_examples=50, deadline=None)
@given(width=st.integers(1, 16), values=st.lists(st.integers(0, 2**16 - 1), max_size=200))
def test_pack_round_trip(width: int, values: list[int]) -> None:
    v = torch.tensor([x % (1 << width) for x in values], dtype=torch.int64)
    packed = pack_bits(v, width)
    assert packed.numel() == math.ceil(len(values) * width / 8)
    assert torch.equal(unpack_bits(packed, width, len(values)), v)


def test_topk_keeps_largest_exactly_at_32_bits() -> None:
    x = torch.tensor([0.1, -5.0, 0.2, 3.0, 0.0, -0.3])
    cfg = CodecConfig(chunk=6, topk=2, bits=32)
    assert torch.equal(decode(encode(x, cfg), cfg), torch.tensor([0.0, -5.0, 0.0, 3.0, 0.0, 0.0]))


def test_tail_chunk_keeps_proportional_k() -> None:
    cfg = CodecConfig(chunk=4096, topk=32, bits=2)
    assert field_specs((64,), cfg)["idx"][1] == (math.ceil(1 * 12 / 8),)  # ceil(32*64/4096) = 1 value
    assert field_specs((4096 + 128,), cfg)["val"][1] == (math.ceil(33 * 2 / 8),)


def test_bits_per_parameter() -> None:
    cfg = CodecConfig(chunk=4096, topk=32, bits=2)
    bits = encoded_bits((4096 * 16,), cfg) / (4096 * 16)
    assert bits == pytest.approx((32 * (12 + 2) + 32) / 4096)


def test_error_feedback_loses_nothing() -> None:
    cfg = CodecConfig(chunk=64, topk=4, bits=32, ef_beta=1.0)
    ef = ErrorFeedback(cfg)
    g = torch.Generator().manual_seed(0)
    deltas = [torch.randn(200, generator=g) for _ in range(5)]
    total_sent = torch.zeros(200)
    for d in deltas:
        _, sent = ef.compress({"w": d})
        total_sent += sent["w"]
    assert torch.allclose(total_sent + ef.buffers["w"], sum(deltas), atol=1e-5)
    restored = ErrorFeedback(cfg)
    restored.load_state_dict(ef.state_dict())
    assert torch.equal(restored.buffers["w"], ef.buffers["w"])


def test_decode_rejects_malformed() -> None:
    cfg = CodecConfig(chunk=64, topk=4, bits=2)
    enc = encode(torch.randn(128), cfg)
    with pytest.raises(CodecError):
        decode(Encoded(enc.shape, {k: v for k, v in enc.fields.items() if k != "scale"}), cfg)
    with pytest.raises(CodecError):
        decode(Encoded(enc.shape, {**enc.fields, "scale": torch.tensor([float("nan"), 1.0])}), cfg)
    dup = pack_bits(torch.tensor([3, 3, 5, 7] * 2), 6)
    with pytest.raises(CodecError):
        decode(Encoded(enc.shape, {**enc.fields, "idx": dup}), cfg)
    with pytest.raises(CodecError):
        encode(torch.tensor([float("inf")]), cfg)


def test_config_validation() -> None:
    for bad in (
        dict(bits=3),
        dict(topk=0),
        dict(name="zstd"),
        dict(transform="dct", chunk=64, topk=4),
        dict(name="dense", transform="dct"),
    ):
        with pytest.raises(ConfigError):
            CodecConfig(**bad)  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(width=st.sampled_from([1, 2, 4, 8, 12]), values=st.lists(st.integers(0, 2**12 - 1), max_size=300))
def test_fast_pack_paths_match_the_bit_stream(width: int, values: list[int]) -> None:
    import numpy as np

    v = torch.tensor([x % (1 << width) for x in values], dtype=torch.int64)
    bits = ((v.numpy()[:, None] >> np.arange(width)) & 1).astype(np.uint8).reshape(-1)
    reference = np.packbits(bits, bitorder="little")
    assert pack_bits(v, width).numpy().tobytes() == reference.tobytes()
    assert torch.equal(unpack_bits(torch.from_numpy(reference.copy()), width, len(values)), v)


def test_error_feedback_takes_a_known_decode_only_for_the_same_encoding() -> None:
    """``ErrorFeedback.compress(known=...)``: an equal encoding reuses the known decoded tensor, any other
    encoding (a different value, a different field) is decoded, so a validator's shortcut cannot hide a
    miner's altered update."""
    cfg = CodecConfig.recipe()
    delta = {"w": torch.randn(64, 64, generator=torch.Generator().manual_seed(0))}
    plain_encs, plain_sent = ErrorFeedback(cfg).compress(delta)
    marker = torch.full((64, 64), 7.0)
    encs, sent = ErrorFeedback(cfg).compress(delta, known={"w": (plain_encs["w"], marker)})
    assert sent["w"] is marker and same_encoding(encs["w"], plain_encs["w"])
    other = encode(delta["w"] * 3, cfg)
    assert not same_encoding(other, plain_encs["w"])
    _, sent = ErrorFeedback(cfg).compress(delta, known={"w": (other, marker)})
    assert torch.equal(sent["w"], plain_sent["w"]), "a different encoding is decoded, not taken"
