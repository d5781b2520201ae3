"""The one record store both nodes keep their per-round records in (``protocol.node.recordstore``, issue
25): copies out, an edit kept whole or not at all, atomic bounded files, typed errors."""

from __future__ import annotations

import json
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from protocol.errors import ProtocolError
from protocol.node.jsonrecord import RecordError, record_from_json, record_to_json
from protocol.node.recordstore import RecordStore


@dataclass(slots=True)
class Rec:
    """A record as the nodes' are: optional fields absent until set, a nested collection."""

    status: str = "new"
    tags: list[str] = field(default_factory=list)
    score: int | None = None

    def to_json(self) -> dict[str, Any]:
        return record_to_json(self)

    @classmethod
    def from_json(cls, doc: object, where: str = "record") -> Rec:
        return record_from_json(cls, doc, where)


def _no_bad_status(rec: Rec) -> None:
    if rec.status == "bad":
        raise ValueError("bad status")


def _store(path: Path, **kw: Any) -> RecordStore[Rec]:
    return RecordStore(path / "state.json", Rec, check=_no_bad_status, sections=("checkpoints",), **kw)


def test_reads_hand_out_copies(tmp_path: Path) -> None:
    st = _store(tmp_path)
    st.put(1, Rec(tags=["a"]))
    got = st.get(1)
    assert got == Rec(tags=["a"])
    got.tags.append("b")  # changing a copy, nested list included, stores nothing
    got.score = 5
    st.records()[1].tags.append("c")
    st.setdefault(1, Rec).tags.append("d")
    assert st.get(1) == Rec(tags=["a"])
    assert st.get(2) is None and 2 not in st


def test_an_edit_is_stored_and_written_when_the_block_ends(tmp_path: Path) -> None:
    st = _store(tmp_path)
    with st.edit(3, default=Rec) as rec:
        rec.tags.append("x")  # in place is fine: it is a working copy
        rec.score = 7
    assert st.get(3) == Rec(tags=["x"], score=7)
    assert _store(tmp_path).get(3) == Rec(tags=["x"], score=7)
    rec.score = 8  # the working copy stays detached after the block
    assert st.get(3) == Rec(tags=["x"], score=7)


def test_a_failed_edit_keeps_the_whole_record_and_writes_nothing(tmp_path: Path) -> None:
    st = _store(tmp_path)
    st.put(1, Rec(tags=["a"], score=1))
    raw = (tmp_path / "state.json").read_bytes()
    with pytest.raises(RuntimeError), st.edit(1) as rec:
        rec.tags.append("half")  # a mutation in place, then an assignment, then the block fails
        rec.score = 2
        raise RuntimeError("cut off")
    with pytest.raises(ValueError, match="bad status"), st.edit(1) as rec:
        rec.status, rec.score = "bad", 3  # refused by the store's check
    assert st.get(1) == Rec(tags=["a"], score=1)
    assert (tmp_path / "state.json").read_bytes() == raw
    with pytest.raises(RecordError, match="no record for round 9"), st.edit(9):
        pass
    with pytest.raises(RuntimeError), st.edit(9, default=Rec):
        raise RuntimeError("cut off")
    assert 9 not in st


def test_a_failed_write_changes_nothing_in_memory(tmp_path: Path) -> None:
    home = tmp_path / "node"
    st = _store(home)
    st.put(1, Rec(score=1))
    st.put_section_value("checkpoints", "1", "0xaa")
    shutil.rmtree(home)
    home.write_text("a file where the state directory was")  # every write now fails (a real OSError)
    with pytest.raises(OSError), st.edit(1) as rec:
        rec.score = 2
    with pytest.raises(OSError):
        st.put(2, Rec())
    with pytest.raises(OSError):
        st.put_section_value("checkpoints", "1", "0xbb")
    with pytest.raises(OSError):
        st.put_section_value("checkpoints", "2", "0xcc")
    assert st.records() == {1: Rec(score=1)}
    assert st.section("checkpoints") == {"1": "0xaa"}


def test_the_file_is_written_as_nodes_write_it_and_reread_unchanged(tmp_path: Path) -> None:
    st = _store(tmp_path)
    st.put(10, Rec(score=1))
    st.setdefault(2, Rec)  # created on first read, written with the next change
    st.put_section_value("checkpoints", "11", "0x" + "ab" * 32)
    raw = (tmp_path / "state.json").read_bytes()
    doc = {
        "checkpoints": {"11": "0x" + "ab" * 32},
        "rounds": {"10": {"status": "new", "tags": [], "score": 1}, "2": {"status": "new", "tags": []}},
        "version": 1,
    }
    assert raw == json.dumps(doc, sort_keys=True, indent=1).encode()
    again = _store(tmp_path)
    assert again.records() == {10: Rec(score=1), 2: Rec()}
    assert again.section_value("checkpoints", "11") == "0x" + "ab" * 32
    again.put(10, Rec(score=1))
    assert (tmp_path / "state.json").read_bytes() == raw
    assert not [p.name for p in tmp_path.iterdir() if p.name != "state.json"]  # no temp file left


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "cannot read"),
        (json.dumps({"version": 2, "rounds": {}}), "not a state file of version 1"),
        (json.dumps({"version": 1}), "'rounds' must be an object"),
        (json.dumps({"version": 1, "rounds": {}, "extra": 1}), "unknown keys \\['extra'\\]"),
        (json.dumps({"version": 1, "rounds": {"x": {}}}), "round key 'x' is not a round number"),
        (json.dumps({"version": 1, "rounds": {"4": {"scor": 1}}}), "round 4: unknown keys \\['scor'\\]"),
        (json.dumps({"version": 1, "rounds": {}, "checkpoints": {"1": 5}}), "'checkpoints' must be"),
        ("[" * 100_000, "cannot read"),
    ],
)
def test_a_file_it_cannot_read_is_a_typed_error(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "state.json").write_text(text)
    with pytest.raises(RecordError, match=message) as caught:
        _store(tmp_path)
    assert isinstance(caught.value, ProtocolError)


def test_a_file_over_the_bound_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    # not JSON at all: the size is what refuses it, before any parse
    (tmp_path / "state.json").write_bytes(b"x" * 2049)
    with pytest.raises(RecordError, match="2049 bytes, over the 2048"):
        _store(tmp_path, max_bytes=2048)
    (tmp_path / "state.json").write_text(json.dumps({"version": 1, "rounds": {"1": {}}}))
    assert _store(tmp_path, max_bytes=2048).get(1) == Rec()


def test_a_part_is_read_as_a_copy_of_that_part_alone(tmp_path: Path) -> None:
    st = _store(tmp_path)
    st.put(1, Rec(tags=["a", "b"]))
    tags = st.pick(1, lambda rec: rec.tags)
    assert tags == ["a", "b"]
    tags.append("c")  # a copy
    assert st.get(1) == Rec(tags=["a", "b"])
    assert st.pick(2, lambda rec: rec.score) is None and 2 not in st
    assert (
        st.pick(2, lambda rec: rec.tags, default=Rec) == [] and st.get(2) == Rec()
    )  # created, as setdefault


def test_a_reader_on_another_thread_copies_while_rounds_are_added(tmp_path: Path) -> None:
    # a node's HTTP API reads every record while its loop adds rounds: each read is a consistent copy
    st = RecordStore(tmp_path / "state.json", Rec)
    errors: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        try:
            while not done.is_set():
                for r, rec in st.records().items():
                    assert rec.score == r
        except BaseException as exc:  # pragma: no cover - the failure this test is for
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for r in range(150):
            with st.edit(r, default=Rec) as rec:
                rec.score = r
    finally:
        done.set()
        reader.join()
    assert not errors and len(st.records()) == 150
