"""The run specification both roles must share to compute identically: configs, corpus, tokenizer, genesis.

A ``run.json`` (written by ``tessera devnet`` or by whoever launches a run) fixes the model, inner loop,
outer step and codec (``training.config``), the corpus, and the seed of the genesis checkpoint theta_0.
Miners and validators load it once at start; its digest (:meth:`RunSpec.digest`) identifies the run.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from protocol.errors import ProtocolError
from protocol.rounds.auditspec import AuditSpec, AuditSpecError
from protocol.wire.canonical import (
    JSONFileError,
    dumps_canonical,
    read_json_file,
)
from protocol.wire.tensorblob import tensors_digest
from training.config import CodecConfig, InnerConfig, ModelConfig, OuterConfig, from_dict, to_dict
from training.corpus import content_digest, load_bundled_corpus, load_corpus_path
from training.errors import TrainingError
from training.merge import MERGE_METHODS, MergePolicy
from training.model import build_model, param_state
from training.tokenizer import MAX_TOKENIZER_BYTES, BPETokenizer, ByteTokenizer, tokenizer_digest

#: Held around every torch computation a node does (training, replay, evaluation, merge). Measured:
#: torch work running concurrently in another thread of the same process perturbs the bits of an inner
#: loop, which breaks bit-exact replay; nodes therefore never overlap compute within one process. Hold it
#: only around compute, never across network waits.
COMPUTE_LOCK = threading.RLock()


def warm_up_torch() -> float:
    """Pay torch's one-time costs (the first optimizer step imports its compiler stack, seconds on a
    small CPU) at node start, so round timings measure the work; returns the seconds spent."""
    t0 = time.perf_counter()
    with COMPUTE_LOCK:
        p = torch.nn.Parameter(torch.zeros(4))
        opt = torch.optim.AdamW([p], foreach=False)
        (p * p).sum().backward()
        opt.step()
    return time.perf_counter() - t0


#: Environment variables that cap the instruction sets of torch's CPU kernels (ATen, MKL, oneDNN).
ISA_ENV = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")


def compute_platform() -> str:
    """The kernels this process computes with, for its start-up log line: torch's version, the CPU
    instruction set ATen dispatches to, and any MKL/oneDNN caps set in the environment."""
    caps = " ".join(f"{k}={os.environ[k]}" for k in ISA_ENV[1:] if os.environ.get(k))
    return f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}" + (
        f", {caps}" if caps else ""
    )


class RunSpecError(ProtocolError):
    """A run specification is missing or invalid."""


class CorpusDigestError(RunSpecError):
    """The corpus on disk does not hash to the run file's pinned ``corpus_digest``."""


class TokenizerDigestError(RunSpecError):
    """The tokenizer file on disk does not hash to the run file's pinned ``tokenizer.digest``."""


@dataclass(frozen=True)
class TokenizerSpec:
    """A BPE tokenizer file pinned by the run file (absent: byte-level tokens)."""

    file: str
    """Path of the ``tokenizers`` JSON file (``tessera runspec tokenizer`` writes it); a relative path is
    read from the run file's folder, like ``corpus`` (:meth:`RunSpec.resolve`)."""
    digest: str
    """SHA-256 (hex) of the file's bytes."""
    vocab_size: int
    """The tokenizer's vocabulary; the model's ``vocab_size`` must equal it."""
    kind: str = "bpe"
    """Only ``bpe``."""

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"kind": self.kind, "file": self.file, "digest": self.digest, "vocab_size": self.vocab_size}

    @classmethod
    def from_json(cls, doc: Any) -> TokenizerSpec:
        """Parse; :class:`RunSpecError` on a bad field."""
        if not isinstance(doc, dict) or set(doc) != {"kind", "file", "digest", "vocab_size"}:
            raise RunSpecError("tokenizer must be an object with exactly kind, file, digest and vocab_size")
        if doc["kind"] != "bpe":
            raise RunSpecError(f"unknown tokenizer kind {doc['kind']!r} (only 'bpe'; omit it for bytes)")
        if not isinstance(doc["file"], str) or not doc["file"]:
            raise RunSpecError("tokenizer.file must be a non-empty path")
        vocab = doc["vocab_size"]
        if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 1:
            raise RunSpecError(f"tokenizer.vocab_size must be a positive integer, not {vocab!r}")
        return cls(file=doc["file"], digest=_hex_digest(doc["digest"], "tokenizer.digest"), vocab_size=vocab)


def _codec_json(codec: CodecConfig) -> dict[str, Any]:
    """The codec's JSON form; the default index coding is left out, so run files written before it
    existed keep their digest."""
    doc = to_dict(codec)
    if doc["index"] == "packed":
        del doc["index"]
    return doc


#: Rounds a DiPaCo assignment is kept in the recipe (``RunSpec.epoch_rounds``): epochs of 8 measured -3.6% /
#: -4.4% held-out loss on top of the recipe, seeds 0 / 1 (``benchmarks.quality_pareto.EPOCH_ROUNDS``,
#: docs/decisions/training-recipe.md); MoE and dense keep 1 (epochs cost MoE 3.3%).
DIPACO_EPOCH_ROUNDS = 8


def recipe_epoch_rounds(mode: str) -> int:
    """The recipe's ``epoch_rounds`` for a model mode: :data:`DIPACO_EPOCH_ROUNDS` in DiPaCo, else 1."""
    return DIPACO_EPOCH_ROUNDS if mode == "dipaco" else 1


def _epoch_rounds_field(value: Any) -> Any:
    """A run file's ``epoch_rounds`` as written: 0 is not a value a file may hold (it is the in-memory
    "take the recipe's"), so it is refused rather than read as the recipe."""
    if value == 0 and isinstance(value, int) and not isinstance(value, bool):
        raise RunSpecError("epoch_rounds must be a positive integer, not 0")
    return value


def _finite_number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


@dataclass(frozen=True)
class RunSpec:
    """Everything that fixes a run's math."""

    model: ModelConfig = field(default_factory=ModelConfig)
    """The model's shape (the ``tiny`` preset's by default)."""
    inner: InnerConfig = field(default_factory=InnerConfig.recipe)
    """The inner loop; the default is the recipe's (``InnerConfig.recipe``)."""
    outer: OuterConfig = field(default_factory=OuterConfig.recipe)
    """The outer step; the default is the recipe's (``OuterConfig.recipe``)."""
    codec: CodecConfig = field(default_factory=CodecConfig.recipe)
    """The update codec; the default is the recipe's (``CodecConfig.recipe``)."""
    experts_per_miner: int | None = None
    """MoE experts per miner per layer (None: the model's top_k)."""
    corpus: str = "bundled"
    """``bundled`` or a path to a ``.txt``/``.jsonl`` file or a folder of them (relative: to the run
    file's folder, :meth:`resolve`)."""
    genesis_seed: int = 0
    """Seed of theta_0 (``training.model.build_model``)."""
    corpus_digest: str | None = None
    """Pinned ``training.corpus.content_digest`` of the corpus (None: not pinned; omitted from JSON)."""
    tokenizer: TokenizerSpec | None = None
    """A pinned BPE tokenizer file (None: byte-level tokens; omitted from JSON)."""
    merge: MergePolicy = field(default_factory=MergePolicy)
    """How validators merge accepted updates, which miners follow to rebuild theta_{r+1} instead of
    fetching it (omitted from JSON when the default, so older run files keep their digest)."""
    epoch_rounds: int = 0
    """Rounds an assignment is kept (``protocol.rounds.epochs``): above 1 only in DiPaCo mode, where epochs
    of 8 measured -3.6%/-4.4% held-out loss (it cost MoE 3.3%); omitted from JSON when 1. 0 (the default)
    takes the recipe's for the mode (:func:`recipe_epoch_rounds`); a run file without the field means 1."""
    audits: AuditSpec | None = field(default_factory=AuditSpec)
    """The audit section: committee size, vesting, slash and the run's size, from which the deployment
    computes the audit rate q (``protocol.rounds.auditspec``); the default is the recipe's committees of
    one. None (a run file without the section): ``tessera contracts deploy`` refuses it unless told to
    audit every update by every validator (``--audit-every-update``)."""
    base_dir: Path | None = field(default=None, compare=False, repr=False)
    """The folder of the run file this spec was loaded from (:meth:`load` sets it), against which relative
    ``corpus`` and ``tokenizer.file`` paths resolve, so a node started from any directory reads the same
    files; None (a spec built in memory): the working directory. Not part of the JSON or the digest."""

    def resolve(self, path: str) -> Path:
        """``path`` from the run file: as is when absolute, else under :attr:`base_dir`."""
        p = Path(path)
        return p if p.is_absolute() or self.base_dir is None else self.base_dir / p

    def __post_init__(self) -> None:
        m = self.merge
        if m.method not in MERGE_METHODS:
            raise RunSpecError(f"merge.method must be one of {MERGE_METHODS}, not {m.method!r}")
        if not _finite_number(m.clip_factor) or m.clip_factor <= 0:
            raise RunSpecError(f"merge.clip_factor must be a positive number, not {m.clip_factor!r}")
        if not _finite_number(m.trim) or not 0 <= m.trim < 0.5:
            raise RunSpecError(f"merge.trim must be a number in [0, 0.5), not {m.trim!r}")
        if self.epoch_rounds == 0 and not isinstance(self.epoch_rounds, bool):
            object.__setattr__(self, "epoch_rounds", recipe_epoch_rounds(self.model.mode))
        e = self.epoch_rounds
        if not isinstance(e, int) or isinstance(e, bool) or e < 1 or (e > 1 and self.model.mode != "dipaco"):
            raise RunSpecError(
                f"epoch_rounds must be a positive integer, above 1 only in dipaco mode, not {e!r}"
            )
        if self.tokenizer is not None and self.model.vocab_size != self.tokenizer.vocab_size:
            raise RunSpecError(
                f"model.vocab_size {self.model.vocab_size} must equal tokenizer.vocab_size "
                f"{self.tokenizer.vocab_size}"
            )

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return (
            {
                "model": to_dict(self.model),
                "inner": to_dict(self.inner),
                "outer": to_dict(self.outer),
                "codec": _codec_json(self.codec),
                "experts_per_miner": self.experts_per_miner,
                "corpus": self.corpus,
                "genesis_seed": self.genesis_seed,
            }
            | ({} if self.corpus_digest is None else {"corpus_digest": self.corpus_digest})
            | ({} if self.tokenizer is None else {"tokenizer": self.tokenizer.to_json()})
            | ({} if self.merge == MergePolicy() else {"merge": to_dict(self.merge)})
            | ({} if self.audits is None else {"audits": self.audits.to_json()})
            | ({} if self.epoch_rounds == 1 else {"epoch_rounds": self.epoch_rounds})
        )

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RunSpec:
        """Parse; :class:`RunSpecError` on unknown or invalid fields."""
        if not isinstance(doc, dict):
            raise RunSpecError(f"run spec must be a JSON object, not {type(doc).__name__}")
        try:
            extra = set(doc) - {
                "model",
                "inner",
                "outer",
                "codec",
                "experts_per_miner",
                "corpus",
                "genesis_seed",
                "corpus_digest",
                "tokenizer",
                "merge",
                "audits",
                "epoch_rounds",
            }
            if extra:
                raise RunSpecError(f"unknown run spec fields {sorted(extra)}")
            missing = [k for k in ("model", "inner", "outer", "codec") if not isinstance(doc.get(k), dict)]
            if missing:
                raise RunSpecError(f"run spec needs the sections {missing} as JSON objects")
            return cls(
                model=from_dict(ModelConfig, doc["model"]),
                inner=from_dict(InnerConfig, doc["inner"]),
                outer=from_dict(OuterConfig, doc["outer"]),
                codec=from_dict(CodecConfig, doc["codec"]),
                experts_per_miner=doc.get("experts_per_miner"),
                corpus=str(doc.get("corpus", "bundled")),
                genesis_seed=int(doc.get("genesis_seed", 0)),
                corpus_digest=_corpus_digest(doc.get("corpus_digest")),
                tokenizer=None if doc.get("tokenizer") is None else TokenizerSpec.from_json(doc["tokenizer"]),
                merge=from_dict(MergePolicy, doc.get("merge", {})),
                audits=None if doc.get("audits") is None else AuditSpec.from_json(doc["audits"]),
                epoch_rounds=_epoch_rounds_field(doc.get("epoch_rounds", 1)),
            )
        except AuditSpecError as exc:
            raise RunSpecError(f"invalid run spec: {exc}") from exc
        except (TrainingError, TypeError, ValueError) as exc:
            raise RunSpecError(f"invalid run spec: {exc}") from exc

    def digest(self) -> str:
        """SHA-256 over the canonical JSON (floats as their repr)."""
        return hashlib.sha256(
            dumps_canonical(json.loads(json.dumps(self.to_json()), parse_float=repr))
        ).hexdigest()

    def save(self, path: str | Path) -> None:
        """Write as JSON."""
        Path(path).write_text(json.dumps(self.to_json(), indent=1, sort_keys=True))

    @classmethod
    def load(cls, path: str | Path) -> RunSpec:
        """Read a ``run.json``; a pinned tokenizer is loaded and checked against its digest here, so a
        node with the wrong tokenizer file refuses to start (:class:`TokenizerDigestError`)."""
        try:
            doc = read_json_file(path)
        except JSONFileError as exc:
            raise RunSpecError(f"cannot read run spec {path}: {exc}") from exc
        spec = replace(cls.from_json(doc), base_dir=Path(path).parent)
        spec.load_tokenizer()
        return spec

    def load_tokenizer(self) -> Any:
        """The run's tokenizer (``training.tokenizer``): byte-level, or the pinned BPE file checked against
        ``tokenizer.digest`` (:class:`TokenizerDigestError`) and ``tokenizer.vocab_size``."""
        if self.tokenizer is None:
            return ByteTokenizer()
        path = self.resolve(self.tokenizer.file)
        try:
            size = path.stat().st_size
            if size > MAX_TOKENIZER_BYTES:
                raise RunSpecError(f"tokenizer file {path}: {size} bytes exceeds {MAX_TOKENIZER_BYTES}")
            data = path.read_bytes()
        except OSError as exc:
            raise RunSpecError(f"cannot read tokenizer file {path}: {exc}") from exc
        found = tokenizer_digest(data)
        if found != self.tokenizer.digest:
            raise TokenizerDigestError(
                f"tokenizer file {path} hashes to {found} but the run file pins tokenizer.digest "
                f"{self.tokenizer.digest}"
            )
        cached = _TOKENIZERS.get(found)
        if cached is not None:
            return cached
        try:
            tok = BPETokenizer(data)
        except TrainingError as exc:
            raise RunSpecError(f"tokenizer file {path}: {exc}") from exc
        if tok.vocab_size != self.tokenizer.vocab_size:
            raise RunSpecError(
                f"tokenizer file {path} has {tok.vocab_size} tokens, the run file says {self.tokenizer.vocab_size}"
            )
        _TOKENIZERS[found] = tok
        return tok

    def genesis_params(self) -> dict[str, Tensor]:
        """theta_0."""
        return param_state(build_model(self.model, seed=self.genesis_seed))

    def genesis_digest(self) -> str:
        """``0x`` + the digest of theta_0: the genesis checkpoint the contracts must be deployed with."""
        return tensors_digest({f"param/{k}": v for k, v in self.genesis_params().items()})

    def load_corpus(self) -> Any:
        """The run's corpus (``training.corpus.Corpus``)."""
        if self.corpus == "bundled":
            corpus = load_bundled_corpus()
            found = content_digest(corpus.documents)
        else:
            try:
                corpus = load_corpus_path(self.resolve(self.corpus))
            except OSError as exc:
                raise RunSpecError(f"cannot read corpus {self.corpus}: {exc}") from exc
            found = corpus.digest
        if self.corpus_digest is not None and found != self.corpus_digest:
            raise CorpusDigestError(
                f"corpus {self.corpus} hashes to {found} but the run file pins corpus_digest "
                f"{self.corpus_digest}"
            )
        if self.tokenizer is not None:
            corpus = replace(corpus, tokenizer=self.load_tokenizer())
        return corpus


#: Tokenizers already built, by the digest of their file (the file is read and hashed on every load).
_TOKENIZERS: dict[str, Any] = {}


def _corpus_digest(value: Any) -> str | None:
    if value is None:
        return None
    return _hex_digest(value, "corpus_digest")


def _hex_digest(value: Any, name: str) -> str:
    if not isinstance(value, str) or len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise RunSpecError(f"{name} must be 64 lowercase hex digits, not {value!r}")
    return value
