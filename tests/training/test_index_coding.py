"""The Elias-Fano index coding of the ``topk`` codec (``CodecConfig.index='elias-fano'``): the same values
as plainly packed indices in fewer bits, and a field that decodes one way only."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings

from tests.training.training_fixtures import shaped_tensors
from training.bitpack import elias_fano_bits, pack_bits, unpack_bits
from training.codecs import Encoded, decode, encode, encoded_bits, field_specs, index_groups
from training.config import CodecConfig
from training.errors import CodecError, ConfigError

PACKED = [
    CodecConfig(topk=56, bits=2, transform="shaped"),
    CodecConfig(topk=32, bits=2, transform="dct"),
    CodecConfig(chunk=64, topk=4, bits=2),
    CodecConfig(chunk=100, topk=10, bits=8),
    CodecConfig(topk=64, bits=32, transform="tiles"),
    CodecConfig(chunk=4096, topk=4096, bits=2, transform="shaped"),
]


@pytest.mark.parametrize("packed", PACKED, ids=lambda c: f"{c.transform}-{c.chunk}-top{c.topk}-{c.bits}b")
@settings(max_examples=25, deadline=None)
@given(x=shaped_tensors())
def test_same_values_as_packed_indices_never_more_bits(packed: CodecConfig, x: torch.Tensor) -> None:
    ef = replace(packed, index="elias-fano")
    enc = encode(x, ef)
    assert torch.equal(decode(enc, ef), decode(encode(x, packed), packed))
    for name, (dtype, shape) in field_specs(tuple(x.shape), ef).items():
        assert enc.fields[name].dtype == dtype and tuple(enc.fields[name].shape) == shape
    assert 8 * enc.nbytes == encoded_bits(tuple(x.shape), ef)
    # plain fallback per group: never longer than packing (up to the byte the stream rounds to)
    assert encoded_bits(tuple(x.shape), ef) <= encoded_bits(tuple(x.shape), packed) + 8


def test_the_recipe_tile_costs_what_the_code_says() -> None:
    # top-56 of a 64 x 64 tile: L = floor(log2(4096 / 56)) = 6 low bits, bitmap 56 + 64 bits
    assert elias_fano_bits(4096, 56) == 56 * 6 + 56 + 64
    assert elias_fano_bits(4096, 56) / 56 < 8.2 < 12
    # one value of a short vector's tile: plain bits are shorter, and are used
    assert elias_fano_bits(64, 1) == 6


def _bits(enc: Encoded) -> torch.Tensor:
    return unpack_bits(enc.fields["idx"], 1, enc.fields["idx"].numel() * 8)


def _with_bits(enc: Encoded, bits: torch.Tensor) -> Encoded:
    return Encoded(enc.shape, {**enc.fields, "idx": pack_bits(bits, 1)})


def test_malformed_fields_are_refused() -> None:
    cfg = CodecConfig(topk=56, bits=2, transform="shaped", index="elias-fano")
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(1))
    enc = encode(x, cfg)
    bits = _bits(enc)
    [(m, width, k)] = index_groups((64, 64), cfg)
    low_end = m * k * 6
    # one more one in the high-part bitmap: k + 1 ones
    extra = bits.clone()
    zeros = (extra[low_end:] == 0).nonzero()[:, 0]
    extra[low_end + int(zeros[0])] = 1
    with pytest.raises(CodecError, match="exactly k ones"):
        decode(_with_bits(enc, extra), cfg)
    # a one moved out of the bitmap leaves k - 1
    fewer = bits.clone()
    ones = (fewer[low_end:] == 1).nonzero()[:, 0]
    fewer[low_end + int(ones[-1])] = 0
    with pytest.raises(CodecError, match="exactly k ones"):
        decode(_with_bits(enc, fewer), cfg)


def test_padding_bits_must_be_zero() -> None:
    cfg = CodecConfig(chunk=100, topk=10, bits=8, index="elias-fano")
    x = torch.randn(250, generator=torch.Generator().manual_seed(2))
    enc = encode(x, cfg)
    total = sum(m * elias_fano_bits(w, k) for m, w, k in index_groups((250,), cfg))
    assert total % 8, "the test needs a field with padding bits"
    bits = _bits(enc)
    bits[total] = 1
    with pytest.raises(CodecError, match="padding"):
        decode(_with_bits(enc, bits), cfg)


def test_equal_high_parts_out_of_order_are_refused() -> None:
    cfg = CodecConfig(chunk=64, topk=4, bits=2, index="elias-fano")
    x = torch.randn(64, generator=torch.Generator().manual_seed(3))
    enc = encode(x, cfg)
    # two indices in one bucket with their low parts swapped decode to a decreasing pair
    [(_, width, k)] = index_groups((64,), cfg)
    low = max(0, (width // k).bit_length() - 1)
    lows = unpack_bits(enc.fields["idx"], 1, k * low).view(k, low)
    bits = _bits(enc)
    forged = torch.tensor([3, 1, 20, 40])  # buckets of 16: 0, 0, 1, 2 (3 > 1 in one bucket)
    forged_lows = (forged.unsqueeze(1) >> torch.arange(low)) & 1
    bits[: k * low] = forged_lows.reshape(-1)
    assert lows.shape == forged_lows.shape
    span = k + ((width - 1) >> low) + 1
    bitmap = torch.zeros(span, dtype=torch.int64)
    bitmap[(forged >> low) + torch.arange(k)] = 1
    bits[k * low : k * low + span] = bitmap
    with pytest.raises(CodecError, match="strictly increasing"):
        decode(_with_bits(enc, bits), cfg)


def test_other_codecs_refuse_the_coding() -> None:
    with pytest.raises(ConfigError):
        CodecConfig(name="dense", chunk=64, bits=8, index="elias-fano")
    with pytest.raises(ConfigError):
        CodecConfig(index="huffman")  # type: ignore[arg-type]
