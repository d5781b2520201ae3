"""Bulk transfer over HTTP: blobs (updates, checkpoints, transcript states, evidence) addressed by digest.

``fetch_blob`` streams ``GET {url}/blobs/{digest}`` with a size cap enforced while reading (a peer cannot
make us buffer more than the cap), a timeout, a digest check on arrival, and retries with exponential
backoff across the given peers. Failures are typed (:class:`TransferError` subclasses).

``BlobStore`` is the serving side: a directory of blobs named by digest, written atomically.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from protocol.errors import ProtocolError

log = logging.getLogger(__name__)

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


def sha256_digest(data: bytes) -> str:
    """The default blob digest: ``0x`` + sha256 hex."""
    return "0x" + hashlib.sha256(data).hexdigest()


def check_digest_str(digest: str) -> str:
    """Validate a digest string (it ends up in URLs and file names)."""
    if not isinstance(digest, str) or not _DIGEST_RE.match(digest):
        raise BadDigestError(f"not a digest: {digest!r}")
    return digest


@dataclass(frozen=True)
class FetchPolicy:
    """Limits and retry behaviour of a fetch."""

    #: Largest accepted body in bytes.
    max_bytes: int = 64 * 1024 * 1024
    #: Seconds for connect and for each read.
    timeout: float = 10.0
    #: Attempts over all peers (each attempt tries every peer once).
    attempts: int = 3
    #: First backoff in seconds, doubled after each failed attempt.
    backoff: float = 0.2


def _stream_one(
    client: httpx.Client, url: str, digest: str, policy: FetchPolicy, digest_fn: DigestFn
) -> bytes:
    target = f"{url.rstrip('/')}/blobs/{digest}"
    try:
        with client.stream("GET", target, timeout=policy.timeout) as resp:
            if resp.status_code == 404:
                raise BlobNotFoundError(f"{target}: not found")
            if resp.status_code >= 500:
                raise PeerUnavailableError(f"{target}: HTTP {resp.status_code}")
            if resp.status_code != 200:
                raise TransferError(f"{target}: HTTP {resp.status_code}")
            announced = resp.headers.get("content-length")
            if announced is not None and announced.isdigit() and int(announced) > policy.max_bytes:
                raise BlobTooLargeError(f"{target}: announces {announced} bytes > cap {policy.max_bytes}")
            buf = bytearray()
            for chunk in resp.iter_bytes():
                buf.extend(chunk)
                if len(buf) > policy.max_bytes:
                    raise BlobTooLargeError(f"{target}: body exceeds cap {policy.max_bytes}")
    except httpx.TimeoutException as exc:
        raise FetchTimeoutError(f"{target}: timed out after {policy.timeout}s") from exc
    except httpx.TransportError as exc:
        raise PeerUnavailableError(f"{target}: {type(exc).__name__}: {exc}") from exc
    data = bytes(buf)
    got = digest_fn(data)
    if got.removeprefix("0x") != digest.removeprefix("0x"):
        raise DigestMismatchError(f"{target}: bytes hash to {got}, expected {digest}")
    return data


def get_capped(url: str, *, max_bytes: int, timeout: float, client: httpx.Client | None = None) -> bytes:
    """``GET url`` and return the body of a 200 answer, refusing more than ``max_bytes`` while reading.

    For small JSON answers of untrusted peers (e.g. a validator's ``/signatures/{round}``): raises
    :class:`BlobTooLargeError` on an oversize (or oversize-announced) body, :class:`FetchTimeoutError`,
    :class:`PeerUnavailableError` (unreachable, 5xx), :class:`BlobNotFoundError` (404) or
    :class:`TransferError` (any other status).
    """
    own = client is None
    cl = client or httpx.Client(follow_redirects=False)
    try:
        with cl.stream("GET", url, timeout=timeout) as resp:
            if resp.status_code == 404:
                raise BlobNotFoundError(f"{url}: not found")
            if resp.status_code >= 500:
                raise PeerUnavailableError(f"{url}: HTTP {resp.status_code}")
            if resp.status_code != 200:
                raise TransferError(f"{url}: HTTP {resp.status_code}")
            announced = resp.headers.get("content-length")
            if announced is not None and announced.isdigit() and int(announced) > max_bytes:
                raise BlobTooLargeError(f"{url}: announces {announced} bytes > cap {max_bytes}")
            buf = bytearray()
            for chunk in resp.iter_bytes():
                buf.extend(chunk)
                if len(buf) > max_bytes:
                    raise BlobTooLargeError(f"{url}: body exceeds cap {max_bytes}")
    except httpx.TimeoutException as exc:
        raise FetchTimeoutError(f"{url}: timed out after {timeout}s") from exc
    except httpx.HTTPError as exc:
        raise PeerUnavailableError(f"{url}: {type(exc).__name__}: {exc}") from exc
    finally:
        if own:
            cl.close()
    return bytes(buf)


def fetch_blob(
    urls: Sequence[str] | str,
    digest: str,
    *,
    policy: FetchPolicy | None = None,
    digest_fn: DigestFn = sha256_digest,
    client: httpx.Client | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> bytes:
    """Fetch the blob ``digest`` from the first peer that serves it intact.

    Peers are tried in order on each attempt; a digest mismatch or an oversize body from one peer moves
    on to the next (and is not retried against the same peer). Raises the most informative error seen
    when every attempt fails: a mismatch or size error beats a timeout, which beats not-found.
    """
    check_digest_str(digest)
    peers = [urls] if isinstance(urls, str) else list(urls)
    if not peers:
        raise BlobNotFoundError(f"no peer to fetch {digest} from")
    pol = policy or FetchPolicy()
    own = client is None
    cl = client or httpx.Client(follow_redirects=False)
    errors: list[TransferError] = []
    bad_peers: set[str] = set()
    delay = pol.backoff
    try:
        for attempt in range(max(1, pol.attempts)):
            for url in peers:
                if url in bad_peers:
                    continue
                try:
                    return _stream_one(cl, url, digest, pol, digest_fn)
                except (DigestMismatchError, BlobTooLargeError) as exc:
                    log.warning("peer %s served a bad blob: %s", url, exc)
                    bad_peers.add(url)
                    errors.append(exc)
                except TransferError as exc:
                    log.info("fetch %s from %s failed (attempt %d): %s", digest[:12], url, attempt + 1, exc)
                    errors.append(exc)
            if len(bad_peers) == len(peers):
                break
            if attempt + 1 < pol.attempts:
                sleep(delay)
                delay *= 2
    finally:
        if own:
            cl.close()
    rank = (
        DigestMismatchError,
        BlobTooLargeError,
        FetchTimeoutError,
        PeerUnavailableError,
        BlobNotFoundError,
    )
    for kind in rank:
        for e in errors:
            if isinstance(e, kind):
                raise type(e)(f"{e} (after {len(errors)} failed tries over {len(peers)} peers)") from e
    raise errors[-1] if errors else BlobNotFoundError(digest)


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
