"""Tokenizers: byte-level (the default) and byte-level BPE trained on a run's corpus.

Both map text to token ids and back, and both reserve id 0 (:data:`DOC_SEP_ID`) for the separator
between documents: byte 0 for the byte-level tokenizer (text never contains it), the special token
:data:`DOC_TOKEN` for BPE (the trainer gives special tokens the first ids).

A BPE tokenizer is the HuggingFace ``tokenizers`` library's byte-level BPE (ByteLevel pre-tokenizer and
decoder, the 256 byte symbols as its initial alphabet, so every UTF-8 text encodes without an unknown
token). This module does no file I/O: :func:`train_bpe` returns the tokenizer's JSON bytes and
:class:`BPETokenizer` is built from them; ``protocol.runspec`` reads the file a run file names and checks
it against the pinned SHA-256 (:func:`tokenizer_digest`). Training is deterministic: the same texts and
settings give the same bytes (measured: the same SHA-256 with 1 and 2 threads and any ``PYTHONHASHSEED``,
``tests/training/test_tokenizer.py``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from training.errors import DataError

#: The id between documents in every token stream.
DOC_SEP_ID = 0
#: The BPE tokenizer's document separator (a special token, id 0).
DOC_TOKEN = "<|doc|>"
#: Smallest BPE vocabulary: the separator and the 256 byte symbols.
MIN_BPE_VOCAB = 257
#: Largest BPE vocabulary accepted (ids are stored as int32 in token streams).
MAX_BPE_VOCAB = 1 << 18
#: Largest tokenizer file accepted: 64 MiB.
MAX_TOKENIZER_BYTES = 64 * 1024 * 1024


class TokenizerError(DataError):
    """A tokenizer file is not a usable Tessera BPE tokenizer, or its settings are out of range."""


class Tokenizer(Protocol):
    """What the data pipeline and sampling need of a tokenizer."""

    kind: str
    vocab_size: int

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""
        ...

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids."""
        ...


class ByteTokenizer:
    """A token is a UTF-8 byte (vocabulary 256); decoding replaces invalid UTF-8."""

    kind = "bytes"
    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        """The UTF-8 bytes of ``text``."""
        return list(text.encode())

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """The UTF-8 bytes of each text."""
        return [list(t.encode()) for t in texts]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of byte tokens."""
        return bytes(int(t) for t in ids).decode("utf-8", errors="replace")


class BPETokenizer:
    """A byte-level BPE tokenizer built from the JSON bytes :func:`train_bpe` wrote."""

    kind = "bpe"

    def __init__(self, data: bytes) -> None:
        if len(data) > MAX_TOKENIZER_BYTES:
            raise TokenizerError(f"tokenizer file of {len(data)} bytes exceeds {MAX_TOKENIZER_BYTES}")
        try:
            self._tok: Any = HFTokenizer.from_str(data.decode("utf-8"))
        except Exception as exc:  # the library raises a bare Exception on bad JSON
            raise TokenizerError(f"not a tokenizers JSON file: {exc}") from exc
        if self._tok.token_to_id(DOC_TOKEN) != DOC_SEP_ID:
            raise TokenizerError(f"not a Tessera BPE tokenizer: {DOC_TOKEN!r} is not token {DOC_SEP_ID}")
        self.vocab_size = int(self._tok.get_vocab_size(with_added_tokens=True))
        self.digest = tokenizer_digest(data)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text (the library may use threads; the ids do not depend on them)."""
        return [list(e.ids) for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids (the separator is dropped)."""
        return str(self._tok.decode([int(i) for i in ids], skip_special_tokens=True))


def tokenizer_digest(data: bytes) -> str:
    """SHA-256 (hex) of a tokenizer file's bytes: what a run file pins."""
    return hashlib.sha256(data).hexdigest()


def train_bpe(texts: Iterable[str], vocab_size: int, min_frequency: int = 2) -> bytes:
    """The JSON bytes of a byte-level BPE tokenizer of ``vocab_size`` tokens trained on ``texts``.

    The vocabulary can come out smaller when the texts have fewer mergeable pairs; read
    :attr:`BPETokenizer.vocab_size` of the result.
    """
    if not MIN_BPE_VOCAB <= vocab_size <= MAX_BPE_VOCAB:
        raise TokenizerError(
            f"BPE vocabulary must lie in [{MIN_BPE_VOCAB}, {MAX_BPE_VOCAB}], not {vocab_size}"
        )
    if min_frequency < 1:
        raise TokenizerError("min_frequency must be positive")
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[DOC_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    return (tok.to_str(pretty=False) + "\n").encode()
