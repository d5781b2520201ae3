"""The devnet's run file: the preset, the recipe, the corpus and the tokenizer of ``DIR/run.json``, and the
token streams every node derives from it (issue 17)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from tessera.commands.runspec import tokenizer_spec
from tessera.devnet.config import DevnetConfig
from training.config import CodecConfig, InnerConfig, OuterConfig
from training.corpus import load_corpus_path

#: Rounds a DiPaCo assignment is kept in the devnet's run (``RunSpec.epoch_rounds``): epochs of 8 measured
#: -3.6% / -4.4% held-out loss on top of the recipe, seeds 0 / 1 (``benchmarks.quality_pareto.EPOCH_ROUNDS``,
#: docs/decisions/training-recipe.md); MoE keeps 1 (epochs cost it 3.3%).
DIPACO_EPOCH_ROUNDS = 8

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
    """The devnet's run: the configured preset (``training.presets``; ``tiny`` is the devnet's historical
    model) in the configured mode, its inner loop, the network's training recipe (``OuterConfig.recipe()``,
    ``CodecConfig.recipe()``; docs/decisions/training-recipe.md), the configured corpus (a user corpus by
    absolute path, its content digest pinned; ``training.corpus.CorpusError`` if unusable) and, with
    :attr:`DevnetConfig.bpe_vocab`, the BPE tokenizer at :func:`tokenizer_path` (which must exist), named
    relative to the run file; in DiPaCo mode assignments are kept for :data:`DIPACO_EPOCH_ROUNDS` rounds.
    Its ``base_dir`` is the workdir, where ``run.json`` goes."""
    from protocol.rounds.auditspec import AuditSpec
    from protocol.runspec import RunSpec
    from training.merge import MergePolicy
    from training.presets import get_preset

    preset = get_preset(cfg.preset)
    tokenizer = None
    if cfg.bpe_vocab is not None:
        tokenizer = replace(tokenizer_spec(str(tokenizer_path(cfg))), file=TOKENIZER_FILE)
    corpus, corpus_digest = "bundled", None
    if cfg.corpus != "bundled":
        corpus = os.path.abspath(cfg.corpus)
        corpus_digest = load_corpus_path(corpus).digest
    inner = InnerConfig(steps=cfg.inner_steps, batch_size=cfg.batch_size, transcript_interval=1)
    return RunSpec(
        model=preset.model(cfg.mode, 256 if tokenizer is None else tokenizer.vocab_size),
        inner=replace(inner, lr=preset.lr),
        outer=OuterConfig.recipe(),
        codec=CodecConfig.recipe(),
        corpus=corpus,
        corpus_digest=corpus_digest,
        tokenizer=tokenizer,
        merge=MergePolicy(cfg.merge_method),  # the validators' (--merge), which miners rebuild with
        # audits by committees of one validator; q follows from the stake at deployment (issue 26)
        audits=AuditSpec(committee_size=1, miners=cfg.miners, validators=cfg.validators),
        epoch_rounds=DIPACO_EPOCH_ROUNDS if cfg.mode == "dipaco" else 1,
        base_dir=cfg.workdir.resolve(),
    )
