"""The miner's on-disk state, so a restart resumes without committing twice or losing error feedback.

Layout under ``data_dir``::

    state.json          rounds: status (prepared -> committed -> served), digests, losses, transcript
    ef/<round>.safetensors  the error-feedback residual *after* that round's update was built
    blobs/              served bytes by digest (updates, transcript states, evidence)

Rules: a round's update, its transcript states and its new error-feedback residual are written before the
commit transaction (status ``prepared``); after the chain shows the commitment the status becomes
``committed``. On restart a ``prepared`` round is reconciled against the chain: committed there, it is
marked committed; still in the commit phase, the *same* update is committed; otherwise it is abandoned
and its residual is never used. The residual for round r is that of the latest committed round < r, so
no residual is lost and none is applied twice. Every write is atomic (temp file, fsync, rename); the
records live in a :class:`protocol.node.recordstore.RecordStore` (reads hand out copies; an edit is kept
whole or not at all).

A round's record is a :class:`MinerRoundRecord`: one typed attribute per key, so a misspelt field is a
type error (and, the class having slots, an ``AttributeError`` at run time), never a silent ``None``. Its
JSON is the one miners have always written (``protocol.node.jsonrecord``): a field is on disk once set, and a
file with a key this version does not know, or a value of the wrong type, is refused with
:class:`MinerStateError`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import Tensor

from miner.errors import MinerStateError
from protocol.node.jsonrecord import RecordError, record_from_json, record_to_json
from protocol.node.recordstore import RecordStore
from protocol.p2p.blobs import BlobStore, atomic_write

PREPARED = "prepared"
COMMITTED = "committed"
SERVED = "served"
ABANDONED = "abandoned"
_STATUSES = (PREPARED, COMMITTED, SERVED, ABANDONED)


@dataclass(slots=True)
class MinerRoundRecord:
    """What a miner keeps of one round in ``state.json`` (and serves at ``/rounds``); every field but
    ``status`` is None (and absent from the file) until written. Change a stored record inside
    :meth:`MinerState.edit` (assign, do not mutate in place)."""

    status: str = PREPARED
    """``prepared`` (built, stored, not yet known on-chain), ``committed``, ``served`` or ``abandoned``."""
    round: int | None = None
    """The round the update was built for."""
    update_digest: str | None = None
    """Digest of the update bytes (hex; the blob is ``0x`` + it), what the commitment binds."""
    update_bytes: int | None = None
    """Size of the update message."""
    checkpoint: str | None = None
    """Digest of theta_r the update was trained from (hex)."""
    assign_seed: str | None = None
    """The round's assignment seed (hex): its batches."""
    registry: list[str] | None = None
    """The miners registered for the round, in the order the assignment reads them."""
    epoch_seed: str | None = None
    """The seed of the round's assignment epoch (hex), its modules (``protocol.rounds.epochs``); absent
    (records written before epochs): ``assign_seed``."""
    epoch_registry: list[str] | None = None
    """The registry of the epoch's first round, whose miners rank first; absent: ``registry``."""
    modules: list[str] | None = None
    """Module ids this miner was assigned and trained."""
    loss_first: float | None = None
    """Training loss at the first inner step."""
    loss_last: float | None = None
    """Training loss at the last inner step."""
    tokens: int | None = None
    """Tokens trained on."""
    train_seconds: float | None = None
    """Wall seconds of the inner loop."""
    train_cpu_seconds: float | None = None
    """CPU seconds of the inner loop (the hashing thread counted)."""
    trained_params: int | None = None
    """Parameters trained (of the assigned modules)."""
    inner_steps: int | None = None
    """H, the inner steps of the round."""
    transcript_steps: list[int] | None = None
    """The inner steps whose states the transcript commits to."""
    transcript_parts: list[list[str]] | None = None
    """Per transcript step, the digests (hex) of its parameters and of the rest of the state."""
    snapshots: dict[str, str] | None = None
    """Inner step -> blob digest of the kept state it replays from."""
    ef_after: str | None = None
    """Digest (hex) of the error-feedback residual after this round's update."""
    ef_source: list[int | str] | None = None
    """[round, update digest (hex)] of the committed round whose residual this update started from; null
    (written as such) when none."""
    skipped: bool | None = None
    """The round was not worked (not registered in time, or the behaviour chose not to commit)."""
    reason: str | None = None
    """Why the round was skipped or abandoned."""
    committed_at: float | None = None
    """When the commitment was seen sent (unix seconds)."""
    reconciled: bool | None = None
    """A prepared round found committed on-chain after a restart."""
    served_at: float | None = None
    """When the update was first served (unix seconds)."""
    reward: str | None = None
    """Wei paid for the round (decimal string), recorded once it is settled."""
    consensus_score: int | None = None
    """The chain's consensus score of this miner's update."""
    held_report: str | None = None
    """Evidence (hex) of the open unanswered-audit report that held this round's pay, "" if none was open:
    read once the round settled scored but unpaid (``miner.reports``)."""
    report_closed: str | None = None
    """How that report ended for this node: ``expired`` (by it), ``closed`` (by another) or ``failed``."""

    def to_json(self) -> dict[str, Any]:
        """The record as ``state.json`` holds it: the fields set; ``ef_source`` (null when there was none)
        on every record of a built update."""
        return record_to_json(self, ("ef_source",) if self.update_digest is not None else ())

    def assignment_inputs(self) -> tuple[bytes, list[str], list[str]] | None:
        """(epoch seed, round registry, epoch registry) the round's assignment was drawn from
        (``miner.work.assignment_for``); a record written before epochs stands for an epoch of one round
        (its ``assign_seed`` and ``registry``); None if the round was not built."""
        if self.assign_seed is None or self.registry is None:
            return None
        seed = self.assign_seed if self.epoch_seed is None else self.epoch_seed
        epoch = self.registry if self.epoch_registry is None else self.epoch_registry
        return bytes.fromhex(seed), list(self.registry), list(epoch)

    @classmethod
    def from_json(cls, doc: object, where: str = "round record") -> MinerRoundRecord:
        """Read a record as any version of the node wrote it; an unknown key, a value of the wrong type or
        an unknown status is a :class:`MinerStateError` naming it (``where`` says which record)."""
        try:
            rec = record_from_json(cls, doc, where)
        except RecordError as exc:
            raise MinerStateError(str(exc)) from exc
        if rec.status not in _STATUSES:
            raise MinerStateError(f"{where}: unknown status {rec.status!r}")
        return rec


def _check_status(rec: MinerRoundRecord) -> None:
    """Refuse to store a record whose status is none of the four (a typo in an edit)."""
    if rec.status not in _STATUSES:
        raise MinerStateError(f"unknown status {rec.status}")


class MinerState:
    """Durable per-round records (a :class:`protocol.node.recordstore.RecordStore`: copies out, atomic
    edits) plus the error-feedback residuals and served blobs."""

    def __init__(self, data_dir: str | Path) -> None:
        self.dir = Path(data_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "ef").mkdir(exist_ok=True)
        self.blobs = BlobStore(self.dir / "blobs")
        try:
            self._store = RecordStore(self.dir / "state.json", MinerRoundRecord, check=_check_status)
        except RecordError as exc:
            raise MinerStateError(str(exc)) from exc

    # -- rounds ----------------------------------------------------------------------------------------
    def record(self, round: int) -> MinerRoundRecord | None:
        """A copy of the stored record of a round, if any."""
        return self._store.get(round)

    def rounds(self) -> dict[int, MinerRoundRecord]:
        """Copies of all round records by round."""
        return self._store.records()

    def prepare(self, round: int, record: MinerRoundRecord, ef_residual: dict[str, Tensor]) -> None:
        """Persist a built update's record and its new residual before committing (status ``prepared``)."""
        existing = self._store.get(round)
        if existing is not None and existing.status != ABANDONED:
            raise MinerStateError(f"round {round} is already {existing.status}")
        atomic_write(
            self.dir / "ef" / f"{round}.safetensors",
            st_save({k: v.contiguous() for k, v in ef_residual.items()}),
        )
        self._store.put(round, dataclasses.replace(record, status=PREPARED))

    def set_status(self, round: int, status: str) -> None:
        """Move a round to ``status`` (other fields with it: :meth:`edit`)."""
        with self.edit(round) as rec:
            rec.status = status

    @contextmanager
    def edit(self, round: int) -> Iterator[MinerRoundRecord]:
        """Change a stored round's record (a working copy) and store it durably when the block ends; if
        the block raises or leaves an unknown status, the record stays as it was and nothing is written."""
        if round not in self._store:
            raise MinerStateError(f"no record for round {round}")
        with self._store.edit(round) as rec:
            yield rec

    def committed(self, round: int) -> bool:
        """Whether the round's update is known to be committed on-chain."""
        rec = self._store.get(round)
        return rec is not None and rec.status in (COMMITTED, SERVED)

    # -- error feedback ----------------------------------------------------------------------------------
    def ef_residual_for(self, round: int) -> dict[str, Tensor]:
        """The residual to start round ``round`` with: that of the latest committed round before it."""
        return self.ef_carry_for(round)[0]

    def ef_carry_for(self, round: int) -> tuple[dict[str, Tensor], tuple[int, bytes] | None]:
        """The residual to start ``round`` with and its source: (round, update digest) of the latest
        committed round before it, which the update's header names (``ef.source``); ({}, None) if none."""
        records = self._store.records()
        done = [r for r, rec in records.items() if r < round and rec.status in (COMMITTED, SERVED)]
        if not done:
            return {}, None
        src = max(done)
        digest = records[src].update_digest
        if digest is None:
            raise MinerStateError(f"round {src} is {records[src].status} without an update digest")
        return self.ef_state(src), (src, bytes.fromhex(digest))

    def ef_state(self, round: int) -> dict[str, Tensor]:
        """The residual and carried optimizer state stored after ``round``'s update was built."""
        path = self.dir / "ef" / f"{round}.safetensors"
        try:
            return dict(st_load(path.read_bytes()))
        except Exception as exc:  # safetensors raises its own error types for corrupt files
            raise MinerStateError(f"cannot read error-feedback state {path}: {exc}") from exc
