"""A codec is one declaration (``training.codecregistry``, issue 25): the config, the encoder and decoder,
the error bound, the decode cost and the update header all read it, so a codec declared there (and only
there) is sent, checked and priced like the built-in ones."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch
from torch import Tensor

from protocol.wire.update import Update, decode_update, encode_update, make_update
from protocol.wire.updatecost import decode_cost
from protocol.wire.updateerrors import UnknownCodec
from protocol.wire.updateheader import HeaderFields
from training.codecbounds import chunk_errors, error_bound
from training.codecregistry import CODECS, DENSE, TOPK, Codec, codec_named
from training.codecs import decode, encode, encoded_bits, field_specs, layout, resolve
from training.codectransforms import TRANSFORMS, transform_named
from training.config import CodecConfig, ModelConfig
from training.errors import CodecError, ConfigError
from training.indexcodings import INDEX_CODINGS, PACKED, Group, IndexCoding, index_coding_named
from training.model import build_model, module_params, param_state


def _stride_keep(width: int, chunk: int, topk: int) -> int:
    return (width + 1) // 2


def _stride_select(chunks: Tensor, k: int) -> tuple[Tensor | None, Tensor]:
    idx = torch.arange(0, 2 * k, 2).clamp_max(chunks.shape[1] - 1).expand(chunks.shape[0], k).contiguous()
    return idx, chunks.gather(1, idx)


def _stride_bound(magnitudes: Tensor, k: int, q: Tensor) -> Tensor:
    dropped = magnitudes[:, 1::2]
    worst = dropped.amax(dim=1) if dropped.shape[1] else torch.zeros_like(q)
    return worst.maximum(q)


STRIDE = Codec(
    name="stride2",
    indexed=True,
    keep=_stride_keep,
    select=_stride_select,
    bound=_stride_bound,
    transforms=("none",),
    indexes=("packed", "elias-fano"),
)
"""A codec that no node would use (every other value): declared here alone, it must work everywhere."""


@pytest.fixture
def stride_codec(monkeypatch: pytest.MonkeyPatch) -> Codec:
    monkeypatch.setitem(CODECS, STRIDE.name, STRIDE)
    return STRIDE


def test_the_registry_is_what_the_config_and_the_header_accept() -> None:
    assert set(CODECS) == {"dense", "topk"} and CODECS["dense"] is DENSE and CODECS["topk"] is TOPK
    assert codec_named("topk") is TOPK
    with pytest.raises(CodecError, match="unknown codec 'topq' \\(known: dense, topk\\)"):
        codec_named("topq")
    with pytest.raises(ConfigError, match="unknown codec \\['topk'\\]"):
        CodecConfig(name=["topk"])  # type: ignore[arg-type]  # a run file's list, not a name
    with pytest.raises(ConfigError, match="unknown codec 'stride2'"):
        CodecConfig(name="stride2")  # not declared: refused
    with pytest.raises(ConfigError, match="the shaped transform needs the topk codec"):
        CodecConfig(name="dense", transform="shaped")
    with pytest.raises(ConfigError, match="the elias-fano index coding needs the topk codec"):
        CodecConfig(name="dense", index="elias-fano")


def test_the_declarations_keep_and_select_what_the_layout_says() -> None:
    cfg = CodecConfig(name="topk", chunk=64, topk=5)
    assert layout(64 * 3 + 10, cfg).k_full == 5 and layout(64 * 3 + 10, cfg).k_tail == 1  # ceil(5 * 10 / 64)
    dense = CodecConfig(name="dense", chunk=64)
    assert (layout(130, dense).k_full, layout(130, dense).k_tail) == (64, 2)
    chunks = torch.tensor([[0.1, -3.0, 0.2, 2.0], [5.0, 0.0, -1.0, 0.5]])
    idx, values = TOPK.select(chunks, 2)
    assert (
        idx is not None and idx.tolist() == [[1, 3], [0, 2]] and values.tolist() == [[-3.0, 2.0], [5.0, -1.0]]
    )
    assert DENSE.select(chunks, 4) == (None, chunks)
    q = torch.tensor([0.01, 0.01])
    assert TOPK.bound(chunks.abs(), 2, q).tolist() == [2.0, 1.0]  # the smallest kept magnitude
    assert DENSE.bound(chunks.abs(), 4, q) is q  # nothing dropped: the quantisation step


@pytest.mark.parametrize("bits", [2, 8, 32])
@pytest.mark.parametrize("index", ["packed", "elias-fano"])
def test_a_codec_declared_once_encodes_decodes_and_holds_its_bound(
    stride_codec: Codec, bits: int, index: str
) -> None:
    cfg = CodecConfig(name="stride2", chunk=16, topk=1, bits=bits, index=index)
    x = torch.randn(16 * 3 + 5, generator=torch.Generator().manual_seed(1))
    enc = encode(x, cfg)
    assert "idx" in enc.fields and 8 * enc.nbytes == encoded_bits(tuple(x.shape), cfg)
    assert {n: (t.dtype, tuple(t.shape)) for n, t in enc.fields.items()} == field_specs(tuple(x.shape), cfg)
    y = decode(enc, cfg)
    assert torch.equal(y[0::2][:24], x[0::2][:24]) if bits == 32 else y.shape == x.shape
    assert bool((y[1:48:2] == 0).all())  # the values it drops are zero after decoding
    err, bound = chunk_errors(x, y, cfg), error_bound(x, cfg)
    assert bool((err <= bound * (1 + 1e-6) + 1e-6).all())


def _update(cfg: CodecConfig) -> Update:
    """An update of the ``head`` module of a small model, its tensors encoded with ``cfg``."""
    model = ModelConfig(
        mode="moe", d_model=16, n_heads=2, n_layers=1, d_ff=16, seq_len=8, n_experts=2, top_k=1
    )
    params = module_params(param_state(build_model(model)), ["head"])
    g = torch.Generator().manual_seed(2)
    tensors = {n: encode(torch.randn(p.shape, generator=g), cfg) for n, p in params.items()}
    parts = [(b"\x01" * 32, b"\x05" * 32), (b"\x02" * 32, b"\x06" * 32)]
    fields = HeaderFields(
        round=3, miner="0x" + "ab" * 20, modules=["head"], codec=cfg, base_checkpoint=b"\x11" * 32,
        transcript_interval=2, transcript_steps=[0, 2], transcript_parts=parts, tokens=512, ef_after=b"\x03" * 32,
    )  # fmt: skip
    return make_update(fields, tensors)


def test_a_codec_declared_once_travels_in_an_update_and_is_priced(stride_codec: Codec) -> None:
    cfg = CodecConfig(name="stride2", chunk=16, topk=1, bits=2)
    up = _update(cfg)
    back = decode_update(encode_update(up))
    assert back.header.codec == cfg
    got = back.pseudo_gradient()
    assert got.keys() == up.tensors.keys()
    for name, enc in up.tensors.items():
        assert torch.equal(got[name], decode(enc, cfg))
    cost = decode_cost(back.header.params, cfg)
    assert cost.payload_bytes == sum(encoded_bits(shape, cfg) // 8 for _, shape in back.header.params)
    # topk keeping as many values per chunk: the same fields, so the same price
    assert cost == decode_cost(back.header.params, CodecConfig(name="topk", chunk=16, topk=8))


def test_an_update_with_a_codec_nobody_declared_is_refused(stride_codec: Codec) -> None:
    data = encode_update(_update(CodecConfig(name="stride2", chunk=16, topk=1, bits=2)))
    del CODECS["stride2"]  # a node without the declaration
    with pytest.raises(UnknownCodec, match="unknown codec 'stride2'"):
        decode_update(data)


# -- transforms and index codings: declared beside the codecs, resolved once ---------------------------------
@dataclass(frozen=True)
class Wide16:
    """An index coding no node would use (every position in 16 bits): declared here alone."""

    name: str = "wide16"

    def bits(self, groups: Sequence[Group], width: int) -> int:
        return 16 * sum(m * k for m, _, k in groups)

    def pack(self, positions: Sequence[tuple[Tensor, int]], width: int) -> Tensor:
        return PACKED.pack(positions, 16)

    def unpack(self, data: Tensor, groups: Sequence[Group], width: int) -> Tensor:
        return PACKED.unpack(data, groups, 16)

    def cost(self, kept: int, width: int, nbytes: int) -> tuple[int, int]:
        return 1000 * kept, 1000 * kept


@pytest.fixture
def wide16(monkeypatch: pytest.MonkeyPatch) -> IndexCoding:
    coding = Wide16()
    monkeypatch.setitem(INDEX_CODINGS, coding.name, coding)
    monkeypatch.setitem(CODECS, "topk", replace(TOPK, indexes=(*TOPK.indexes, coding.name)))
    return coding


def test_a_config_is_resolved_once_into_its_declarations() -> None:
    cfg = CodecConfig.recipe()
    c = resolve(cfg)
    assert (c.config, c.codec, c.transform, c.index) == (
        cfg,
        TOPK,
        TRANSFORMS["tiles"],
        INDEX_CODINGS["elias-fano"],
    )
    assert resolve(c) is c and (c.chunk, c.topk, c.bits) == (cfg.chunk, cfg.topk, cfg.bits)
    for codec in CODECS.values():  # every name a codec allows is declared
        assert set(codec.transforms) <= set(TRANSFORMS) and set(codec.indexes) <= set(INDEX_CODINGS)
    x = torch.randn(130, 70, generator=torch.Generator().manual_seed(3))
    enc = encode(x, c)
    assert {n: t.tolist() for n, t in enc.fields.items()} == {
        n: t.tolist() for n, t in encode(x, cfg).fields.items()
    }
    assert torch.equal(decode(enc, c), decode(enc, cfg))
    with pytest.raises(CodecError, match="unknown transform 'wavelet'"):
        transform_named("wavelet")
    with pytest.raises(CodecError, match="unknown index coding 'golomb'"):
        index_coding_named("golomb")


def test_an_index_coding_declared_once_encodes_travels_and_is_priced(wide16: IndexCoding) -> None:
    cfg = CodecConfig(name="topk", chunk=64, topk=5, bits=2, index="wide16")
    packed = replace(cfg, index="packed")
    x = torch.randn(64 * 3 + 10, generator=torch.Generator().manual_seed(4))
    enc = encode(x, cfg)
    assert field_specs(tuple(x.shape), cfg)["idx"] == (torch.uint8, (2 * layout(x.numel(), cfg).kept,))
    assert torch.equal(decode(enc, cfg), decode(encode(x, packed), packed))
    up = _update(cfg)
    back = decode_update(encode_update(up))
    assert back.header.codec == cfg
    cost, plain = decode_cost(back.header.params, cfg), decode_cost(back.header.params, packed)
    assert cost.work > plain.work and cost.payload_bytes > plain.payload_bytes


def test_the_shared_path_compares_no_transform_or_index_name() -> None:
    """What differs between transforms and index codings is theirs: the codec's shared path, its bounds and
    the decode cost branch on none of their names."""
    root = Path(__file__).resolve().parents[2]
    for path in ("training/codecs.py", "training/codecbounds.py", "protocol/wire/updatecost.py"):
        text = (root / path).read_text(encoding="utf-8")
        assert not re.search(r"\.(transform|index) (==|!=|in|not in) ", text), path
        assert not re.search(r"\bin (SHAPED|DCT)\b", text), path
        assert not re.search(
            r"""(==|!=|\bin) \(?["'](none|dct|shaped|tiles|packed|elias-fano)["']""", text
        ), path
