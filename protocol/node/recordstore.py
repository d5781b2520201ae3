"""One durable store of per-round records for both nodes (``miner.state``, ``validator.state``).

A :class:`RecordStore` keeps, in one JSON file, ``{"version": 1, "rounds": {round: record}}`` plus named
sections of string values (the validator's ``checkpoints``), written as ``json.dumps(doc, sort_keys=True,
indent=1)`` as the nodes always wrote it. Its rules, the same for every node:

- **copy-out reads**: :meth:`RecordStore.get` and :meth:`RecordStore.records` hand out deep copies, so
  what a caller changes is never stored behind the store's back;
- **atomic edits**: :meth:`RecordStore.edit` yields a working copy; when the block ends the ``check``
  given to the store runs, the copy replaces the stored record and the file is written. If the block, the
  check or the write raises, the stored record is the one before the block, whole (nothing half-assigned
  or mutated in place survives), and the file is unchanged;
- **atomic writes**: temp file, fsync, rename (:func:`protocol.p2p.blobs.atomic_write`);
- **bounded reads**: a file over ``max_bytes`` is refused before it is parsed.

A stored record is never changed in place (an edit replaces it with a new object), so a reader on another
thread (a node's HTTP API) copies a consistent record; changes and the writes they make are serialised by
one lock.

Errors are :class:`RecordError` (under :class:`protocol.errors.ProtocolError`); a record type's own
``from_json`` may raise its node's error, which passes through.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Generic, Protocol, Self, TypeVar

from protocol.node.jsonrecord import RecordError
from protocol.p2p.blobs import atomic_write
from protocol.wire.canonical import JSONFileError, read_json_file

FILE_VERSION = 1
"""The ``version`` key of every state file."""
MAX_STATE_BYTES = 512 * 1024 * 1024
"""Default bound on a state file's size: a file past it is refused unread (a node's state grows by a few
kilobytes a round)."""


class JSONRecord(Protocol):
    """A per-round record a store can hold: a dataclass that writes and reads its JSON object."""

    def to_json(self) -> dict[str, Any]:
        """The record as the file holds it."""
        ...

    @classmethod
    def from_json(cls, doc: object, where: str) -> Self:
        """The record from its JSON object (``where`` names it in errors)."""
        ...


R = TypeVar("R", bound=JSONRecord)
T = TypeVar("T")


class RecordStore(Generic[R]):
    """Records of type ``record_type`` by round, durable in ``path``; see the module for the rules.

    ``check`` runs on an edited record before it is stored (raise to refuse it; the edit is rolled back);
    ``sections`` names the file's other top-level objects (string -> string), kept with the records."""

    def __init__(
        self,
        path: str | Path,
        record_type: type[R],
        *,
        check: Callable[[R], None] | None = None,
        sections: tuple[str, ...] = (),
        max_bytes: int = MAX_STATE_BYTES,
    ) -> None:
        self.path = Path(path)
        self.record_type = record_type
        self._check = check
        self._max_bytes = max_bytes
        self._records: dict[int, R] = {}
        self._lock = threading.RLock()
        self._sections: dict[str, dict[str, str]] = {name: {} for name in sections}
        # Sections the file holds: a section added to a role later (the validator's ``contested``) is
        # written only once it has a value, so a node's existing file is rewritten byte for byte.
        self._written: set[str] = set(sections)
        if self.path.exists():
            self._load()

    # -- file ------------------------------------------------------------------------------------------
    def _load(self) -> None:
        size = self.path.stat().st_size
        if size > self._max_bytes:
            raise RecordError(f"{self.path} is {size} bytes, over the {self._max_bytes} a state file may be")
        try:
            doc = read_json_file(self.path)
        except JSONFileError as exc:
            raise RecordError(f"cannot read {self.path}: {exc}") from exc
        if not isinstance(doc, dict) or doc.get("version") != FILE_VERSION:
            raise RecordError(f"{self.path} is not a state file of version {FILE_VERSION}")
        unknown = sorted(set(doc) - {"version", "rounds", *self._sections})
        if unknown:
            raise RecordError(f"{self.path}: unknown keys {unknown}")
        rounds = doc.get("rounds")
        if not isinstance(rounds, dict):
            raise RecordError(f"{self.path}: 'rounds' must be an object")
        self._written = {name for name in self._sections if name in doc}
        for name in self._sections:
            section = doc.get(name, {})
            if not isinstance(section, dict) or not all(isinstance(v, str) for v in section.values()):
                raise RecordError(f"{self.path}: {name!r} must be an object of strings")
            self._sections[name] = dict(section)
        for key, rec in rounds.items():
            if not key.isdigit():
                raise RecordError(f"{self.path}: round key {key!r} is not a round number")
            self._records[int(key)] = self.record_type.from_json(rec, f"{self.path} round {key}")

    def _save(self) -> None:
        doc: dict[str, Any] = {
            "version": FILE_VERSION,
            "rounds": {str(r): rec.to_json() for r, rec in self._records.items()},
            **{name: v for name, v in self._sections.items() if v or name in self._written},
        }
        atomic_write(self.path, json.dumps(doc, sort_keys=True, indent=1).encode())
        self._written.update(name for name in self._sections if name in doc)

    # -- records ---------------------------------------------------------------------------------------
    def __contains__(self, round: int) -> bool:
        return round in self._records

    def get(self, round: int) -> R | None:
        """A copy of the round's record, None if there is none."""
        rec = self._records.get(round)
        return copy.deepcopy(rec) if rec is not None else None

    def setdefault(self, round: int, default: Callable[[], R]) -> R:
        """A copy of the round's record; if there is none, ``default()`` is put in place first (in memory:
        it is written with the next change)."""
        with self._lock:
            if round not in self._records:
                self._records[round] = default()
            rec = self._records[round]
        return copy.deepcopy(rec)

    def pick(self, round: int, part: Callable[[R], T], default: Callable[[], R] | None = None) -> T | None:
        """A copy of ``part(record)`` of the round's record, copying only that part (a node reads one
        verdict of many this way); None if there is no record, or with ``default`` as :meth:`setdefault`."""
        if default is not None:
            with self._lock:
                if round not in self._records:
                    self._records[round] = default()
        rec = self._records.get(round)
        return copy.deepcopy(part(rec)) if rec is not None else None

    def records(self) -> dict[int, R]:
        """Copies of every record by round."""
        snapshot = dict(self._records)  # one C-level copy: safe against a writer on another thread
        return {r: copy.deepcopy(rec) for r, rec in snapshot.items()}

    def put(self, round: int, record: R) -> None:
        """Store ``record`` (a copy) as the round's, replacing any, and write the file."""
        self._commit(round, copy.deepcopy(record))

    @contextmanager
    def edit(self, round: int, default: Callable[[], R] | None = None) -> Iterator[R]:
        """A working copy of the round's record to change (``default()`` if there is none and ``default``
        is given; :class:`RecordError` otherwise), stored and written when the block ends; if the block,
        the check or the write raises, nothing of it is kept."""
        rec = self._records.get(round)
        if rec is None:
            if default is None:
                raise RecordError(f"no record for round {round}")
            work = default()
        else:
            work = copy.deepcopy(rec)
        yield work
        # the stored record is a copy too: the caller's ``work`` stays a detached working copy
        self._commit(round, copy.deepcopy(work))

    def _commit(self, round: int, record: R) -> None:
        if self._check is not None:
            self._check(record)
        with self._lock:
            before = self._records.get(round)
            self._records[round] = record
            try:
                self._save()
            except BaseException:
                if before is None:
                    del self._records[round]
                else:
                    self._records[round] = before
                raise

    # -- sections --------------------------------------------------------------------------------------
    def section(self, name: str) -> dict[str, str]:
        """A copy of the named section."""
        return dict(self._sections[name])  # one C-level copy

    def section_value(self, name: str, key: str) -> str | None:
        """One value of the named section, None if absent."""
        return self._sections[name].get(key)

    def drop_section_value(self, name: str, key: str) -> None:
        """Remove one value of the named section and write the file (nothing changed if the write fails;
        a key that is not there writes nothing)."""
        with self._lock:
            section = self._sections[name]
            if key not in section:
                return
            before = section.pop(key)
            try:
                self._save()
            except BaseException:
                section[key] = before
                raise

    def put_section_value(self, name: str, key: str, value: str) -> None:
        """Set one value of the named section and write the file (nothing changed if the write fails)."""
        with self._lock:
            section = self._sections[name]
            before = section.get(key)
            section[key] = value
            try:
                self._save()
            except BaseException:
                if before is None:
                    del section[key]
                else:
                    section[key] = before
                raise
