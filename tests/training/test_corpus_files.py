"""Corpora from files and folders (issue 17): deterministic content digest, typed errors, pinned digest."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from protocol.runspec import CorpusDigestError, RunSpec
from training import corpus as corpus_mod
from training.corpus import CorpusError, load_corpus_path
from training.errors import TrainingError


def _make(root: Path, order: list[str]) -> Path:
    files = {
        "a.txt": "first doc\n\n\nsecond doc\n",
        "sub/b.jsonl": json.dumps({"text": "json one"}) + "\n\n" + json.dumps({"text": "json two"}) + "\n",
        "sub/c.txt": "single document",
        "ignored.md": "not a corpus file",
        ".hidden.txt": "hidden",
    }
    for name in order:
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(files[name])
    return root


NAMES = ["a.txt", "sub/b.jsonl", "sub/c.txt", "ignored.md", ".hidden.txt"]


def test_folder_digest_independent_of_order_and_location(tmp_path: Path) -> None:
    c1 = load_corpus_path(_make(tmp_path / "one", NAMES))
    c2 = load_corpus_path(_make(tmp_path / "two", list(reversed(NAMES))))
    moved = tmp_path / "elsewhere" / "deep" / "copy"
    shutil.copytree(tmp_path / "one", moved)
    c3 = load_corpus_path(moved)
    assert c1 == c2 == c3
    assert [d.id for d in c1.documents] == [
        "a.txt#0",
        "a.txt#1",
        "sub/b.jsonl#0",
        "sub/b.jsonl#2",
        "sub/c.txt#0",
    ]
    assert [d.data for d in c1.documents][-1] == b"single document"


def test_digest_changes_with_one_byte(tmp_path: Path) -> None:
    root = _make(tmp_path / "c", NAMES)
    before = load_corpus_path(root).digest
    (root / "sub" / "c.txt").write_text("single documenT")
    assert load_corpus_path(root).digest != before


def test_symlinks_not_followed(tmp_path: Path) -> None:
    root = _make(tmp_path / "c", NAMES)
    before = load_corpus_path(root).digest
    (tmp_path / "outside.txt").write_text("outside")
    (root / "link.txt").symlink_to(tmp_path / "outside.txt")
    (root / "linkdir").symlink_to(tmp_path, target_is_directory=True)
    assert load_corpus_path(root).digest == before


def test_single_files(tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("  \n\n\nhello\n\n\n\n\n\n")
    c = load_corpus_path(tmp_path / "x.txt")
    assert [d.data for d in c.documents] == [b"hello"]  # whitespace-only documents are skipped
    lines = [{"text": "kept"}, {"text": ""}, {"text": " \n\t"}, {"text": "also kept"}]
    (tmp_path / "y.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    c = load_corpus_path(tmp_path / "y.jsonl")  # empty and whitespace-only records too; ids keep line numbers
    assert [(d.id, d.data) for d in c.documents] == [("y.jsonl#0", b"kept"), ("y.jsonl#3", b"also kept")]


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("bad.txt", b"ok\n\xff\xfe", "bad.txt: not UTF-8 at byte offset 3"),
        (
            "latin1.jsonl",
            b'{"text": "ok"}\n{"text": "caf\xe9"}\n',
            "latin1.jsonl: not UTF-8 at byte offset 28",
        ),
        ("bad.jsonl", b'{"text": 1}\n', "line 1: not a JSON object with a string 'text'"),
        ("bad2.jsonl", b'{"txt": "a"}\n', "line 1"),
        ("bad3.jsonl", b'["text"]\n', "line 1"),
        ("bad4.jsonl", b"{not json\n", "not JSON"),
        ("empty.txt", b" \n\n\n \n", "no documents"),
        ("bad.csv", b"a,b", "must end in"),
    ],
)
def test_bad_input(tmp_path: Path, name: str, content: bytes, match: str) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(CorpusError, match=match) as info:
        load_corpus_path(tmp_path / name)
    assert isinstance(info.value, TrainingError)


def test_missing_and_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="does not exist"):
        load_corpus_path(tmp_path / "nope")
    (tmp_path / "d").mkdir()
    with pytest.raises(CorpusError, match="no documents"):
        load_corpus_path(tmp_path / "d")


def test_size_cap_refused_before_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(corpus_mod, "MAX_FILE_BYTES", 10)
    (tmp_path / "big.txt").write_text("x" * 11)
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail("read before the size check"))
    with pytest.raises(CorpusError, match="exceeds the 10-byte cap"):
        load_corpus_path(tmp_path / "big.txt")


def test_run_file_pins_digest(tmp_path: Path) -> None:
    root = _make(tmp_path / "c", NAMES)
    digest = load_corpus_path(root).digest
    spec = RunSpec(corpus=str(root), corpus_digest=digest)
    spec.save(tmp_path / "run.json")
    loaded = RunSpec.load(tmp_path / "run.json")
    assert loaded == spec and loaded.load_corpus().digest == digest
    wrong = RunSpec(corpus=str(root), corpus_digest="0" * 64)
    wrong.save(tmp_path / "wrong.json")
    with pytest.raises(CorpusDigestError, match=f"{digest}.*{'0' * 64}"):
        RunSpec.load(tmp_path / "wrong.json").load_corpus()
    (root / "a.txt").write_text("changed")
    with pytest.raises(CorpusDigestError):
        loaded.load_corpus()


def test_bundled_default_unchanged() -> None:
    assert "corpus_digest" not in RunSpec().to_json()


def test_cli_init_pins_digest(tmp_path: Path) -> None:
    from tessera.cli import main

    root = _make(tmp_path / "c", NAMES)
    out = tmp_path / "run.json"
    assert main(["runspec", "init", "--corpus", str(root), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["corpus_digest"] == load_corpus_path(root).digest
