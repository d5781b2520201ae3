"""Corpus, tokenizer, held-out split, DiPaCo router and miner batches."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from tests.training.training_fixtures import tiny_model
from training.assignment import assign
from training.corpus import BUNDLED_SHA256, load_bundled_corpus, parse_corpus
from training.data import (
    DOC_SEP,
    decode,
    encode,
    fit_router,
    is_heldout,
    miner_batches,
    prepare,
    router_feature,
)
from training.errors import DataError
from training.model import all_paths


@pytest.fixture(scope="module")
def corpus():  # type: ignore[no-untyped-def]
    return load_bundled_corpus()


def test_bundled_corpus_is_pinned(corpus) -> None:  # type: ignore[no-untyped-def]
    assert corpus.digest == BUNDLED_SHA256
    assert len(corpus.documents) > 500 and corpus.n_bytes > 1_000_000
    assert all(DOC_SEP not in d.data for d in corpus.documents)


def test_tokenizer_round_trip() -> None:
    text = "Tessera trains — together."
    assert decode(encode(text)) == text and max(encode(text)) < 256


def test_parse_user_corpora() -> None:
    jl = b'{"text": "hello"}\n\n{"id": "x", "text": "world"}\n'
    c = parse_corpus(jl, "jsonl")
    assert [d.data for d in c.documents] == [b"hello", b"world"] and c.documents[1].id == "x"
    assert c.digest == hashlib.sha256(jl).hexdigest()
    t = parse_corpus(b"one\n\n\ntwo", "text")
    assert [d.data for d in t.documents] == [b"one", b"two"]
    for bad in (b"not json", b'{"nottext": 1}', b'{"text": 3}', b""):
        with pytest.raises(DataError):
            parse_corpus(bad, "jsonl")


def test_heldout_split_is_stable(corpus) -> None:  # type: ignore[no-untyped-def]
    held = [d for d in corpus.documents if is_heldout(d.id)]
    assert 0.05 < len(held) / len(corpus.documents) < 0.15
    assert is_heldout(held[0].id) and not is_heldout(held[0].id, 0.0)


def test_router_balanced_and_deterministic(corpus) -> None:  # type: ignore[no-untyped-def]
    cfg = tiny_model("dipaco")
    ds = prepare(corpus, cfg)
    sizes = [t.numel() for t in ds.path_train]
    assert len(sizes) == len(all_paths(cfg))
    assert max(sizes) / min(sizes) < 1.05
    assert ds.router == prepare(corpus, cfg).router
    assert router_feature(b"abc def") == 0.0 and router_feature(b"1+2") == 1.0
    r = fit_router(corpus.documents[:3], 8)
    assert len(r.cuts) == 7


def test_miner_batches_pure_and_distinct(corpus, mode: str) -> None:  # type: ignore[no-untyped-def]
    cfg = tiny_model(mode)
    ds = prepare(corpus, cfg)
    a = assign(b"r0", ["m0", "m1"], cfg)
    b0 = miner_batches(ds, b"r0", a["m0"], 3, 2, cfg.seq_len)
    assert b0.shape == (3, 2, cfg.seq_len + 1) and b0.dtype == torch.int64
    assert torch.equal(b0, miner_batches(ds, b"r0", a["m0"], 3, 2, cfg.seq_len))
    assert not torch.equal(b0, miner_batches(ds, b"r1", a["m0"], 3, 2, cfg.seq_len))
    assert not torch.equal(b0, miner_batches(ds, b"r0", a["m1"], 3, 2, cfg.seq_len))


def test_too_small_corpus_is_refused() -> None:
    tiny = parse_corpus(json.dumps({"text": "x" * 50}).encode(), "jsonl")
    with pytest.raises(DataError):
        prepare(tiny, tiny_model())
