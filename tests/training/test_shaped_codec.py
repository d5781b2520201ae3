"""The ``shaped`` transform: DCT tiles that follow the tensor's rows and columns, nothing padded."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings

from tests.training.training_fixtures import shaped_tensors
from training.bitpack import pack_bits
from training.codecbounds import chunk_errors, error_bound
from training.codeclayout import tile_grid
from training.codecs import Encoded, decode, encode, encoded_bits, field_specs, layout_of
from training.config import CodecConfig
from training.errors import CodecError

SHAPED = [
    CodecConfig(topk=32, bits=2, transform="shaped"),
    CodecConfig(topk=64, bits=8, transform="shaped"),
    CodecConfig(topk=128, bits=32, transform="shaped"),
    CodecConfig(topk=64, bits=2, transform="tiles"),
    CodecConfig(topk=64, bits=32, transform="tiles"),
]


@pytest.mark.parametrize("cfg", SHAPED, ids=lambda c: f"{c.transform}-top{c.topk}-{c.bits}b")
@settings(max_examples=30, deadline=None)
@given(x=shaped_tensors())
def test_shaped_error_bound_and_fields(cfg: CodecConfig, x: torch.Tensor) -> None:
    enc = encode(x, cfg)
    y = decode(enc, cfg)
    assert y.shape == x.shape
    err, bound = chunk_errors(x, y, cfg), error_bound(x, cfg)
    # float32 round-off of the transform round trip scales with the chunk's own norm, not with the bound (at
    # 32 bits a chunk whose dropped energy is tiny has a bound far below that round-off): about 84 float32
    # epsilons of the chunk's norm in that norm (hypothesis found 3e-6 relative on 4,096-value tiles)
    norm = chunk_errors(x, torch.zeros_like(x), cfg)
    slack = 1e-6 * bound + 1e-5 * norm + 1e-30 + (1e-6 * x.abs().max() if cfg.bits != 32 else 0)
    assert bool((err <= bound + slack).all()), (err - bound).max()
    for name, (dtype, shape) in field_specs(tuple(x.shape), cfg).items():
        assert enc.fields[name].dtype == dtype and tuple(enc.fields[name].shape) == shape
    assert 8 * enc.nbytes == encoded_bits(tuple(x.shape), cfg)


def test_tiles_follow_rows_and_columns_without_padding() -> None:
    cfg = CodecConfig(topk=32, bits=2, transform="shaped")
    assert tile_grid((96, 32)) == (
        96,
        32,
        48,
        32,
    )  # the old codec flattened 3,072 values into one padded tile
    assert tile_grid((256, 32)) == (256, 32, 64, 32)
    assert tile_grid((32,)) == (1, 32, 1, 32)  # a norm vector is one row
    lay = layout_of((96, 32), cfg)
    assert (lay.full_chunks, lay.k_full, lay.tail) == (2, math.ceil(32 * 48 * 32 / 4096), 0)
    # a change confined to one tile decodes inside that tile only: tiles are blocks of rows and columns
    x = torch.zeros(128, 64)
    x[64:, :] = torch.randn(64, 64, generator=torch.Generator().manual_seed(1))
    y = decode(encode(x, cfg), cfg)
    assert bool((y[:64] == 0).all()) and bool((y[64:] != 0).any())


def test_shaped_keeps_more_energy_of_a_matrix_with_row_structure() -> None:
    # rows with their own smooth profile (what a weight update looks like: per-row scales); the flattened
    # 64x64 tiles of a 96x32 matrix mix rows, the shaped ones keep them as rows
    g = torch.Generator().manual_seed(0)
    t = torch.linspace(0, 1, 32)
    x = torch.randn(96, 1, generator=g) * torch.sin(3 * t + torch.rand(96, 1, generator=g))
    x = x + 0.01 * torch.randn(96, 32, generator=g)
    shaped = CodecConfig(topk=32, bits=32, transform="shaped")
    flat = CodecConfig(topk=32, bits=32, transform="dct")

    def kept(cfg: CodecConfig) -> float:
        return float(decode(encode(x, cfg), cfg).pow(2).sum() / x.pow(2).sum())

    assert kept(shaped) > kept(flat)


def test_shaped_rejects_indices_outside_the_tile() -> None:
    cfg = CodecConfig(topk=32, bits=2, transform="shaped")
    enc = encode(torch.randn(48, 32), cfg)  # one 48x32 tile: 12 indices of 11 bits (< 1536)
    ok = list(range(11)) + [1535]
    decode(Encoded(enc.shape, {**enc.fields, "idx": pack_bits(torch.tensor(ok), 11)}), cfg)
    for bad in (list(range(11)) + [1536], [1, 0] + list(range(2, 12))):
        with pytest.raises(CodecError):
            decode(Encoded(enc.shape, {**enc.fields, "idx": pack_bits(torch.tensor(bad), 11)}), cfg)
