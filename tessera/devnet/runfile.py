"""The devnet's run file: the preset, the recipe, the corpus and the tokenizer of ``DIR/run.json``, and the
token streams every node derives from it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from tessera.commands.runspec import run_file_path, tokenizer_spec
from tessera.devnet.config import DevnetConfig
from training.corpus import load_corpus_path

#: The devnet's BPE tokenizer file, next to its run file (which names it by this relative path).
TOKENIZER_FILE = "tokenizer.json"


def tokenizer_path(cfg: DevnetConfig) -> Path:
    """Where the devnet writes its BPE tokenizer: beside ``run.json``, which names it relative to itself
    (``protocol.runspec.RunSpec.resolve``), so nodes find it from any working directory."""
    return (cfg.workdir / TOKENIZER_FILE).resolve()


def build_streams(spec: Any) -> dict[str, Any]:
    """Build the run's token streams as every node will (``training.data.prepare`` of the run file's corpus,
    checked against its pinned digest, tokenized by its pinned tokenizer) and describe them. Raises the
    typed errors of a bad corpus before anything starts: ``training.corpus.CorpusError`` (missing, not
    UTF-8, no documents...), ``protocol.runspec.CorpusDigestError`` (the files changed since the run file
    pinned them), ``training.errors.DataError`` (too small for a train/held-out split)."""
    from training.data import prepare

    corpus = spec.load_corpus()
    ds = prepare(corpus, spec.model)
    return {
        "corpus": spec.corpus,
        "corpus_digest": corpus.digest,
        "documents": len(corpus.documents),
        "bytes": corpus.n_bytes,
        "tokenizer": "bytes" if spec.tokenizer is None else spec.tokenizer.digest,
        "train_tokens": int(ds.train.numel()),
        "heldout_tokens": int(ds.heldout.numel()),
    }


def devnet_spec(cfg: DevnetConfig) -> Any:
    """The devnet's run: ``protocol.recipe.run_recipe`` (the function ``tessera runspec init`` calls) with
    the configured preset, mode, H and batch (None: the recipe's), merge and network size, the configured
    corpus (a user corpus named relative to the run file, its content digest pinned;
    ``training.corpus.CorpusError`` if unusable) and, with :attr:`DevnetConfig.bpe_vocab`, the BPE
    tokenizer at :func:`tokenizer_path` (which must exist). Its ``base_dir`` is the workdir, where
    ``run.json`` goes; the devnet sets nothing of its own."""
    from protocol.recipe import run_recipe

    run_file = cfg.workdir.resolve() / "run.json"
    tokenizer = None
    if cfg.bpe_vocab is not None:
        tokenizer = replace(tokenizer_spec(str(tokenizer_path(cfg))), file=TOKENIZER_FILE)
    corpus, corpus_digest = "bundled", None
    if cfg.corpus != "bundled":
        corpus_digest = load_corpus_path(cfg.corpus).digest
        corpus = run_file_path(cfg.corpus, run_file)
    return run_recipe(
        cfg.preset,
        cfg.mode,
        tokenizer=tokenizer,
        inner_steps=cfg.inner_steps,
        batch_size=cfg.batch_size,
        miners=cfg.miners,
        validators=cfg.validators,
        merge_method=cfg.merge_method,
        corpus=corpus,
        corpus_digest=corpus_digest,
        base_dir=run_file.parent,
    )
