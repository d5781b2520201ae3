"""Blobs addressed by digest: the digest strings (they end up in URLs and file names), the typed errors of
bulk transfer, and ``BlobStore``, the serving side: a directory of blobs named by digest, written
atomically. ``protocol.p2p.transfer`` fetches them from peers (and re-exports these names)."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from protocol.errors import ProtocolError

DigestFn = Callable[[bytes], str]
_DIGEST_RE = re.compile(r"^(0x)?[0-9a-f]{16,128}$")


class TransferError(ProtocolError):
    """Root of bulk-transfer failures."""


class BlobNotFoundError(TransferError):
    """No peer has the blob (every peer answered 404 or was unreachable)."""


class BlobTooLargeError(TransferError):
    """A peer sent, or announced, more bytes than the cap."""


class DigestMismatchError(TransferError):
    """The bytes that arrived do not hash to the digest asked for."""


class FetchTimeoutError(TransferError):
    """A peer did not answer in time."""


class PeerUnavailableError(TransferError):
    """A peer could not be reached or answered with a server error."""


class BadDigestError(TransferError):
    """A digest string is not lower-case hex of a sane length."""


class NotModifiedError(TransferError):
    """The peer answered 304: the answer the request's ``If-None-Match`` named is still the current one."""


def sha256_digest(data: bytes) -> str:
    """The default blob digest: ``0x`` + sha256 hex."""
    return "0x" + hashlib.sha256(data).hexdigest()


def check_digest_str(digest: str) -> str:
    """Validate a digest string (it ends up in URLs and file names)."""
    if not isinstance(digest, str) or not _DIGEST_RE.fullmatch(digest):
        raise BadDigestError(f"not a digest: {digest!r}")
    return digest


class BlobStore:
    """A directory of blobs named by digest; writes are atomic (temp file + rename)."""

    def __init__(self, root: str | Path, digest_fn: DigestFn = sha256_digest) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.digest_fn = digest_fn

    def path(self, digest: str) -> Path:
        """Where the blob ``digest`` lives."""
        return self.root / check_digest_str(digest).removeprefix("0x")

    def put(self, data: bytes, digest: str | None = None, digest_fn: DigestFn | None = None) -> str:
        """Store ``data`` (under ``digest`` if given, which is checked) and return its digest."""
        d = (digest_fn or self.digest_fn)(data)
        if digest is not None and digest.removeprefix("0x") != d.removeprefix("0x"):
            raise DigestMismatchError(f"blob hashes to {d}, not {digest}")
        key = digest or d
        atomic_write(self.path(key), data)
        return key

    def has(self, digest: str) -> bool:
        """Whether the blob is stored."""
        try:
            return self.path(digest).is_file()
        except BadDigestError:
            return False

    def get(self, digest: str) -> bytes:
        """The blob's bytes; :class:`BlobNotFoundError` if absent."""
        p = self.path(digest)
        if not p.is_file():
            raise BlobNotFoundError(digest)
        return p.read_bytes()

    def size(self, digest: str) -> int:
        """The blob's size in bytes."""
        return self.path(digest).stat().st_size

    def iter_chunks(self, digest: str, chunk: int = 1 << 16) -> Iterator[bytes]:
        """Stream the blob in chunks."""
        with open(self.path(digest), "rb") as fh:
            while block := fh.read(chunk):
                yield block


def atomic_write(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temp file in the same directory, fsync, rename."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
