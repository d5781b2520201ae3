"""Bulk transfer over HTTP: blobs (updates, checkpoints, transcript states, evidence) addressed by digest.

``fetch_blob`` streams ``GET {url}/blobs/{digest}`` with a size cap enforced while reading (a peer cannot
make us buffer more than the cap), a per-read timeout, a wall-clock deadline for the whole call (a peer that
trickles a byte now and then defeats any per-read timeout), a digest check on arrival, and retries with
exponential backoff across the given peers. Failures are typed (:class:`TransferError` subclasses).

``BlobStore`` (the serving side), the digest helpers and the typed errors are ``protocol.p2p.blobs``'s,
re-exported here.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from protocol.p2p.blobs import (
    BlobNotFoundError,
    BlobTooLargeError,
    DigestFn,
    DigestMismatchError,
    FetchTimeoutError,
    NotModifiedError,
    PeerUnavailableError,
    TransferError,
    check_digest_str,
    sha256_digest,
)
from protocol.p2p.clientcount import CountingTransport, client_counter

log = logging.getLogger(__name__)

__all__ = [
    "FetchPolicy",
    "count_peer_failure",
    "fetch_blob",
    "get_capped",
    "peer_failure_counts",
    "stalled_recently",
]


_failures: dict[str, int] = {}
_failures_lock = threading.Lock()


def count_peer_failure(exc: BaseException) -> None:
    """Count one peer's failure that was not a :class:`TransferError` (an untyped error caused by one
    peer's answer or URL), by exception type; :func:`peer_failure_counts` reads the counts."""
    with _failures_lock:
        _failures[type(exc).__name__] = _failures.get(type(exc).__name__, 0) + 1


def peer_failure_counts() -> dict[str, int]:
    """Untyped per-peer failures seen by this process's fetches, by exception type."""
    with _failures_lock:
        return dict(_failures)


@dataclass(frozen=True)
class FetchPolicy:
    """Limits and retry behaviour of a fetch."""

    #: Largest accepted body in bytes.
    max_bytes: int = 64 * 1024 * 1024
    #: Seconds for connect and for each read, and the wall-clock limit of one attempt at one peer (headers
    #: and body): a peer that trickles bytes to stay under the per-read timeout is abandoned at it.
    timeout: float = 10.0
    #: Attempts over all peers (each attempt tries every peer once).
    attempts: int = 3
    #: First backoff in seconds, doubled after each failed attempt.
    backoff: float = 0.2
    #: Wall-clock seconds for one whole ``fetch_blob`` call (every peer, every attempt); None: ``timeout``
    #: x ``attempts``.
    deadline: float | None = None

    def budget(self) -> float:
        """The effective wall-clock budget of one call."""
        return self.deadline if self.deadline is not None else self.timeout * max(1, self.attempts)


def _stream_one(
    client: httpx.Client,
    url: str,
    digest: str,
    policy: FetchPolicy,
    digest_fn: DigestFn,
    cancel: threading.Event | None = None,
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
                if cancel is not None and cancel.is_set():
                    raise FetchTimeoutError(f"{target}: abandoned at the deadline")
                buf.extend(chunk)
                if len(buf) > policy.max_bytes:
                    raise BlobTooLargeError(f"{target}: body exceeds cap {policy.max_bytes}")
    except httpx.TimeoutException as exc:
        raise FetchTimeoutError(f"{target}: timed out after {policy.timeout}s") from exc
    except (httpx.HTTPError, httpx.InvalidURL, httpx.CookieConflict, httpx.StreamError) as exc:
        raise PeerUnavailableError(f"{target}: {type(exc).__name__}: {exc}") from exc
    data = bytes(buf)
    try:
        got = digest_fn(data)
    except Exception as exc:  # bytes the digest function cannot even parse (e.g. a broken tensor blob)
        raise DigestMismatchError(f"{target}: bytes have no digest: {type(exc).__name__}: {exc}") from exc
    if got.removeprefix("0x") != digest.removeprefix("0x"):
        raise DigestMismatchError(f"{target}: bytes hash to {got}, expected {digest}")
    return data


#: Seconds a peer that was abandoned at the wall-clock limit (a stalling peer) is skipped by later fetches
#: of this process: one staller costs a caller one ``timeout``, not one per blob and attempt.
STALL_COOLDOWN_S = 30.0
_stalled: dict[str, float] = {}
_stalled_lock = threading.Lock()


def _peer_key(url: str) -> str:
    return url.rstrip("/").lower()


def stalled_recently(url: str) -> bool:
    """Whether ``url`` stalled a fetch of this process less than :data:`STALL_COOLDOWN_S` ago."""
    with _stalled_lock:
        at = _stalled.get(_peer_key(url))
    return at is not None and time.monotonic() - at < STALL_COOLDOWN_S


def _mark_stalled(url: str) -> None:
    with _stalled_lock:
        _stalled[_peer_key(url)] = time.monotonic()


def _stream_bounded(
    client: httpx.Client | None,
    url: str,
    digest: str,
    policy: FetchPolicy,
    digest_fn: DigestFn,
    seconds: float,
) -> bytes:
    """:func:`_stream_one` with a wall-clock limit (:func:`_bounded`)."""
    return _bounded(
        lambda cl, cancel: _stream_one(cl, url, digest, policy, digest_fn, cancel),
        client,
        url,
        seconds,
        f"{url.rstrip('/')}/blobs/{digest}",
    )


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context for every client: building one loads the system's CA certificates, 15-20 ms of CPU
    that a new ``httpx.Client`` spent on every fetch, plain HTTP included (30% of a devnet validator's
    verification CPU, measured with py-spy)."""
    return ssl.create_default_context()


def new_client() -> httpx.Client:
    """An HTTP client for one transfer (closed to abandon a stalled one), sharing :func:`_tls_context`,
    counted if the process registered a counter (``protocol.p2p.clientcount``)."""
    counter, tls = client_counter(), _tls_context()
    transport = None if counter is None else CountingTransport(httpx.HTTPTransport(verify=tls), counter)
    return httpx.Client(follow_redirects=False, verify=tls, transport=transport)


def _bounded(
    work: Callable[[httpx.Client, threading.Event], bytes],
    client: httpx.Client | None,
    url: str,
    seconds: float,
    what: str,
) -> bytes:
    """Run ``work(client, cancel)`` with a wall-clock limit: in a worker thread with its own client (unless
    the caller gave one); at the limit ``cancel`` is set, the client closed and the worker abandoned (it
    ends at its next read, at most one read timeout later), so a trickling peer cannot hold the caller.
    A peer that hit the limit, or a read timeout, is marked stalled (:func:`stalled_recently`)."""
    box: dict[str, Any] = {}
    cancel = threading.Event()
    cl = client or new_client()

    def run() -> None:
        try:
            box["data"] = work(cl, cancel)
        except BaseException as exc:  # handed to the caller below
            box["exc"] = exc

    worker = threading.Thread(target=run, name="tessera-fetch", daemon=True)
    worker.start()
    worker.join(max(0.0, seconds))
    if worker.is_alive():
        cancel.set()
        _mark_stalled(url)
        if client is None:
            with contextlib.suppress(Exception):  # closing under a blocked read: whatever it raises is moot
                cl.close()
        raise FetchTimeoutError(f"{what}: no complete answer within {seconds:.1f}s (stalling peer)")
    if client is None:
        cl.close()
    if "exc" in box:
        exc = box["exc"]
        if isinstance(exc, FetchTimeoutError):
            _mark_stalled(url)  # no answer within the per-read timeout: a stall too
        if isinstance(exc, Exception) and not isinstance(exc, TransferError):
            count_peer_failure(exc)
            raise PeerUnavailableError(f"{what}: {type(exc).__name__}: {exc}") from exc
        raise exc
    data: bytes = box["data"]
    return data


def get_capped(
    url: str,
    *,
    max_bytes: int,
    timeout: float,
    client: httpx.Client | None = None,
    headers: dict[str, str] | None = None,
) -> bytes:
    """``GET url`` (with ``headers``) and return the body of a 200 answer, refusing more than ``max_bytes``
    while reading.

    For small JSON answers of untrusted peers (e.g. a validator's ``/signatures/{round}``): raises
    :class:`BlobTooLargeError` on an oversize (or oversize-announced) body, :class:`FetchTimeoutError`
    (no complete answer within ``timeout`` seconds of wall-clock time: a peer that trickles bytes is cut
    off like one that sends none), :class:`PeerUnavailableError` (unreachable, 5xx),
    :class:`BlobNotFoundError` (404), :class:`NotModifiedError` (304, to a conditional request) or
    :class:`TransferError` (any other status).
    """
    return _bounded(
        lambda cl, _cancel: _get_capped_once(cl, url, max_bytes, timeout, headers), client, url, timeout, url
    )


def _get_capped_once(
    cl: httpx.Client, url: str, max_bytes: int, timeout: float, headers: dict[str, str] | None
) -> bytes:
    try:
        with cl.stream("GET", url, timeout=timeout, headers=headers) as resp:
            if resp.status_code == 304:
                raise NotModifiedError(f"{url}: not modified")
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
    except (httpx.HTTPError, httpx.InvalidURL, httpx.CookieConflict, httpx.StreamError) as exc:
        raise PeerUnavailableError(f"{url}: {type(exc).__name__}: {exc}") from exc
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

    Peers are tried in order on each attempt; any failure of one peer moves on to the next. A digest
    mismatch, an oversize body or an untyped error (a URL the client refuses, bytes the digest function
    cannot parse; logged and counted by :func:`count_peer_failure`) is not retried against that peer. Raises the most informative error seen
    when every attempt fails: a mismatch or size error beats a timeout, which beats not-found.
    """
    check_digest_str(digest)
    peers = _peer_urls(urls, digest)
    pol = policy or FetchPolicy()
    errors: list[TransferError] = []
    bad_peers: set[str] = set()
    delay = pol.backoff
    end = time.monotonic() + pol.budget()
    for attempt in range(max(1, pol.attempts)):
        for url in peers:
            if url in bad_peers:
                continue
            left = end - time.monotonic()
            if left <= 0:
                errors.append(
                    FetchTimeoutError(f"fetch of {digest[:18]}: deadline {pol.budget():.1f}s spent")
                )
                break
            if stalled_recently(url):
                errors.append(
                    FetchTimeoutError(
                        f"{url}: stalled a fetch less than {STALL_COOLDOWN_S:.0f}s ago; skipped"
                    )
                )
                continue
            data = _try_peer(
                client, url, digest, pol, digest_fn, min(pol.timeout, left), attempt, errors, bad_peers
            )
            if data is not None:
                return data
        if len(bad_peers) == len(peers) or time.monotonic() >= end:
            break
        if attempt + 1 < pol.attempts:
            sleep(min(delay, max(0.0, end - time.monotonic())))
            delay *= 2
    raise _most_informative(errors, len(peers), digest)


def _peer_urls(urls: Sequence[str] | str, digest: str) -> list[str]:
    """The peers to fetch from (URLs that are not strings are skipped, with a warning); none:
    :class:`BlobNotFoundError`."""
    given = [urls] if isinstance(urls, str) else list(urls)
    peers = [u for u in given if isinstance(u, str)]
    if len(peers) != len(given):
        log.warning("fetch %s: %d peer URLs are not strings; skipped", digest[:12], len(given) - len(peers))
    if not peers:
        raise BlobNotFoundError(f"no peer to fetch {digest} from")
    return peers


def _try_peer(
    client: httpx.Client | None,
    url: str,
    digest: str,
    pol: FetchPolicy,
    digest_fn: DigestFn,
    timeout: float,
    attempt: int,
    errors: list[TransferError],
    bad_peers: set[str],
) -> bytes | None:
    """One attempt at one peer: the blob, or None with the failure in ``errors`` (and the peer in
    ``bad_peers`` when it is not to be asked again: a bad blob, or an untyped error its URL or answer
    caused)."""
    try:
        return _stream_bounded(client, url, digest, pol, digest_fn, timeout)
    except (DigestMismatchError, BlobTooLargeError) as exc:
        log.warning("peer %s served a bad blob: %s", url, exc)
        bad_peers.add(url)
        errors.append(exc)
    except TransferError as exc:
        log.info("fetch %s from %s failed (attempt %d): %s", digest[:12], url, attempt + 1, exc)
        errors.append(exc)
    except Exception as exc:  # anything else one peer's URL or answer causes: skip that peer
        count_peer_failure(exc)
        log.warning(
            "fetch %s from %r failed, peer skipped: %s: %s", digest[:12], url, type(exc).__name__, exc
        )
        bad_peers.add(url)
        errors.append(PeerUnavailableError(f"{url!r}: {type(exc).__name__}: {exc}"))
    return None


def _most_informative(errors: list[TransferError], peers: int, digest: str) -> TransferError:
    """The error to raise when every try failed: a mismatch or size error beats a timeout, which beats
    not-found; its message counts the tries."""
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
                out = type(e)(f"{e} (after {len(errors)} failed tries over {peers} peers)")
                out.__cause__ = e
                return out
    return errors[-1] if errors else BlobNotFoundError(digest)
