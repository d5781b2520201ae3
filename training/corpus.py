"""The bundled corpus and parsers for users' own text: the training package's only file read.

The bundled corpus, ``training/corpus/tessera-en-v1.jsonl`` (542 documents, 1.42 MB of English), was
built by ``python -m benchmarks.build_corpus`` from text that ships with Debian and CPython, with no
download: CPython 3.11's ``pydoc_data.topics`` (PSF licence), the licence texts of
``/usr/share/common-licenses`` (each verbatim-redistributable) and Vim 9.0's user manual (Vim licence).
Its SHA-256 is pinned below and checked on every load. Users pass their own files as bytes to
:func:`parse_corpus` (the CLI reads them), as plain text (documents separated by blank lines twice, i.e.
``\\n\\n\\n``, or one document per file) or JSONL (``{"text": ...}`` per line, optional ``"id"``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from typing import Literal

from training.errors import DataError

BUNDLED_FILE = "tessera-en-v1.jsonl"
BUNDLED_SHA256 = "c8fced74f7c34cd58303a6ead6b2bf08285a58b5cb829f86c9272dd68460be61"


@dataclass(frozen=True)
class Document:
    """One document: a stable id and its UTF-8 bytes (the byte-level tokens)."""

    id: str
    data: bytes


@dataclass(frozen=True)
class Corpus:
    """An ordered tuple of documents identified by the SHA-256 of the bytes they were parsed from."""

    documents: tuple[Document, ...]
    digest: str

    @property
    def n_bytes(self) -> int:
        """Total bytes (tokens) over all documents."""
        return sum(len(d.data) for d in self.documents)


def parse_corpus(data: bytes, fmt: Literal["jsonl", "text"] = "jsonl", name: str = "user") -> Corpus:
    """Parse corpus bytes; ``name`` prefixes generated document ids. Raises :class:`DataError`."""
    digest = hashlib.sha256(data).hexdigest()
    docs: list[Document] = []
    if fmt == "jsonl":
        for i, line in enumerate(data.decode("utf-8", errors="strict").splitlines()):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                text = rec["text"]
            except (ValueError, KeyError, TypeError) as exc:
                raise DataError(f"line {i + 1}: not a JSON object with a 'text' field") from exc
            if not isinstance(text, str):
                raise DataError(f"line {i + 1}: 'text' is not a string")
            docs.append(Document(str(rec.get("id", f"{name}#{i}")), text.encode()))
    elif fmt == "text":
        text = data.decode("utf-8", errors="replace")
        parts = [p for p in text.split("\n\n\n") if p.strip()]
        docs = [Document(f"{name}#{i}", p.encode()) for i, p in enumerate(parts)]
    else:
        raise DataError(f"unknown corpus format {fmt!r}")
    if not docs:
        raise DataError("the corpus has no documents")
    return Corpus(tuple(docs), digest)


def load_bundled_corpus() -> Corpus:
    """The corpus shipped with Tessera, checked against :data:`BUNDLED_SHA256`."""
    data = resources.files("training").joinpath("corpus", BUNDLED_FILE).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != BUNDLED_SHA256:
        raise DataError(f"bundled corpus digest {digest} != pinned {BUNDLED_SHA256}")
    return parse_corpus(data, "jsonl", "bundled")
