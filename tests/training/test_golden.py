"""Golden values (tests/training/golden/golden.json, made by make_golden.py) pin the shared math.

They hold on every machine: exactly for what is defined independently of the kernels, within a measured
tolerance for what runs through them (see make_golden.py). CI and a new machine with other instruction
sets must pass them unchanged.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from tests.training.make_golden import (
    CODECS,
    MINERS,
    TRAINED_RTOL,
    digest_inputs,
    exact_input,
    fixed_dct_encoding,
    fixed_shaped_encoding,
    fixed_updates,
    pseudo_gradient_case,
    recipe,
)
from tests.training.training_fixtures import tiny_model
from training.assignment import assign
from training.codecs import decode, encode
from training.config import CodecConfig, OuterConfig
from training.corpus import load_bundled_corpus
from training.data import prepare, window_offsets
from training.digest import state_digest
from training.diloco import OuterOptimizer, merge
from training.model import build_model, param_state

GOLDEN = json.loads((Path(__file__).parent / "golden" / "golden.json").read_text())


def test_state_digest() -> None:
    assert state_digest(digest_inputs()).hex() == GOLDEN["state_digest"]


@pytest.mark.parametrize("name", sorted(CODECS))
def test_codec_outputs(name: str) -> None:
    cfg, want = CODECS[name], GOLDEN["codecs"][name]
    enc = encode(exact_input(), cfg)
    dec = decode(enc, cfg)
    if cfg.transform == "dct":  # a matmul: pin the selected indices exactly, the values to fp32 rounding
        assert hashlib.sha256(enc.fields["idx"].numpy().tobytes()).hexdigest() == want["fields"]["idx"]
    else:
        assert {k: hashlib.sha256(v.numpy().tobytes()).hexdigest() for k, v in enc.fields.items()} == want[
            "fields"
        ]
        assert state_digest({"x": dec}).hex() == want["decoded_digest"]
    assert float(dec.norm()) == pytest.approx(want["decoded_l2"], rel=1e-5)


def test_model_init_assignment_offsets_split() -> None:
    for mode, digest in GOLDEN["model_init"].items():
        assert state_digest(param_state(build_model(tiny_model(mode), 0))).hex() == digest
    for mode, want in GOLDEN["assignment"].items():
        got = {
            k: [list(v.module_ids), v.shard] for k, v in assign(b"golden", MINERS, tiny_model(mode)).items()
        }
        assert got == want
    assert window_offsets(b"golden", 9, 100_000) == GOLDEN["window_offsets"]
    ds = prepare(load_bundled_corpus(), tiny_model("dipaco"))
    assert ds.router is not None
    assert hashlib.sha256(ds.train.numpy().tobytes()).hexdigest() == GOLDEN["corpus_split"]["train_sha256"]
    assert (
        hashlib.sha256(ds.heldout.numpy().tobytes()).hexdigest() == GOLDEN["corpus_split"]["heldout_sha256"]
    )
    assert list(ds.router.cuts) == GOLDEN["corpus_split"]["router_cuts"]


def test_dct_decode_is_exact() -> None:
    enc, cfg = fixed_dct_encoding()
    assert state_digest({"x": decode(enc, cfg)}).hex() == GOLDEN["dct_decode"]


def test_shaped_and_recipe_decodes_are_exact_and_the_recipe_is_pinned() -> None:
    enc, cfg = fixed_shaped_encoding()
    assert state_digest({"x": decode(enc, cfg)}).hex() == GOLDEN["shaped_decode"]
    assert recipe() == GOLDEN["recipe"]  # a new default recipe means regenerating, deliberately
    enc, cfg = fixed_shaped_encoding(CodecConfig.recipe())
    assert state_digest({"x": decode(enc, cfg)}).hex() == GOLDEN["recipe_decode"]


def test_pseudo_gradient_and_outer_step() -> None:
    want = GOLDEN["pseudo_gradient"]
    theta, delta, info = pseudo_gradient_case()
    assert info["batches_sha256"] == want["batches_sha256"]
    assert len(info["transcript"]) == want["transcript_len"]
    # through torch's kernels: within the tolerance measured across instruction sets, not bit for bit
    norms = {k: float(v.norm()) for k, v in sorted(delta.items())}
    assert norms == pytest.approx(want["norms"], rel=TRAINED_RTOL)
    # the same inputs on one machine: bit for bit (what a validator's replay relies on)
    again = pseudo_gradient_case()
    assert again[2]["transcript"] == info["transcript"]
    assert state_digest(again[1]) == state_digest(delta)
    # the merge and the outer step of fixed updates: bit for bit on every machine
    new = OuterOptimizer(OuterConfig()).step(theta, merge(fixed_updates(theta)))
    assert state_digest(new).hex() == GOLDEN["outer_step"]
    assert torch.isfinite(torch.cat([v.reshape(-1) for v in new.values()])).all()
