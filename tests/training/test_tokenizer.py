"""BPE tokenizers (issue 17): deterministic training, pinning by digest, identical token streams."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from protocol.errors import ProtocolError
from protocol.runspec import RunSpec, RunSpecError, TokenizerDigestError, TokenizerSpec
from tessera.modelout import evaluate, export, export_tokenizer, load_export, model_with, sample
from training.config import ModelConfig
from training.corpus import load_bundled_corpus
from training.data import DOC_SEP, is_heldout, prepare
from training.model import build_model, param_state
from training.tokenizer import (
    DOC_SEP_ID,
    BPETokenizer,
    ByteTokenizer,
    TokenizerError,
    tokenizer_digest,
    train_bpe,
)

ROOT = Path(__file__).resolve().parents[2]


def _texts(n: int = 120) -> list[str]:
    docs = [d for d in load_bundled_corpus().documents if not is_heldout(d.id)][:n]
    return [d.data.decode() for d in docs]


@pytest.fixture(scope="module")
def bpe_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 512-token BPE tokenizer trained on the bundled corpus's training documents."""
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    path.write_bytes(train_bpe(_texts(10_000), 512))
    return path


_TRAIN_IN_CHILD = """
import hashlib, sys
sys.path.insert(0, {root!r})
from training.corpus import load_bundled_corpus
from training.data import is_heldout
from training.tokenizer import train_bpe
texts = [d.data.decode() for d in load_bundled_corpus().documents if not is_heldout(d.id)][:120]
print(hashlib.sha256(train_bpe(texts, 400)).hexdigest())
"""


def test_training_is_deterministic_across_runs_threads_and_processes() -> None:
    texts = _texts()
    a, b = train_bpe(texts, 400), train_bpe(texts, 400)
    assert a == b
    assert BPETokenizer(a).vocab_size == 400
    assert train_bpe(texts, 401) != a  # the settings matter
    digests = set()
    for threads, hashseed in (("1", "1"), ("2", "2")):
        env = os.environ | {"RAYON_NUM_THREADS": threads, "PYTHONHASHSEED": hashseed}
        out = subprocess.run(
            [sys.executable, "-c", _TRAIN_IN_CHILD.format(root=str(ROOT))],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        digests.add(out.stdout.strip())
    assert digests == {tokenizer_digest(a)}


def test_encode_decode_round_trip_and_separator(bpe_file: Path) -> None:
    tok = BPETokenizer(bpe_file.read_bytes())
    for text in ["The quick brown fox.", "ünïcödé 日本語 \x01 tabs\tand\nnewlines", ""]:
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        assert DOC_SEP_ID not in ids
    ids = tok.encode("the function returns the value of the option")
    assert len(ids) < len("the function returns the value of the option") / 2  # merges compress
    assert tok.encode_batch(["a b", "c"]) == [tok.encode("a b"), tok.encode("c")]
    assert ByteTokenizer().encode("é") == [0xC3, 0xA9]


def test_bad_tokenizer_files_and_settings() -> None:
    with pytest.raises(TokenizerError):
        BPETokenizer(b"{not json")
    with pytest.raises(TokenizerError, match="vocabulary"):
        train_bpe(["abc"], 100)
    # a tokenizers file without Tessera's separator as token 0
    from tokenizers import Tokenizer, models

    with pytest.raises(TokenizerError, match="<|doc|>"):
        BPETokenizer(Tokenizer(models.BPE()).to_str().encode())


def _spec(tok_path: Path, mode: str = "moe") -> RunSpec:
    tok = BPETokenizer(tok_path.read_bytes())
    ts = TokenizerSpec(file=str(tok_path), digest=tok.digest, vocab_size=tok.vocab_size)
    model = ModelConfig(mode=mode, vocab_size=tok.vocab_size, seq_len=16, d_model=16, d_ff=32)  # type: ignore[arg-type]
    return RunSpec(model=model, tokenizer=ts)


def test_run_file_pins_the_tokenizer_and_nodes_refuse_another(tmp_path: Path, bpe_file: Path) -> None:
    tok_path = tmp_path / "tokenizer.json"
    tok_path.write_bytes(bpe_file.read_bytes())
    spec = _spec(tok_path)
    spec.save(tmp_path / "run.json")
    doc = json.loads((tmp_path / "run.json").read_text())
    assert doc["tokenizer"] == {
        "kind": "bpe",
        "file": str(tok_path),
        "digest": hashlib.sha256(tok_path.read_bytes()).hexdigest(),
        "vocab_size": 512,
    }
    assert doc["model"]["vocab_size"] == 512
    loaded = RunSpec.load(tmp_path / "run.json")
    assert loaded == spec and loaded.digest() == spec.digest()
    assert loaded.load_tokenizer().vocab_size == 512
    # byte-level run files are unchanged (no tokenizer key, same digest as before issue 17)
    assert "tokenizer" not in RunSpec().to_json()
    assert isinstance(RunSpec().load_tokenizer(), ByteTokenizer)
    # one byte of the file changed: every node loading the run file refuses it, with a typed error
    other = train_bpe(_texts(), 512)
    tok_path.write_bytes(other)
    with pytest.raises(TokenizerDigestError, match="pins tokenizer.digest") as err:
        RunSpec.load(tmp_path / "run.json")
    assert isinstance(err.value, ProtocolError)
    with pytest.raises(TokenizerDigestError):
        spec.load_corpus()
    tok_path.unlink()
    with pytest.raises(RunSpecError, match="cannot read tokenizer"):
        RunSpec.load(tmp_path / "run.json")


def test_model_vocab_must_follow_the_tokenizer(bpe_file: Path) -> None:
    spec = _spec(bpe_file)
    with pytest.raises(RunSpecError, match="vocab_size"):
        replace(spec, model=replace(spec.model, vocab_size=256))
    bad = spec.to_json()
    bad["tokenizer"]["kind"] = "wordpiece"
    with pytest.raises(RunSpecError, match="unknown tokenizer kind"):
        RunSpec.from_json(bad)
    bad = spec.to_json()
    bad["tokenizer"]["digest"] = "xyz"
    with pytest.raises(RunSpecError, match="tokenizer.digest"):
        RunSpec.from_json(bad)


_STREAM_IN_CHILD = """
import hashlib, sys
sys.path.insert(0, {root!r})
from protocol.runspec import RunSpec
from training.data import prepare
spec = RunSpec.load({run!r})
ds = prepare(spec.load_corpus(), spec.model)
h = hashlib.sha256()
for t in (ds.train, ds.heldout, *ds.path_train, *ds.path_heldout):
    h.update(t.numpy().tobytes())
print(h.hexdigest())
"""


@pytest.mark.parametrize("mode", ["moe", "dipaco"])
def test_token_streams_are_bpe_ids_and_identical_across_nodes(
    tmp_path: Path, bpe_file: Path, mode: str
) -> None:
    spec = _spec(bpe_file, mode)
    spec.save(tmp_path / "run.json")
    corpus = spec.load_corpus()
    ds = prepare(corpus, spec.model)
    assert ds.train.dtype == torch.int32
    assert int(ds.train.max()) < 512 and int(ds.train.min()) == DOC_SEP == 0
    n_train = sum(not is_heldout(d.id) for d in corpus.documents)
    assert int((ds.train == DOC_SEP).sum()) == n_train  # one separator per document
    byte_ds = prepare(load_bundled_corpus(), replace(spec.model, vocab_size=256))
    assert ds.train.numel() < 0.6 * byte_ds.train.numel()  # about 2 bytes per token at 512
    if mode == "dipaco":  # routing reads bytes: the same documents reach each path
        assert byte_ds.router == ds.router
    h = hashlib.sha256()
    for t in (ds.train, ds.heldout, *ds.path_train, *ds.path_heldout):
        h.update(t.numpy().tobytes())
    child = subprocess.run(
        [sys.executable, "-c", _STREAM_IN_CHILD.format(root=str(ROOT), run=str(tmp_path / "run.json"))],
        env=os.environ | {"RAYON_NUM_THREADS": "1", "PYTHONHASHSEED": "7"},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert child.stdout.strip() == h.hexdigest()
    with pytest.raises(Exception, match="vocab_size"):
        prepare(corpus, replace(spec.model, vocab_size=300))


def test_export_carries_the_tokenizer_and_sample_decodes_with_it(tmp_path: Path, bpe_file: Path) -> None:
    spec = _spec(bpe_file)
    params = param_state(build_model(spec.model, seed=1))
    out = export(params, spec, tmp_path / "out", None, "0x" + "ab" * 32)
    params2, cfg, doc = load_export(out)
    assert cfg == spec.model and doc["tokenizer"]["digest"] == spec.tokenizer.digest  # type: ignore[union-attr]
    tok = export_tokenizer(out, doc)
    assert isinstance(tok, BPETokenizer) and tok.digest == spec.tokenizer.digest  # type: ignore[union-attr]
    text = sample(model_with(params2, cfg), "The ", max_new=12, seed=3, tokenizer=tok)
    assert text == sample(model_with(params2, cfg), "The ", max_new=12, seed=3, tokenizer=tok)
    assert text and text == tok.decode(tok.encode(text)) or "\ufffd" in text  # BPE ids decoded to text
    ev = evaluate(params2, spec, windows=4)  # loss per token; bits per byte over the bytes per token
    assert ev["bytes_per_token"] > 1.5
    assert ev["bits_per_byte"] == pytest.approx(ev["heldout_loss"] / math.log(2) / ev["bytes_per_token"])
    (out / "tokenizer.json").write_bytes(train_bpe(_texts(), 512))
    from tessera.modelout import ModelOutError

    with pytest.raises(ModelOutError, match="not the tokenizer"):
        export_tokenizer(out, doc)


def test_runspec_tokenizer_and_init_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tessera.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus").mkdir()
    for i, text in enumerate(_texts(60)):
        (tmp_path / "corpus" / f"d{i:02}.txt").write_text(text)
    args = ["runspec", "tokenizer", "--corpus", "corpus", "--vocab", "300", "--out", "tok.json"]
    assert main(args) == 0
    first = (tmp_path / "tok.json").read_bytes()
    assert main([*args, "--force"]) == 0
    assert (tmp_path / "tok.json").read_bytes() == first
    assert main(["runspec", "init", "--corpus", "corpus", "--tokenizer", "tok.json", "--mode", "dipaco"]) == 0
    spec = RunSpec.load("run.json")
    assert spec.tokenizer is not None and spec.tokenizer.digest == tokenizer_digest(first)
    assert spec.model.vocab_size == spec.tokenizer.vocab_size == 300
    assert spec.corpus_digest is not None
    (tmp_path / "tok.json").write_bytes(first.replace(b'"<|doc|>"', b'"<|DOC|>"'))
    assert main(["runspec", "show", "run.json"]) == 2  # TokenizerDigestError: one line, exit status 2
