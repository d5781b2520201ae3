"""The bundled corpus and parsers for users' own text: the training package's only file read.

The bundled corpus, ``training/corpus/tessera-en-v1.jsonl`` (542 documents, 1.42 MB of English), was
built by ``python -m benchmarks.build_corpus`` from text that ships with Debian and CPython, with no
download: CPython 3.11's ``pydoc_data.topics`` (PSF licence), the licence texts of
``/usr/share/common-licenses`` (each verbatim-redistributable) and Vim 9.0's user manual (Vim licence).
Its SHA-256 is pinned below and checked on every load. Users pass their own files as bytes to
:func:`parse_corpus` (the CLI reads them), as plain text (documents separated by blank lines twice, i.e.
``\\n\\n\\n``, or one document per file) or JSONL (``{"text": ...}`` per line, optional ``"id"``).
Run files name a file or folder on disk, read by :func:`load_corpus_path` and identified by
:func:`content_digest` (see ``docs/training.md``, "Your own corpus").
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from training.errors import DataError

if TYPE_CHECKING:
    from training.tokenizer import Tokenizer

BUNDLED_FILE = "tessera-en-v1.jsonl"
BUNDLED_SHA256 = "c8fced74f7c34cd58303a6ead6b2bf08285a58b5cb829f86c9272dd68460be61"

#: Files a corpus folder contributes; others are ignored.
CORPUS_SUFFIXES = (".txt", ".jsonl")
#: Largest corpus file read (checked with ``stat`` before reading): 64 MiB.
MAX_FILE_BYTES = 64 * 1024 * 1024
#: Largest corpus in total over all its files: 1 GiB.
MAX_CORPUS_BYTES = 1024 * 1024 * 1024
#: Plain-text document separator: two blank lines.
TEXT_SEPARATOR = "\n\n\n"


class CorpusError(DataError):
    """A user corpus on disk is unusable: missing path, bad bytes, bad record, too large or empty."""


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
    tokenizer: Tokenizer | None = field(default=None, compare=False, repr=False)
    """How ``training.data.prepare`` turns documents into tokens: None is byte-level; a run file with a
    BPE tokenizer attaches it (``protocol.runspec.RunSpec.load_corpus``)."""

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


def content_digest(documents: Iterable[Document]) -> str:
    """SHA-256 of the canonical serialisation of ``documents``: a version tag, then per document its id
    and its bytes, each prefixed by its length (8 bytes, big-endian). Independent of where files live."""
    h = hashlib.sha256(b"tessera.corpus.v1\n")
    for d in documents:
        ident = d.id.encode()
        h.update(struct.pack(">Q", len(ident)) + ident + struct.pack(">Q", len(d.data)) + d.data)
    return h.hexdigest()


def _decode(data: bytes, rel: str) -> str:
    try:
        return data.decode("utf-8", errors="strict")
    except UnicodeDecodeError as exc:
        raise CorpusError(f"{rel}: not UTF-8 at byte offset {exc.start}") from exc


def _file_documents(path: Path, rel: str) -> list[Document]:
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise CorpusError(f"{rel}: {size} bytes exceeds the {MAX_FILE_BYTES}-byte cap per corpus file")
    text = _decode(path.read_bytes(), rel)
    docs: list[Document] = []
    if path.suffix == ".txt":
        for i, part in enumerate(text.split(TEXT_SEPARATOR)):
            if part.strip():
                docs.append(Document(f"{rel}#{i}", part.encode()))
        return docs
    for i, line in enumerate(text.split("\n")):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as exc:
            raise CorpusError(f"{rel} line {i + 1}: not JSON ({exc})") from exc
        if not isinstance(rec, dict) or not isinstance(rec.get("text"), str):
            raise CorpusError(f"{rel} line {i + 1}: not a JSON object with a string 'text' field")
        if rec["text"].strip():
            docs.append(Document(f"{rel}#{i}", rec["text"].encode()))
    return docs


def _corpus_files(root: Path) -> list[tuple[Path, str]]:
    """(path, relative posix path) of the corpus files under folder ``root``, sorted by relative path;
    hidden entries are skipped and symlinks are not followed."""
    found: list[tuple[Path, str]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            p = Path(dirpath) / name
            if name.startswith(".") or p.is_symlink() or not p.is_file() or p.suffix not in CORPUS_SUFFIXES:
                continue
            found.append((p, p.relative_to(root).as_posix()))
    return sorted(found, key=lambda t: t[1])


def load_corpus_path(path: str | Path) -> Corpus:
    """A corpus from a ``.txt`` or ``.jsonl`` file or a folder of them; its digest is
    :func:`content_digest`. Raises :class:`CorpusError`.

    ``.txt``: UTF-8, documents separated by two blank lines (:data:`TEXT_SEPARATOR`; a file without one
    is one document). ``.jsonl``: one JSON object per line with a string ``text``; blank lines skipped.
    Documents that are empty or only whitespace are skipped. Ids are ``RELPATH#INDEX`` (the file name
    for a single file), so the held-out split does not depend on where the corpus lives.
    """
    root = Path(path)
    if not root.exists():
        raise CorpusError(f"corpus path {root} does not exist")
    if root.is_dir():
        files = _corpus_files(root)
    elif root.suffix in CORPUS_SUFFIXES:
        files = [(root, root.name)]
    else:
        raise CorpusError(f"corpus file {root} must end in one of {CORPUS_SUFFIXES}")
    total = 0
    for p, rel in files:
        total += p.stat().st_size
        if total > MAX_CORPUS_BYTES:
            raise CorpusError(f"corpus {root} exceeds the {MAX_CORPUS_BYTES}-byte cap at {rel}")
    docs = [d for p, rel in files for d in _file_documents(p, rel)]
    if not docs:
        raise CorpusError(f"corpus {root} has no documents (files read: {len(files)})")
    return Corpus(tuple(docs), content_digest(docs))
