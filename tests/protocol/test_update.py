"""The update wire format: round trip, canonical digest, and one typed error per kind of bad input."""

from __future__ import annotations

import functools
import struct

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import ProtocolError
from protocol.wire import update as wire
from protocol.wire import updatecost, updateerrors, updateheader
from protocol.wire.canonical import CanonicalJSONError, dumps_canonical, loads_canonical
from training.codecs import Encoded, encode
from training.config import CodecConfig, ModelConfig
from training.model import build_model, module_params, param_state

CODEC = CodecConfig(chunk=64, topk=4, bits=2)
MINER = "0x" + "ab" * 20


def _update(codec: CodecConfig = CODEC) -> wire.Update:
    cfg = ModelConfig(mode="moe", d_model=16, n_heads=2, n_layers=1, d_ff=16, seq_len=8, n_experts=2, top_k=1)
    params = module_params(param_state(build_model(cfg)), ["moe.0.expert.1", "head"])
    g = torch.Generator().manual_seed(0)
    tensors = {n: encode(torch.randn(p.shape, generator=g), codec) for n, p in params.items()}
    fields = updateheader.HeaderFields(
        round=3,
        miner=MINER,
        modules=["moe.0.expert.1", "head"],
        codec=codec,
        base_checkpoint=b"\x11" * 32,
        transcript_interval=2,
        transcript_steps=[0, 2],
        transcript_parts=[(b"\x01" * 32, b"\x05" * 32), (b"\x02" * 32, b"\x06" * 32)],
        tokens=512,
        ef_after=b"\x03" * 32,
        ef_source=(2, b"\x04" * 32),
    )
    return wire.make_update(fields, tensors)


@functools.cache
def _valid() -> bytes:
    return wire.encode_update(_update())


def _frame(header: bytes, payload: bytes) -> bytes:
    return wire.MAGIC + struct.pack("<I", len(header)) + header + struct.pack("<Q", len(payload)) + payload


def _parts(data: bytes) -> tuple[dict, bytes]:  # type: ignore[type-arg]
    (hlen,) = struct.unpack_from("<I", data, 8)
    return loads_canonical(data[12 : 12 + hlen]), data[12 + hlen + 8 :]


def test_round_trip_and_digest() -> None:
    up = _update()
    data = wire.encode_update(up)
    back = wire.decode_update(data)
    assert back.header == up.header
    assert wire.encode_update(back) == data
    assert wire.update_digest(data) == wire.update_digest(wire.encode_update(_update()))
    assert len(wire.update_digest(data)) == 32
    grads = back.pseudo_gradient()
    assert set(grads) == {n for n, _ in up.header.params}
    shapes = {n: s for n, s in up.header.params}
    wire.decode_update(data, expected_shapes=shapes)


def test_other_codecs_round_trip() -> None:
    for codec in (
        CodecConfig(chunk=64, topk=4, bits=32),
        CodecConfig(name="dense", chunk=64, bits=8),
        CodecConfig(chunk=64, topk=4, bits=2, index="elias-fano"),
    ):
        data = wire.encode_update(_update(codec))
        assert wire.decode_update(data).header.codec == codec


def test_index_coding_has_one_spelling() -> None:
    header, payload = _parts(wire.encode_update(_update()))
    assert header["c"][5] == "packed"  # every codec parameter in its place, one spelling
    for bad in ("huffman", 1, None):
        header["c"][5] = bad
        with pytest.raises(updateerrors.UnknownCodec):
            wire.decode_update(_frame(dumps_canonical(header), payload))
    data = wire.encode_update(_update(CodecConfig(chunk=64, topk=4, bits=2, index="elias-fano")))
    with pytest.raises(updateerrors.CodecMismatch):
        wire.decode_update(data, expected_codec=CodecConfig(chunk=64, topk=4, bits=2))


def test_truncated() -> None:
    data = wire.encode_update(_update())
    for cut in (4, 20, len(data) // 2, len(data) - 1):
        with pytest.raises(updateerrors.TruncatedUpdate):
            wire.decode_update(data[:cut])
    with pytest.raises(updateerrors.TruncatedUpdate):
        wire.decode_update(data + b"\0")


def test_oversize_checked_before_decoding() -> None:
    data = wire.encode_update(_update())
    with pytest.raises(updateerrors.UpdateTooLarge):
        wire.decode_update(data, updatecost.UpdateCaps(max_update_bytes=len(data) - 1))
    huge_header = wire.MAGIC + struct.pack("<I", 1 << 30) + b"{}"
    with pytest.raises(updateerrors.UpdateTooLarge):
        wire.decode_update(huge_header)
    header, payload = _parts(data)
    header["dims"][2] = (1 << 31) - 1  # d_model: the head's output is then over the per-parameter cap
    with pytest.raises(updateerrors.UpdateTooLarge):
        wire.decode_update(_frame(dumps_canonical(header), payload))


def test_bad_magic() -> None:
    data = wire.encode_update(_update())
    with pytest.raises(updateerrors.BadMagic):
        wire.decode_update(b"X" + data[1:])


def test_wrong_version() -> None:
    header, payload = _parts(wire.encode_update(_update()))
    for old in (1, 3):  # 1: before the error-feedback chain (F12); 3: parameter names in the header
        header["version"] = old
        with pytest.raises(updateerrors.UnsupportedVersion):
            wire.decode_update(_frame(dumps_canonical(header), payload))


def test_unknown_codec() -> None:
    header, payload = _parts(wire.encode_update(_update()))
    header["c"][0] = "zstd"
    with pytest.raises(updateerrors.UnknownCodec):
        wire.decode_update(_frame(dumps_canonical(header), payload))
    header["c"][0] = "topk"
    header["c"][3] = 3
    with pytest.raises(updateerrors.UnknownCodec):
        wire.decode_update(_frame(dumps_canonical(header), payload))


def test_malformed_header() -> None:
    header, payload = _parts(wire.encode_update(_update()))
    for mutate in (
        lambda h: h.pop("n"),
        lambda h: h.update(m="not an address!"),
        lambda h: h.update(b="zz"),
        lambda h: h.update(b="11" * 32),  # hex is not the v4 spelling of a digest
        lambda h: h.update(b=h["b"][:-1] + "R"),  # base64url with nonzero padding bits
        lambda h: h.update(r=-1),
        lambda h: h.update(t=[2, 0, h["t"][2]]),
        lambda h: h.update(t=[0, 2, h["t"][2]]),
        lambda h: h.update(t=[2, 2]),
        lambda h: h.update(t=[1, 10**9, h["t"][2]]),  # over MAX_TRANSCRIPT_STEPS
        lambda h: h.update(dims=[256, 0, 16, 16]),
        lambda h: h.update(dims=[256, 0, 16, 16, 2]),  # n_experts with no trunk listed
        lambda h: h.update(dims=[256, 0, 16, 16, -1]),
        lambda h: h.update(dims=[256, 0, 16, 0, 0]),  # d_ff is used (the expert)
        lambda h: h.update(dims=[0, 0, 16, 16, 0]),  # vocab is used (the head)
        lambda h: h.update(dims=[256, 3, 16, 16, 0]),  # seq_len given, no embed listed
        lambda h: h.update(dims=[256, 0, True, 16, 0]),
        lambda h: h.pop("ef"),
        lambda h: h.update(ef=[]),
        lambda h: h.update(ef=["00", None]),
        lambda h: h.update(ef=[h["ef"][0], {"round": 2, "update": h["ef"][0]}]),
        lambda h: h.update(ef=[h["ef"][0], [-1, h["ef"][0]]]),
        lambda h: h.update(ef=[h["ef"][0], [2, "XY" * 32]]),
        lambda h: h.update(ef=[h["ef"][0], [2]]),
    ):
        h = loads_canonical(dumps_canonical(header))
        mutate(h)
        with pytest.raises(updateerrors.MalformedHeader):
            wire.decode_update(_frame(dumps_canonical(h), payload))
    with pytest.raises(updateerrors.MalformedHeader):  # not canonical JSON (spaces)
        wire.decode_update(_frame(b'{"version": 1}', payload))


def test_error_feedback_chain_round_trips() -> None:
    up = _update()
    back = wire.decode_update(wire.encode_update(up)).header
    assert back.ef_after == "03" * 32 and back.ef_source == (2, "04" * 32)
    header, payload = _parts(wire.encode_update(up))
    header["ef"][1] = None
    assert wire.decode_update(_frame(dumps_canonical(header), payload)).header.ef_source is None


def test_header_mismatch() -> None:
    up = _update()
    header, payload = _parts(wire.encode_update(up))
    h = loads_canonical(dumps_canonical(header))
    h["mods"] = ["moe.0.expert.1", "head", "mystery.0"]
    with pytest.raises(updateerrors.HeaderMismatch):
        wire.decode_update(_frame(dumps_canonical(h), payload))
    h["mods"] = ["moe.0.expert.1", "head", "moe.0.expert.0"]  # more params than the payload holds
    with pytest.raises(updateerrors.HeaderMismatch):
        wire.decode_update(_frame(dumps_canonical(h), payload))
    for other in (payload + b"\0", payload[:-1], b""):  # the header implies the payload's size exactly
        with pytest.raises(updateerrors.HeaderMismatch):
            wire.decode_update(_frame(dumps_canonical(header), other))
    with pytest.raises(updateerrors.HeaderMismatch):
        wire.decode_update(wire.encode_update(up), expected_shapes={})


def _with_field(up: wire.Update, name: str, field: str, t: torch.Tensor) -> bytes:
    tensors = dict(up.tensors)
    tensors[name] = Encoded(up.tensors[name].shape, {**up.tensors[name].fields, field: t})
    flat: dict[str, list[bytes]] = {}
    for n, _ in up.header.params:
        for f, v in tensors[n].fields.items():
            flat.setdefault(f, []).append(v.contiguous().numpy().tobytes())
    payload = b"".join(b"".join(flat[f]) for f in wire.FIELD_ORDER if f in flat)
    return _frame(dumps_canonical(up.header.to_json()), payload)


def test_wrong_dtype_shape_and_nan() -> None:
    up = _update()
    name = up.header.params[0][0]
    scale = up.tensors[name].fields["scale"]
    # the payload declares no dtypes or shapes: a field of another dtype or size is another payload size
    with pytest.raises(updateerrors.HeaderMismatch):
        wire.decode_update(_with_field(up, name, "scale", scale.double()))
    with pytest.raises(updateerrors.HeaderMismatch):
        wire.decode_update(_with_field(up, name, "scale", torch.cat([scale, scale])))
    bad = scale.clone()
    bad[0] = float("nan")
    with pytest.raises(updateerrors.NonFiniteValues):
        wire.decode_update(_with_field(up, name, "scale", bad))
    bad[0] = float("inf")
    with pytest.raises(updateerrors.NonFiniteValues):
        wire.decode_update(_with_field(up, name, "scale", bad))
    with pytest.raises(updateerrors.BadTensorShape):
        wire.decode_update(wire.encode_update(up), expected_shapes={n: (1,) for n, _ in up.header.params})


def test_invalid_payload() -> None:
    up = _update()
    name = max(up.header.params, key=lambda p: p[1][0] * (p[1][1] if len(p[1]) > 1 else 1))[0]
    idx = up.tensors[name].fields["idx"]
    with pytest.raises(updateerrors.InvalidPayload):  # all-equal indices are not strictly increasing
        wire.decode_update(_with_field(up, name, "idx", torch.zeros_like(idx)))
    header, payload = _parts(wire.encode_update(up))
    with pytest.raises(updateerrors.InvalidPayload):  # every index byte set: past the end of its chunk
        wire.decode_update(
            _frame(dumps_canonical(header), b"\xff" * (len(payload) // 2) + payload[len(payload) // 2 :])
        )


def test_errors_are_protocol_errors() -> None:
    for cls in (
        updateerrors.UpdateTooLarge,
        updateerrors.TruncatedUpdate,
        updateerrors.BadMagic,
        updateerrors.MalformedHeader,
        updateerrors.UnsupportedVersion,
        updateerrors.UnknownCodec,
        updateerrors.HeaderMismatch,
        updateerrors.BadTensorDtype,
        updateerrors.BadTensorShape,
        updateerrors.NonFiniteValues,
        updateerrors.InvalidPayload,
        updateerrors.NonCanonicalUpdate,
        CanonicalJSONError,
    ):
        assert issubclass(cls, ProtocolError)


def test_canonical_json() -> None:
    assert dumps_canonical({"b": [1, "x"], "a": None}) == b'{"a":null,"b":[1,"x"]}'
    with pytest.raises(CanonicalJSONError):
        dumps_canonical({"x": 1.5})
    with pytest.raises(CanonicalJSONError):
        loads_canonical(b'{"x":1.5}')
    with pytest.raises(CanonicalJSONError):
        loads_canonical(b'{"b":1,"a":2}')


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_mutated_bytes_raise_only_update_errors(data: st.DataObject) -> None:
    raw = bytearray(_valid())
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    try:
        wire.decode_update(bytes(raw[:cut]) if data.draw(st.booleans()) else bytes(raw))
    except updateerrors.UpdateError:
        pass
