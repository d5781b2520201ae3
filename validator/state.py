"""The validator's on-disk state: verdicts, score salts, what was committed/revealed/certified, checkpoints.

Layout under ``data_dir``::

    state.json   per round: verdicts (with evidence), scores, salt, score_committed, score_revealed,
                 merged checkpoint digest, certified; the checkpoints held; the unanswered-audit
                 reports it contested as witness and must expire (``contested``)
    blobs/       checkpoints (params + outer momentum, safetensors) by digest, served to peers

Rules: verdicts are written as soon as they are reached (a restart does not re-fetch what it judged);
scores and their salt are written *before* the score commitment is sent, so a restart reveals exactly
what was committed; ``score_revealed`` is checked against the chain before any reveal, so nothing is
revealed twice. Every write is atomic; the records live in a
:class:`protocol.node.recordstore.RecordStore` (reads hand out copies; an edit is kept whole or not at all).

A round's record is a :class:`RoundRecord`: one typed attribute per key, so a misspelt field is a type
error (and, the class having slots, an ``AttributeError`` at run time), never a silent ``None``. Its JSON
is the one nodes have always written: a field is on disk only once set, and a file with a key this
version does not know, or a value of the wrong type, is refused with :class:`ValidatorStateError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol.node.jsonrecord import RecordError, record_from_json, record_to_json
from protocol.node.recordstore import RecordStore
from protocol.p2p.blobs import BlobStore
from validator.context import Verdict
from validator.errors import ValidatorStateError


@dataclass(slots=True)
class RoundRecord:
    """What a validator keeps of one round in ``state.json``; every field but ``verdicts`` is None (and
    absent from the file) until written. Change fields inside :meth:`ValidatorState.edit` (assign, do
    not mutate in place), which writes the file when the block ends."""

    verdicts: dict[str, Verdict] = field(default_factory=dict)
    """Miner -> its verdict (on disk as ``Verdict.to_json`` writes it), written as soon as reached
    (:meth:`ValidatorState.put_verdict`)."""
    seed_secret: str | None = None
    """This validator's seed share secret (hex), stored before its commitment is sent."""
    miners: list[str] | None = None
    """The committed miners in ascending address order (the score vector's order)."""
    scores: list[int] | None = None
    """The score vector, stored with its salt before the score commitment is sent."""
    salt: str | None = None
    """The score commitment's salt (hex)."""
    score_committed: bool | None = None
    """The score commitment was sent."""
    score_revealed: bool | None = None
    """The scores were revealed (or the chain says they were): never revealed twice."""
    verify_seconds: float | None = None
    """Wall seconds the round's verification took."""
    heldout_before: float | None = None
    """Held-out loss of theta_r."""
    heldout_after: float | None = None
    """Held-out loss of the merged theta_{r+1}."""
    consensus: dict[str, int] | None = None
    """The chain's consensus score per miner."""
    rewards: dict[str, str] | None = None
    """Wei paid per address (decimal strings)."""
    merged: str | None = None
    """Digest of theta_{r+1} as this validator merged it."""
    merged_from: list[str] | None = None
    """Miners whose updates went into the merge."""
    signature: str | None = None
    """This validator's certificate signature of ``merged`` (0x hex)."""
    merge_seconds: float | None = None
    """Wall seconds the merge took."""
    certified: bool | None = None
    """theta_{r+1} is certified on-chain."""
    certify_wait_since: float | None = None
    """When this validator, not the lowest signer, started waiting before submitting the certificate."""
    rechecked: dict[str, bool] | None = None
    """``miner:digest`` of peers' slashing evidence -> whether the replay failed (F8)."""
    updates: dict[str, str] | None = None
    """Miner -> digest of the update bytes held (they matched the commitment), served at ``/updates``."""

    def to_json(self) -> dict[str, Any]:
        """The record as ``state.json`` holds it: the fields set, under their names."""
        return record_to_json(self)

    @classmethod
    def from_json(cls, doc: object, where: str = "round record") -> RoundRecord:
        """Read a record as any version of the node wrote it; an unknown key or a value of the wrong type
        is a :class:`ValidatorStateError` naming it (``where`` says which record)."""
        try:
            return record_from_json(cls, doc, where)
        except RecordError as exc:
            raise ValidatorStateError(str(exc)) from exc


_CHECKPOINTS = "checkpoints"
"""The state file's section of round -> digest of theta_round held in blobs."""

_CONTESTED = "contested"
"""The state file's section of evidence (0x hex) -> round of the unanswered-audit reports this validator
voted against as their witness: it expires them after their window, after a restart too."""


class ValidatorState:
    """Durable per-round records (a :class:`protocol.node.recordstore.RecordStore`: copies out, atomic
    edits) and the checkpoint store."""

    def __init__(self, data_dir: str | Path) -> None:
        self.dir = Path(data_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.blobs = BlobStore(self.dir / "blobs")
        try:
            self._store = RecordStore(
                self.dir / "state.json", RoundRecord, sections=(_CHECKPOINTS, _CONTESTED)
            )
        except RecordError as exc:
            raise ValidatorStateError(str(exc)) from exc

    def round(self, round: int) -> RoundRecord:
        """A copy of the round's record (created empty on first use; written with the next change)."""
        return self._store.setdefault(round, RoundRecord)

    def rounds(self) -> dict[int, RoundRecord]:
        """Copies of all round records (reading one through this creates nothing)."""
        return self._store.records()

    @contextmanager
    def edit(self, round: int) -> Iterator[RoundRecord]:
        """Change a round's record (a working copy) and store it durably when the block ends; if the block
        raises, the record stays as it was and nothing is written."""
        with self._store.edit(round, default=RoundRecord) as rec:
            yield rec

    def verdict(self, round: int, miner: str) -> Verdict | None:
        """A copy of a stored verdict (the round's record created empty on first use, as :meth:`round`)."""
        return self._store.pick(round, lambda rec: rec.verdicts.get(miner), default=RoundRecord)

    def put_verdict(self, round: int, miner: str, verdict: Verdict) -> None:
        """Store a verdict durably (a copy: what the caller changes later is not stored)."""
        with self.edit(round) as rec:
            rec.verdicts[miner] = verdict

    def put_checkpoint(self, round: int, digest: str) -> None:
        """Remember that ``digest`` (stored in blobs) is theta_round."""
        self._store.put_section_value(_CHECKPOINTS, str(round), digest)

    def checkpoint(self, round: int) -> str | None:
        """The digest of theta_round if this validator holds it."""
        return self._store.section_value(_CHECKPOINTS, str(round))

    def contested(self) -> dict[bytes, int]:
        """The unanswered-audit reports this validator contested and has not seen closed: evidence ->
        the round they are about."""
        try:
            return {bytes.fromhex(e[2:]): int(r) for e, r in self._store.section(_CONTESTED).items()}
        except ValueError as exc:  # a hand-edited or damaged file
            raise ValidatorStateError(f"{self.dir / 'state.json'}: bad 'contested' entry: {exc}") from exc

    def put_contested(self, evidence: bytes, round: int) -> None:
        """Remember, durably, that this validator voted against the report on ``evidence`` of ``round``."""
        self._store.put_section_value(_CONTESTED, "0x" + evidence.hex(), str(round))

    def drop_contested(self, evidence: bytes) -> None:
        """Forget a contested report (closed: expired by this node or anyone, or decided)."""
        self._store.drop_section_value(_CONTESTED, "0x" + evidence.hex())
