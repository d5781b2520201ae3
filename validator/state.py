"""The validator's on-disk state: verdicts, score salts, what was committed/revealed/certified, checkpoints.

Layout under ``data_dir``::

    state.json   per round: verdicts (with evidence), scores, salt, score_committed, score_revealed,
                 merged checkpoint digest, certified
    blobs/       checkpoints (params + outer momentum, safetensors) by digest, served to peers

Rules: verdicts are written as soon as they are reached (a restart does not re-fetch what it judged);
scores and their salt are written *before* the score commitment is sent, so a restart reveals exactly
what was committed; ``score_revealed`` is checked against the chain before any reveal, so nothing is
revealed twice. Every write is atomic.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypedDict, Unpack

from protocol.canonical import JSONFileError, read_json_file
from protocol.transfer import BlobStore, atomic_write
from validator.errors import ValidatorStateError


class RoundRecord(TypedDict, total=False):
    """What a validator keeps of one round in ``state.json`` (every key optional until written).

    Typed so that mypy checks every key written (``ValidatorState.set``) and read (``rec["..."]``,
    ``rec.get("...")``); ``set`` refuses an unknown key at run time as well."""

    verdicts: dict[str, dict[str, Any]]
    """Miner -> its verdict (``validator.context.Verdict.to_json``), written as soon as reached."""
    seed_secret: str
    """This validator's seed share secret (hex), stored before its commitment is sent."""
    miners: list[str]
    """The committed miners in ascending address order (the score vector's order)."""
    scores: list[int]
    """The score vector, stored with its salt before the score commitment is sent."""
    salt: str
    """The score commitment's salt (hex)."""
    score_committed: bool
    score_revealed: bool
    verify_seconds: float
    heldout_before: float
    """Held-out loss of theta_r."""
    heldout_after: float
    """Held-out loss of the merged theta_{r+1}."""
    consensus: dict[str, int]
    """The chain's consensus score per miner."""
    rewards: dict[str, str]
    """Wei paid per address (decimal strings)."""
    merged: str
    """Digest of theta_{r+1} as this validator merged it."""
    merged_from: list[str]
    """Miners whose updates went into the merge."""
    signature: str
    """This validator's certificate signature of ``merged`` (0x hex)."""
    merge_seconds: float
    certified: bool
    """theta_{r+1} is certified on-chain."""
    certify_wait_since: float
    """When this validator, not the lowest signer, started waiting before submitting the certificate."""
    rechecked: dict[str, bool]
    """``miner:digest`` of peers' slashing evidence -> whether the replay failed (F8)."""
    updates: dict[str, str]
    """Miner -> digest of the update bytes held (they matched the commitment), served at ``/updates``."""


ROUND_KEYS = frozenset(RoundRecord.__annotations__)


class ValidatorState:
    """Durable per-round records and the checkpoint store."""

    def __init__(self, data_dir: str | Path) -> None:
        self.dir = Path(data_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.blobs = BlobStore(self.dir / "blobs")
        self._file = self.dir / "state.json"
        self._doc: dict[str, Any] = {"version": 1, "rounds": {}, "checkpoints": {}}
        if self._file.exists():
            try:
                doc = read_json_file(self._file)
            except JSONFileError as exc:
                raise ValidatorStateError(f"cannot read {self._file}: {exc}") from exc
            if not isinstance(doc, dict) or doc.get("version") != 1:
                raise ValidatorStateError(f"{self._file} is not a validator state file")
            self._doc = doc

    def _save(self) -> None:
        atomic_write(self._file, json.dumps(self._doc, sort_keys=True, indent=1).encode())

    def round(self, round: int) -> RoundRecord:
        """The round's record (created empty on first use)."""
        rec: RoundRecord = self._doc["rounds"].setdefault(str(round), {"verdicts": {}})
        return rec

    def rounds(self) -> dict[int, RoundRecord]:
        """All round records."""
        return {int(k): v for k, v in self._doc["rounds"].items()}

    def set(self, round: int, **fields: Unpack[RoundRecord]) -> None:
        """Store fields on a round's record, durably; an unknown key is a :class:`ValidatorStateError` (a
        typo must not write a field nobody reads)."""
        unknown = set(fields) - ROUND_KEYS
        if unknown:
            raise ValidatorStateError(f"unknown round record keys {sorted(unknown)}")
        self.round(round).update(fields)
        self._save()

    def verdict(self, round: int, miner: str) -> dict[str, Any] | None:
        """A stored verdict."""
        v = self.round(round)["verdicts"].get(miner)
        return dict(v) if v is not None else None

    def put_verdict(self, round: int, miner: str, verdict: dict[str, Any]) -> None:
        """Store a verdict durably."""
        self.round(round)["verdicts"][miner] = verdict
        self._save()

    def put_checkpoint(self, round: int, digest: str) -> None:
        """Remember that ``digest`` (stored in blobs) is theta_round."""
        self._doc["checkpoints"][str(round)] = digest
        self._save()

    def checkpoint(self, round: int) -> str | None:
        """The digest of theta_round if this validator holds it."""
        return self._doc["checkpoints"].get(str(round))
