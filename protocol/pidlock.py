"""A lock file that names the process holding it: one node per data dir, one node per DHT key.

A POSIX record lock (``lockf``) is per process and is not inherited by a forked child (hivemind's DHT
process), so a killed node leaves no stale lock; the file holds the holder's pid for the error message.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from protocol.errors import ProtocolError


class LockHeldError(ProtocolError):
    """Another process holds the lock; ``holder`` is its pid as the file tells it (``?`` if unknown)."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"{path} is held by pid {holder}")
        self.path = path
        self.holder = holder


def hold_pid_lock(path: Path) -> IO[str]:
    """Lock ``path`` (created if absent) and write this process's pid in it; return the open file, which
    holds the lock until it is closed or the process ends. Raises :class:`LockHeldError` when another
    process holds it, ``OSError`` when the file cannot be opened."""
    fh = open(path, "a+")
    try:
        fcntl.lockf(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.seek(0)
        holder = fh.read().strip() or "?"
        fh.close()
        raise LockHeldError(path, holder) from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    return fh
