"""Issue 11: the update decoder is bounded before any work, and every decode path raises typed errors only.

The reproducers: a 799-byte "topk" update whose one chunk is as large as its parameter decoded to
full-size fp32 (+2 GiB, 5 s) before any header check; ~840 bytes -> +3 GiB; a 95 KB DCT update +781 MiB;
``verify_update`` spent 2 GiB and 3.3 s before refusing at "header"; four safetensors dtypes raised
``KeyError`` in ``safetensors.torch`` (tensor blobs; since wire version 4 an update's payload is raw fields). Each is refused now from the header alone, in milliseconds and
without allocating (measured with the process's peak RSS, torch's allocations included).
"""

from __future__ import annotations

import hashlib
import json
import struct
import time
from typing import Any

import pytest
import torch
from safetensors.torch import save as st_save

from protocol.errors import ProtocolError
from protocol.wire import update as wire
from protocol.wire import updatecost, updateerrors, updateheader
from protocol.wire.commitments import update_commitment
from protocol.wire.tensorblob import TensorBlobError, decode_tensors
from tests.support.bombs import ISSUE_BOMBS, PeakRSS, crafted_update, head
from training.codecs import encode
from training.config import CodecConfig

#: Refusing from the header may cost this much (the bombs used to cost gigabytes and seconds).
REFUSE_SECONDS = 0.5
REFUSE_BYTES = 64 * 1024 * 1024
NEW_DTYPES = [("F4", [2], 1), ("F6_E2M3", [4], 3), ("F6_E3M2", [4], 3), ("F8_E8M0", [1], 1)]


def _refused_cheaply(fn: Any, kind: type[BaseException]) -> BaseException:
    probe = PeakRSS()
    t = time.perf_counter()
    peak, err = probe.measure(fn)
    took = time.perf_counter() - t
    assert isinstance(err, kind), err
    assert took < REFUSE_SECONDS, took
    assert peak < REFUSE_BYTES, peak
    return err


@pytest.mark.parametrize(("label", "params", "codec"), ISSUE_BOMBS, ids=[b[0] for b in ISSUE_BOMBS])
def test_issue_bombs_are_refused_from_the_header(
    label: str, params: dict[str, tuple[int, ...]], codec: CodecConfig
) -> None:
    data = crafted_update(params, codec)
    if label == "topk-chunk-as-large-as-param":
        assert len(data) < 1000  # the issue's 799 bytes
    header_len = struct.unpack_from("<I", data, 8)[0]
    header = updateheader.parse_header(json.loads(data[12 : 12 + header_len]), updatecost.UpdateCaps())
    cost = updatecost.decode_cost(header.params, header.codec)
    assert cost.decoded_bytes > 0 and cost.peak_bytes >= cost.decoded_bytes
    _refused_cheaply(lambda: wire.decode_update(data), updateerrors.DecodeTooCostly)
    # with the run's model and codec (what the pipeline passes): refused before the cost is even weighed
    model = {"head.out.weight": (256, 64), "head.ln.weight": (64,), "head.ln.bias": (64,)}
    err = _refused_cheaply(
        lambda: wire.decode_update(data, expected_shapes=model, expected_codec=CodecConfig()),
        updateerrors.UpdateError,
    )
    assert isinstance(
        err, updateerrors.CodecMismatch | updateerrors.BadTensorShape | updateerrors.HeaderMismatch
    )


def test_caps_bound_what_a_header_may_declare() -> None:
    codec = CodecConfig(name="dense", bits=2)
    small = crafted_update(head(1 << 16), codec)
    wire.decode_update(small)
    with pytest.raises(updateerrors.DecodeTooCostly, match="decodes to"):
        wire.decode_update(small, updatecost.UpdateCaps(max_decoded_bytes=1 << 16))
    with pytest.raises(updateerrors.DecodeTooCostly, match="needs"):
        wire.decode_update(small, updatecost.UpdateCaps(max_decode_memory=1 << 18))
    with pytest.raises(updateerrors.DecodeTooCostly, match="take"):
        wire.decode_update(small, updatecost.UpdateCaps(max_decode_work=1000))
    # a DCT codec keeping every coefficient: 128x its decoded size in float64 basis rows
    dct = crafted_update(head(1 << 16), CodecConfig(chunk=4096, topk=4096, transform="dct"))
    with pytest.raises(updateerrors.DecodeTooCostly, match="more than 16x"):
        wire.decode_update(dct)


def test_the_runs_own_model_and_codec_pass_whatever_the_caps() -> None:
    codec = CodecConfig(chunk=64, topk=4, bits=2)
    g = torch.Generator().manual_seed(0)
    shapes = {"head.out.weight": (256, 64), "head.ln.weight": (64,), "head.ln.bias": (64,)}
    tensors = {n: encode(torch.randn(s, generator=g), codec) for n, s in shapes.items()}
    fields = updateheader.HeaderFields(
        round=1, miner="0x" + "ab" * 20, modules=["head"], codec=codec, base_checkpoint=b"\x11" * 32,
        transcript_interval=2, transcript_steps=[0, 2], transcript_parts=[(b"\x01" * 32, b"\x02" * 32)] * 2,
        tokens=5, ef_after=b"\x03" * 32,
    )  # fmt: skip
    data = wire.encode_update(wire.make_update(fields, tensors))
    tiny = updatecost.UpdateCaps(max_decoded_bytes=1, max_decode_memory=1, max_decode_work=1)
    with pytest.raises(updateerrors.DecodeTooCostly):
        wire.decode_update(data, tiny)
    up = wire.decode_update(data, tiny, expected_shapes=shapes, expected_codec=codec)
    assert set(up.pseudo_gradient()) == set(shapes)
    with pytest.raises(updateerrors.CodecMismatch):
        wire.decode_update(data, expected_shapes=shapes, expected_codec=CodecConfig(chunk=64, topk=8, bits=2))
    with pytest.raises(updateerrors.HeaderMismatch):
        wire.decode_update(data, expected_shapes={"head.out.weight": (256, 64)}, expected_codec=codec)


def test_a_module_of_tiny_parameters_under_a_dct_run_codec_is_not_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each 64-value parameter costs a whole 64x64 tile, far above 16x its decoded size; with the run's
    model and codec the update still passes (the ratio cap is lifted, the model bounds the rest)."""
    codec = CodecConfig(chunk=4096, topk=32, transform="dct")
    tiny = head(1, 64)  # three parameters of 64 values each
    model = {**tiny, "embed.tok.weight": (4096, 64)}
    data = crafted_update(tiny, codec)
    # the fixed allowance would hide the ratio at this size
    monkeypatch.setattr(updatecost, "MEMORY_SLACK", 0)
    caps = updatecost.UpdateCaps(max_decoded_bytes=1 << 20, max_decode_memory=1 << 20, max_memory_ratio=16)
    with pytest.raises(updateerrors.DecodeTooCostly, match="more than 16x"):
        wire.decode_update(data, caps)
    up = wire.decode_update(data, caps, expected_shapes=model, expected_codec=codec)
    assert set(up.pseudo_gradient()) == set(tiny)


def _safetensors(dtype: str, shape: list[int], nbytes: int, name: str = "val") -> bytes:
    head = json.dumps({name: {"dtype": dtype, "shape": shape, "data_offsets": [0, nbytes]}}).encode()
    return struct.pack("<Q", len(head)) + head + b"\0" * nbytes


@pytest.mark.parametrize(("dtype", "shape", "nbytes"), NEW_DTYPES)
def test_dtypes_safetensors_torch_cannot_map_are_refused_typed(
    dtype: str, shape: list[int], nbytes: int
) -> None:
    with pytest.raises(TensorBlobError, match="not allowed"):
        decode_tensors(_safetensors(dtype, shape, nbytes, "param/w"))
    # an update payload (wire version 4) is raw fields whose dtypes the codec fixes: nothing to declare
    data = crafted_update(head(64), CodecConfig(name="dense", bits=32))
    header_len = struct.unpack_from("<I", data, 8)[0]
    header = data[12 : 12 + header_len]
    payload = _safetensors(dtype, shape, nbytes)
    framed = wire.MAGIC + struct.pack("<I", len(header)) + header + struct.pack("<Q", len(payload)) + payload
    with pytest.raises(updateerrors.HeaderMismatch):
        wire.decode_update(framed)


def test_allowed_tensor_blob_dtypes_still_load() -> None:
    blob = st_save({"param/a": torch.zeros(3), "step": torch.tensor([5], dtype=torch.int64)})
    assert set(decode_tensors(blob)) == {"param/a", "step"}


def test_verify_update_refuses_the_bomb_at_format_before_decoding() -> None:
    """``verify_update`` used to decode the 799-byte update (2 GiB, 3.3 s) before refusing it at "header"."""
    from tessera.attack.harness import tiny_spec
    from validator.context import Incoming, RoundContext
    from validator.pipeline import VerificationPipeline
    from validator.policy import VerifyPolicy

    spec = tiny_spec()
    theta = spec.genesis_params()
    miner, contract = "0x" + "ab" * 20, "0x" + "c0" * 20
    data = crafted_update(head(1 << 28), CodecConfig(chunk=1 << 28, topk=1, bits=32), round=1)
    ctx = RoundContext(
        spec=spec, dataset=None, round=1, chain_id=31337, contract=contract, validator="0x" + "01" * 20,  # type: ignore[arg-type]
        checkpoint=theta, checkpoint_digest=b"\x11" * 32, assign_seed=b"\x00" * 32,
        seed=hashlib.sha256(b"s").digest(), registry=[miner],
    )  # fmt: skip
    commitment = update_commitment(31337, contract, 1, miner, wire.update_digest(data))

    def run() -> Any:
        return VerificationPipeline(VerifyPolicy()).verify(
            Incoming(miner, commitment, lambda: data, lambda d: {}), ctx
        )

    probe = PeakRSS()
    t = time.perf_counter()
    peak, err = probe.measure(run)
    assert err is None and time.perf_counter() - t < REFUSE_SECONDS and peak < REFUSE_BYTES
    v = run()
    assert v.stage == "format" and v.provable and not v.accepted, (v.stage, v.reason)
    assert "BadTensorShape" in v.reason or "CodecMismatch" in v.reason, v.reason


def test_typed_errors_are_protocol_errors() -> None:
    for cls in (updateerrors.DecodeTooCostly, updateerrors.CodecMismatch):
        assert issubclass(cls, updateerrors.UpdateError) and issubclass(cls, ProtocolError)
