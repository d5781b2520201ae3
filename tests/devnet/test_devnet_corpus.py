"""``tessera devnet --corpus``: a devnet trains on a folder of the user's text files (issue 17).

The run file names the corpus by absolute path and pins its content digest, a BPE tokenizer is trained on
it and named relative to the run file, and every node (whatever its working directory) derives the same
token streams; bad input stops the devnet with the typed error of ``training.corpus`` before anvil starts.
Also: relative paths in any run file resolve against the run file's folder (``RunSpec.resolve``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from protocol.runspec import CorpusDigestError, RunSpec
from tessera.commands.runspec import train_tokenizer_file
from tessera.devnet.config import DevnetConfig
from tessera.devnet.network import Devnet
from tessera.devnet.runfile import build_streams, devnet_spec, tokenizer_path
from training.corpus import CorpusError, load_corpus_path
from training.data import prepare

WORDS = "the network trains a model on text that miners read and validators check each round".split()


def _corpus(root: Path, docs: int = 80) -> Path:
    """A folder of ``.txt`` files (two documents each) and one ``.jsonl`` file."""
    root.mkdir(parents=True)
    for i in range(docs // 2):
        a = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(40 + i))
        b = " ".join(WORDS[(3 * i + j) % len(WORDS)] for j in range(30 + i))
        (root / f"part{i:03}.txt").write_text(f"{a}.\n\n\n{b}.\n")
    (root / "extra.jsonl").write_text(
        "\n".join(json.dumps({"text": f"record {i}: " + " ".join(WORDS[i:])}) for i in range(10)) + "\n"
    )
    return root


def _streams(spec: RunSpec) -> tuple[torch.Tensor, torch.Tensor]:
    ds = prepare(spec.load_corpus(), spec.model)
    return ds.train, ds.heldout


def test_devnet_run_pins_the_corpus_and_every_node_derives_the_same_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = _corpus(tmp_path / "my-text")
    monkeypatch.chdir(tmp_path)
    cfg = DevnetConfig(workdir=tmp_path / "dn", corpus="my-text", bpe_vocab=300)  # relative, as typed
    cfg.workdir.mkdir()
    train_tokenizer_file(cfg.corpus, 300, tokenizer_path(cfg))
    spec = devnet_spec(cfg)
    assert spec.corpus == "../my-text" and spec.corpus_digest == load_corpus_path(corpus).digest
    assert spec.tokenizer is not None and spec.tokenizer.file == "tokenizer.json"
    assert spec.model.vocab_size == spec.tokenizer.vocab_size <= 300
    spec.save(cfg.workdir / "run.json")
    here = RunSpec.load(cfg.workdir / "run.json")
    info = build_streams(here)
    assert info["corpus_digest"] == spec.corpus_digest and info["documents"] == 90
    assert info["heldout_tokens"] > 0 and info["train_tokens"] > info["heldout_tokens"]
    train, held = _streams(here)
    assert train.dtype == torch.int32 and int(train.max()) < spec.model.vocab_size
    # a node started from another directory, given the run file by absolute path
    elsewhere = tmp_path / "node-cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    there = RunSpec.load(cfg.workdir / "run.json")
    assert there == here and there.digest() == here.digest()
    train2, held2 = _streams(there)
    assert torch.equal(train, train2) and torch.equal(held, held2)


def test_bad_corpora_get_the_typed_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "a.txt").write_text("fine text\n")
    (bad / "b.txt").write_bytes(b"caf\xe9 latin-1\n")
    with pytest.raises(CorpusError, match=r"b\.txt: not UTF-8 at byte offset 3"):
        devnet_spec(DevnetConfig(workdir=tmp_path / "dn", corpus=str(bad)))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "blank.txt").write_text("\n \n\n\n\n")
    with pytest.raises(CorpusError, match="no documents"):
        devnet_spec(DevnetConfig(workdir=tmp_path / "dn", corpus=str(empty)))
    with pytest.raises(CorpusError, match="does not exist"):
        devnet_spec(DevnetConfig(workdir=tmp_path / "dn", corpus=str(tmp_path / "missing")))
    # the files change after the run file pinned them (a resumed devnet, a node with other files)
    good = _corpus(tmp_path / "good", docs=40)
    cfg = DevnetConfig(workdir=tmp_path / "dn2", corpus=str(good))
    cfg.workdir.mkdir()
    devnet_spec(cfg).save(cfg.workdir / "run.json")
    (good / "part000.txt").write_text("edited\n")
    with pytest.raises(CorpusDigestError, match="hashes to .* but the run file pins corpus_digest"):
        build_streams(RunSpec.load(cfg.workdir / "run.json"))


@pytest.mark.parametrize("bpe", [None, 300])
def test_devnet_refuses_a_bad_corpus_before_starting_anything(tmp_path: Path, bpe: int | None) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"txt": "no text field"}\n')
    net = Devnet(DevnetConfig(workdir=tmp_path / "dn", corpus=str(bad), bpe_vocab=bpe))
    with pytest.raises(CorpusError, match=r"bad\.jsonl line 2: not a JSON object with a string 'text'"):
        net.start()
    assert net.anvil is None and net.dht is None and not net.nodes


def test_devnet_command_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tessera.cli import main

    (tmp_path / "latin1.txt").write_bytes(b"\xff\xfe not utf-8")
    args = ["devnet", "--corpus", str(tmp_path / "latin1.txt"), "--dir", str(tmp_path / "dn"), "--no-live"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "CorpusError" in err[0] and "latin1.txt: not UTF-8 at byte offset 0" in err[0]


def test_run_file_paths_resolve_against_the_run_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``runspec init`` names the corpus and tokenizer relative to the run file it writes; a node reads
    them from there whatever its working directory, and export copies the right tokenizer."""
    from tessera.cli import main
    from tessera.modelout import export, load_export

    _corpus(tmp_path / "launch" / "corpus")
    monkeypatch.chdir(tmp_path / "launch")
    assert main(["runspec", "tokenizer", "--corpus", "corpus", "--vocab", "300", "--out", "tok.json"]) == 0
    os.mkdir("runs")
    args = ["runspec", "init", "--corpus", "corpus", "--tokenizer", "tok.json", "--out", "runs/run.json"]
    assert main(args) == 0
    doc = json.loads(Path("runs/run.json").read_text())
    assert doc["corpus"] == "../corpus" and doc["tokenizer"]["file"] == "../tok.json"
    monkeypatch.chdir(tmp_path)  # a node started elsewhere
    spec = RunSpec.load(tmp_path / "launch" / "runs" / "run.json")
    assert spec.resolve(spec.corpus) == tmp_path / "launch" / "runs" / ".." / "corpus"
    assert spec.load_corpus().digest == spec.corpus_digest
    out = export(spec.genesis_params(), spec, tmp_path / "model", None, "0x" + "00" * 32)
    assert (out / "tokenizer.json").read_bytes() == (tmp_path / "launch" / "tok.json").read_bytes()
    assert load_export(out)[1] == spec.model
    # an absolute path stays absolute; a spec built in memory reads from the working directory
    assert RunSpec(corpus=str(tmp_path / "x")).resolve(str(tmp_path / "x")) == tmp_path / "x"
    assert RunSpec().resolve("corpus") == Path("corpus")
    # the copy a node reads moved with the run file: same digest, found beside it
    moved = tmp_path / "moved"
    os.rename(tmp_path / "launch", moved)
    assert RunSpec.load(moved / "runs" / "run.json").load_corpus().digest == spec.corpus_digest
