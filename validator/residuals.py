"""Error-feedback residuals a validator fetched, kept by digest for the next round.

A miner's update of round r names, as its error-feedback source, the residual it committed in its previous
update; a validator that verified that update fetched exactly those bytes then (``ef.after``). Keeping them
on disk, content-addressed, saves one residual (4 bytes per trained parameter) per miner and round on the
wire. Only blobs that are residuals (every tensor ``ef/*``) and that were fetched against their digest are
kept; the cache holds a bounded number of files, the oldest dropped first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path

from torch import Tensor

from protocol.p2p.blobs import BlobStore
from protocol.wire.tensorblob import tensor_blob_digest


class ResidualCache:
    """Residual blobs by digest, at most ``keep`` files (see the module doc)."""

    def __init__(self, root: Path, keep: int = 64) -> None:
        self.store = BlobStore(root, digest_fn=tensor_blob_digest)
        self.keep = keep
        self.hits = 0

    def get(self, digest: str) -> bytes | None:
        """The residual's bytes if kept, else None."""
        if not self.store.has(digest):
            return None
        self.hits += 1
        return self.store.get(digest)

    def offer(self, digest: str, data: bytes, tensors: Mapping[str, Tensor], keep: int | None = None) -> None:
        """Keep ``data`` (already checked against ``digest``) if it is a residual; then hold at most ``keep``
        files (default: the cache's), dropping the least recently written."""
        if not tensors or not all(k.startswith("ef/") for k in tensors):
            return
        self.store.put(data, digest)
        # verifications run in parallel threads: a file listed here may be dropped by another before stat
        aged: list[tuple[int, Path]] = []
        for p in self.store.root.iterdir():
            if p.name.startswith("."):
                continue
            with contextlib.suppress(OSError):
                if p.is_file():
                    aged.append((p.stat().st_mtime_ns, p))
        files = [p for _, p in sorted(aged)]
        for old in files[: max(0, len(files) - max(1, keep or self.keep))]:
            with contextlib.suppress(OSError):
                old.unlink()
