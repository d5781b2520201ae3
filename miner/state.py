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
no residual is lost and none is applied twice. Every write is atomic (temp file, fsync, rename).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import Tensor

from miner.errors import MinerStateError
from protocol.canonical import JSONFileError, read_json_file
from protocol.transfer import BlobStore, atomic_write

PREPARED = "prepared"
COMMITTED = "committed"
SERVED = "served"
ABANDONED = "abandoned"
_STATUSES = (PREPARED, COMMITTED, SERVED, ABANDONED)


class MinerState:
    """Durable per-round records plus the error-feedback residuals and served blobs."""

    def __init__(self, data_dir: str | Path) -> None:
        self.dir = Path(data_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "ef").mkdir(exist_ok=True)
        self.blobs = BlobStore(self.dir / "blobs")
        self._file = self.dir / "state.json"
        self._doc: dict[str, Any] = {"version": 1, "rounds": {}}
        if self._file.exists():
            try:
                doc = read_json_file(self._file)
            except JSONFileError as exc:
                raise MinerStateError(f"cannot read {self._file}: {exc}") from exc
            if (
                not isinstance(doc, dict)
                or doc.get("version") != 1
                or not isinstance(doc.get("rounds"), dict)
            ):
                raise MinerStateError(f"{self._file} is not a miner state file")
            self._doc = doc

    def _save(self) -> None:
        atomic_write(self._file, json.dumps(self._doc, sort_keys=True, indent=1).encode())

    # -- rounds ----------------------------------------------------------------------------------------
    def record(self, round: int) -> dict[str, Any] | None:
        """The stored record of a round, if any."""
        rec = self._doc["rounds"].get(str(round))
        return dict(rec) if rec is not None else None

    def rounds(self) -> dict[int, dict[str, Any]]:
        """All round records by round."""
        return {int(k): dict(v) for k, v in self._doc["rounds"].items()}

    def prepare(self, round: int, record: dict[str, Any], ef_residual: dict[str, Tensor]) -> None:
        """Persist a built update's record and its new residual before committing (status ``prepared``)."""
        existing = self.record(round)
        if existing is not None and existing["status"] != ABANDONED:
            raise MinerStateError(f"round {round} is already {existing['status']}")
        atomic_write(
            self.dir / "ef" / f"{round}.safetensors",
            st_save({k: v.contiguous() for k, v in ef_residual.items()}),
        )
        self._doc["rounds"][str(round)] = {**record, "status": PREPARED}
        self._save()

    def set_status(self, round: int, status: str, **extra: Any) -> None:
        """Move a round to ``status`` (and store extra fields)."""
        if status not in _STATUSES:
            raise MinerStateError(f"unknown status {status}")
        rec = self._doc["rounds"].get(str(round))
        if rec is None:
            raise MinerStateError(f"no record for round {round}")
        rec.update(extra)
        rec["status"] = status
        self._save()

    def update(self, round: int, **fields: Any) -> None:
        """Store extra fields on a round's record (rewards, scores)."""
        rec = self._doc["rounds"].get(str(round))
        if rec is None:
            raise MinerStateError(f"no record for round {round}")
        rec.update(fields)
        self._save()

    def committed(self, round: int) -> bool:
        """Whether the round's update is known to be committed on-chain."""
        rec = self.record(round)
        return rec is not None and rec["status"] in (COMMITTED, SERVED)

    # -- error feedback ----------------------------------------------------------------------------------
    def ef_residual_for(self, round: int) -> dict[str, Tensor]:
        """The residual to start round ``round`` with: that of the latest committed round before it."""
        return self.ef_carry_for(round)[0]

    def ef_carry_for(self, round: int) -> tuple[dict[str, Tensor], tuple[int, bytes] | None]:
        """The residual to start ``round`` with and its source: (round, update digest) of the latest
        committed round before it, which the update's header names (``ef.source``); ({}, None) if none."""
        done = [r for r, rec in self.rounds().items() if r < round and rec["status"] in (COMMITTED, SERVED)]
        if not done:
            return {}, None
        src = max(done)
        rec = self.record(src)
        assert rec is not None
        return self.ef_state(src), (src, bytes.fromhex(rec["update_digest"]))

    def ef_state(self, round: int) -> dict[str, Tensor]:
        """The residual and carried optimizer state stored after ``round``'s update was built."""
        path = self.dir / "ef" / f"{round}.safetensors"
        try:
            return dict(st_load(path.read_bytes()))
        except Exception as exc:  # safetensors raises its own error types for corrupt files
            raise MinerStateError(f"cannot read error-feedback state {path}: {exc}") from exc
