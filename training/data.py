"""Byte-level tokens, the held-out split, the DiPaCo document router and each miner's batches.

Everything here is a pure function of its arguments:

- tokenizer: a token is a byte (vocabulary 256) unless the corpus carries a BPE tokenizer
  (``training.tokenizer``); documents are joined with the separator token :data:`DOC_SEP` (id 0: byte 0,
  which text never contains, or the BPE tokenizer's ``<|doc|>``).
- held-out split: a document is held out when ``sha256("tessera.heldout" || id)`` read as a big-endian
  integer, mod 10,000, is below ``heldout_fraction * 10,000``; it never depends on document order.
- DiPaCo router (:class:`DocumentRouter`): a documented simpler stand-in for DiPaCo's k-means router.
  Its one feature is the share of a document's bytes that are neither ASCII letters nor whitespace
  (punctuation, digits, markup: prose scores low, code and tables high). Training documents are sorted by
  (feature, id) and cut into P groups of equal bytes; the cut points are the router, so any document
  (held-out or new) routes by comparing its feature with them. Group g goes to ``all_paths(cfg)[g]``:
  neighbouring groups share their first-level module, which is what makes the levels meaningful.
- batches: window offsets come from SHA-256 in counter mode over (round seed, miner, shard), so any
  implementation can recompute them without a particular PRNG.
"""

from __future__ import annotations

import bisect
import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from training.assignment import Assignment
from training.config import ModelConfig
from training.corpus import Corpus, Document
from training.errors import DataError
from training.model import all_paths
from training.tokenizer import Tokenizer

DOC_SEP = 0
"""Token between documents."""
HELDOUT_FRACTION = 0.1
"""Default share of documents held out for evaluation."""


def encode(text: str) -> list[int]:
    """Byte-level tokens of ``text`` (UTF-8)."""
    return list(text.encode())


def decode(tokens: Sequence[int]) -> str:
    """Text of byte-level tokens (invalid UTF-8 is replaced)."""
    return bytes(int(t) for t in tokens).decode("utf-8", errors="replace")


def is_heldout(doc_id: str, fraction: float = HELDOUT_FRACTION) -> bool:
    """Whether document ``doc_id`` belongs to the held-out split."""
    h = int.from_bytes(hashlib.sha256(b"tessera.heldout" + doc_id.encode()).digest(), "big")
    return h % 10_000 < int(round(fraction * 10_000))


_LETTERS_AND_SPACE = b" \t\n\rabcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def router_feature(data: bytes) -> float:
    """Share of bytes that are neither ASCII letters nor whitespace."""
    if not data:
        return 0.0
    return len(data.translate(None, _LETTERS_AND_SPACE)) / len(data)


@dataclass(frozen=True)
class DocumentRouter:
    """Routes a document to a group (a DiPaCo path index) by its feature and the fitted cut points."""

    cuts: tuple[float, ...]
    """Ascending feature thresholds; ``len(cuts) + 1`` groups."""

    def route(self, data: bytes) -> int:
        """Group index of a document's bytes."""
        return bisect.bisect_right(self.cuts, router_feature(data))


def fit_router(docs: Sequence[Document], n_groups: int) -> DocumentRouter:
    """Cut points that split ``docs`` into ``n_groups`` groups of (as near as documents allow) equal bytes."""
    if n_groups < 1:
        raise DataError("n_groups must be positive")
    scored = sorted((router_feature(d.data), d.id, len(d.data)) for d in docs)
    total = sum(n for _, _, n in scored)
    cuts: list[float] = []
    acc = 0
    for f, _, n in scored:
        if len(cuts) == n_groups - 1:
            break
        acc += n
        if acc >= total * (len(cuts) + 1) / n_groups:
            cuts.append(f)
    while len(cuts) < n_groups - 1:
        cuts.append(float("inf"))
    return DocumentRouter(tuple(cuts))


def token_stream(docs: Sequence[Document], tokenizer: Tokenizer | None = None) -> Tensor:
    """The documents' bytes joined by :data:`DOC_SEP`, as a ``uint8`` tensor; with a (BPE) ``tokenizer``,
    the documents' token ids joined by :data:`DOC_SEP` (its id 0), as an ``int32`` tensor."""
    if tokenizer is not None and tokenizer.kind != "bytes":
        ids: list[int] = []
        for doc_ids in tokenizer.encode_batch([d.data.decode("utf-8", errors="replace") for d in docs]):
            ids += doc_ids
            ids.append(DOC_SEP)
        return torch.tensor(ids, dtype=torch.int32)
    buf = bytearray()
    for d in docs:
        buf += d.data
        buf.append(DOC_SEP)
    return torch.frombuffer(bytearray(buf), dtype=torch.uint8) if buf else torch.zeros(0, dtype=torch.uint8)


@dataclass(frozen=True)
class Dataset:
    """A corpus prepared for a model config: train/held-out streams, per path in ``dipaco`` mode."""

    corpus_digest: str
    """SHA-256 (hex) of the corpus bytes."""
    train: Tensor
    """All training documents' tokens (``uint8``; ``int32`` with a BPE tokenizer)."""
    heldout: Tensor
    """All held-out documents' tokens (``uint8``; ``int32`` with a BPE tokenizer)."""
    router: DocumentRouter | None
    """The document router (``dipaco`` mode)."""
    path_train: tuple[Tensor, ...]
    """Training tokens routed to each path of ``all_paths(cfg)`` (``dipaco`` mode), else empty."""
    path_heldout: tuple[Tensor, ...]
    """Held-out tokens routed to each path (``dipaco`` mode), else empty."""


def prepare(corpus: Corpus, cfg: ModelConfig, heldout_fraction: float = HELDOUT_FRACTION) -> Dataset:
    """Split and (in ``dipaco`` mode) route a corpus, tokenized by ``corpus.tokenizer`` (None: bytes).
    Pure; the same inputs give equal tensors. Routing reads documents' bytes, whatever the tokenizer."""
    tok = corpus.tokenizer
    if tok is not None and cfg.vocab_size < tok.vocab_size:
        raise DataError(f"the model's vocab_size {cfg.vocab_size} < the tokenizer's {tok.vocab_size}")
    train_docs = [d for d in corpus.documents if not is_heldout(d.id, heldout_fraction)]
    held_docs = [d for d in corpus.documents if is_heldout(d.id, heldout_fraction)]
    if not train_docs or not held_docs:
        raise DataError("the corpus is too small for a train/held-out split")
    router = None
    path_train: tuple[Tensor, ...] = ()
    path_held: tuple[Tensor, ...] = ()
    if cfg.mode == "dipaco":
        n = len(all_paths(cfg))
        router = fit_router(train_docs, n)
        path_train = tuple(
            token_stream([d for d in train_docs if router.route(d.data) == g], tok) for g in range(n)
        )
        path_held = tuple(
            token_stream([d for d in held_docs if router.route(d.data) == g], tok) for g in range(n)
        )
    return Dataset(
        corpus.digest,
        token_stream(train_docs, tok),
        token_stream(held_docs, tok),
        router,
        path_train,
        path_held,
    )


def shard_stream(ds: Dataset, assignment: Assignment) -> Tensor:
    """The tokens a miner draws from: its path's documents (``dipaco``) or its slice of the train stream."""
    if assignment.path is not None:
        return ds.path_train[assignment.shard]
    n, i = assignment.n_shards, assignment.shard
    length = ds.train.numel()
    return ds.train[length * i // n : length * (i + 1) // n]


def window_offsets(key: bytes, count: int, high: int) -> list[int]:
    """``count`` offsets in ``[0, high)`` from SHA-256 in counter mode over ``key`` (modulo bias < 2^-40)."""
    if high <= 0:
        raise DataError("the stream is shorter than one window")
    out: list[int] = []
    counter = 0
    while len(out) < count:
        block = hashlib.sha256(key + struct.pack("<Q", counter)).digest()
        out += [v % high for v in struct.unpack("<4Q", block)]
        counter += 1
    return out[:count]


def windows(stream: Tensor, offsets: Sequence[int], length: int) -> Tensor:
    """Stack ``stream[o : o + length]`` for each offset as ``int64``."""
    idx = torch.tensor(list(offsets), dtype=torch.int64).unsqueeze(1) + torch.arange(length)
    return stream.to(torch.int64)[idx]


def batch_offsets(
    ds: Dataset, seed: bytes, assignment: Assignment, steps: int, batch_size: int, seq_len: int
) -> list[int]:
    """Offsets, in the miner's shard stream, of the windows of :func:`miner_batches` (step-major)."""
    stream = shard_stream(ds, assignment)
    key = b"tessera.batches\0" + seed + assignment.miner.encode() + struct.pack("<I", assignment.shard)
    return window_offsets(key, steps * batch_size, stream.numel() - seq_len)


def miner_batches(
    ds: Dataset, seed: bytes, assignment: Assignment, steps: int, batch_size: int, seq_len: int
) -> Tensor:
    """The miner's token batches for a round: ``int64 [steps, batch_size, seq_len + 1]``."""
    stream = shard_stream(ds, assignment)
    offs = batch_offsets(ds, seed, assignment, steps, batch_size, seq_len)
    return windows(stream, offs, seq_len + 1).view(steps, batch_size, seq_len + 1)


SCORING_ATTEMPTS = 64
"""Candidate windows drawn per needed scoring window before :func:`scoring_batches` gives up."""


def scoring_offsets(
    ds: Dataset,
    round_seed: bytes,
    assignment: Assignment,
    trained: Sequence[int],
    count: int,
    seq_len: int,
) -> list[int]:
    """``count`` offsets of windows of the miner's shard that overlap none of the ``trained`` windows,
    drawn with ``round_seed`` (see :func:`scoring_batches`)."""
    high = shard_stream(ds, assignment).numel() - seq_len
    taken = sorted(trained)
    key = b"tessera.score\0" + round_seed + assignment.miner.encode() + struct.pack("<I", assignment.shard)
    picked: list[int] = []
    for o in window_offsets(key, count * SCORING_ATTEMPTS, high):
        i = bisect.bisect_left(taken, o - seq_len)  # the first trained window that could overlap [o, o + L]
        if i < len(taken) and taken[i] <= o + seq_len:
            continue
        picked.append(o)
        if len(picked) == count:
            return picked
    raise DataError(f"only {len(picked)} of {count} scoring windows avoid the trained ones ({high} offsets)")


def scoring_batches(
    ds: Dataset,
    round_seed: bytes,
    assignment: Assignment,
    trained: Sequence[int],
    count: int,
    batch_size: int,
    seq_len: int,
) -> Tensor:
    """Windows of the miner's shard to score its update on: ``int64 [count, batch_size, seq_len + 1]``.

    Drawn with ``round_seed``, the seed the chain fixes only after the update commits close, so a miner
    cannot know them when it commits (it could overfit batches it knows: measured, a one-step
    update on the miner's own batch 0 scoring 10-30x an honest one). A candidate window that overlaps one
    of the ``trained`` windows (the offsets of :func:`batch_offsets`) is skipped, so the score measures how
    the update generalises within the shard, not what it memorised.
    """
    offs = scoring_offsets(ds, round_seed, assignment, trained, count * batch_size, seq_len)
    stream = shard_stream(ds, assignment)
    return windows(stream, offs, seq_len + 1).view(count, batch_size, seq_len + 1)


def eval_windows(stream: Tensor, seq_len: int, max_windows: int) -> Tensor:
    """Up to ``max_windows`` evenly spaced, non-overlapping windows ``[n, seq_len + 1]`` of a stream."""
    n = (stream.numel() - 1) // (seq_len + 1)
    if n < 1:
        raise DataError("the held-out stream is shorter than one window")
    take = min(n, max_windows)
    offs = [(i * n // take) * (seq_len + 1) for i in range(take)]
    return windows(stream, offs, seq_len + 1)
