"""Update intake: find, fetch and keep miners' updates and evidence, checked against their on-chain
commitments (from the miner, from this validator's store, or from peer validators); and the fetchers a
verification reads through (:meth:`Intake.incoming` hands the pipeline one miner's update with them)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

from torch import Tensor

from protocol.p2p.blobs import FetchTimeoutError, TransferError, sha256_digest
from protocol.p2p.transfer import FetchPolicy, fetch_blob, get_capped
from protocol.wire.commitments import update_commitment
from protocol.wire.tensorblob import decode_tensors, encode_tensors, tensor_blob_digest
from protocol.wire.update import update_digest
from validator.connections import Connections, RoundCache
from validator.context import FetchSource, FetchState, Incoming, KeepResidual
from validator.errors import NotAnnouncedError, SourceMismatchError
from validator.residuals import ResidualCache

log = logging.getLogger(__name__)

PREFETCH_WORKERS = 2
"""Threads that fetch committed updates in REVEAL (a frozen miner holds one of them, not the node)."""

Remaining = Callable[[], float]
"""Seconds left of a miner's verification budget (``validator.roundschedule.Slot.remaining``)."""


class Intake:
    """Fetching and holding updates: the round's in memory (:attr:`cache`), those whose bytes matched their
    commitment in the blob store and the state, residuals in their cache."""

    def __init__(self, conn: Connections) -> None:
        self.conn = conn
        self.cache = RoundCache(0)
        """The current round's fetched updates and evidence, and its unreachable miners."""
        self.residuals = ResidualCache(conn.state.dir / "residuals")
        """Error-feedback residuals fetched or recomputed, kept for the next round's source."""
        self._lookups = threading.Lock()  # discovery (the DHT client) is asked from one thread at a time
        self._prefetch = ThreadPoolExecutor(PREFETCH_WORKERS, thread_name_prefix="prefetch")
        self._prefetching: dict[tuple[int, str], Future[None]] = {}

    def new_round(self, round: int) -> None:
        """Forget the previous round's fetched material once the chain is in ``round``."""
        if self.cache.round != round:
            self.cache = RoundCache(round)

    def miner_url(self, round: int, miner: str) -> str | None:
        """Where ``miner`` serves its round-``round`` material (None: it announced nothing)."""
        with self._lookups:
            return self.conn.discovery.url_of(round, miner)

    def policy(self, remaining: Remaining | None = None) -> FetchPolicy:
        """The fetch policy bounded by what is left of a miner's budget (not a fixed timeout):
        the whole fetch, every attempt, ends when the budget does; :class:`FetchTimeoutError` (the miner
        did not serve in time) when nothing is left."""
        pol = self.conn.fetch_policy
        if remaining is None:
            return pol
        left = remaining()
        if left <= 0:
            raise FetchTimeoutError("the miner's verification budget is spent")
        return replace(pol, deadline=min(pol.budget(), left), timeout=min(pol.timeout, left))

    def incoming(
        self,
        round: int,
        miner: str,
        commitment: bytes | None,
        registry_size: int,
        out_of_time: Callable[[], bool] | None = None,
        remaining: Remaining | None = None,
    ) -> Incoming:
        """``miner``'s update of ``round`` as the pipeline takes it: fetched (and its evidence) by this
        intake, its states and earlier updates too, within ``out_of_time``; every fetch bounded by
        ``remaining`` (what is left of the miner's budget)."""
        url = self.miner_url(round, miner)
        keep = 2 * registry_size + 2  # residuals: this round's and the previous, per miner
        return Incoming(
            miner=miner,
            commitment=commitment,
            fetch_update=lambda: self.fetch_update(round, miner, remaining),
            # looked up again at the fetch when the miner had no record yet (restarted, re-announcing)
            fetch_state=self._state_fetcher(lambda: url or self.miner_url(round, miner), keep, remaining),
            evidence=self.cache.evidence.get(miner),
            fetch_source=self._source_fetcher(miner, url, remaining),
            keep_residual=self._residual_keeper(keep=keep),
            out_of_time=out_of_time,
        )

    def fetch_update(self, round: int, miner: str, remaining: Remaining | None = None) -> bytes:
        """``miner``'s announced update of ``round`` (and its evidence, if announced), kept for the round;
        raises :class:`NotAnnouncedError` or a transfer error (a timeout past ``remaining``)."""
        cache = self.cache
        if miner in cache.updates:
            return cache.updates[miner]
        discovery = self.conn.discovery
        with self._lookups:
            for fresh in (False, True):
                found = discovery.find(round, fresh=fresh, want=(miner,))
                rec = next((x for x in found if x.address == miner and x.role == "miner"), None)
                if rec is not None:
                    break
        if rec is None:
            raise NotAnnouncedError(f"{miner} announced nothing for round {round}")
        digest = rec.digest_of("update")
        if digest is None:
            raise TransferError(f"{miner} does not announce an update")
        data = fetch_blob(rec.url, digest, policy=self.policy(remaining))
        self.conn.metrics.bytes_received.labels(kind="update").inc(len(data))
        if cache.round == round:  # a fetch that outlived its round keeps nothing
            cache.updates[miner] = data
        ev = rec.digest_of("evidence")
        if ev is not None:
            try:
                cache.evidence[miner] = fetch_blob(rec.url, ev, policy=self.policy(remaining))
            except TransferError as exc:
                log.info("evidence of %s unavailable: %s", miner, exc)
        return data

    def _state_fetcher(
        self, url_of: Callable[[], str | None], keep: int, remaining: Remaining | None = None
    ) -> FetchState:
        """Fetches a transcript state, residual or transcript from the miner at ``url_of()`` by digest,
        checked against it; a residual is looked up in, and kept in, the residual cache (next round's
        source)."""

        def fetch_state(digest: str) -> dict[str, Tensor]:
            kept = self.residuals.get(digest)  # the source residual: fetched or recomputed last round
            if kept is not None:
                return decode_tensors(kept)
            url = url_of()
            if url is None:
                raise NotAnnouncedError("miner has no URL")
            data = fetch_blob(url, digest, policy=self.policy(remaining), digest_fn=tensor_blob_digest)
            self.conn.metrics.bytes_received.labels(kind="transcript").inc(len(data))
            tensors = decode_tensors(data)
            self.residuals.offer(digest, data, tensors, keep=keep)
            return tensors

        return fetch_state

    def _residual_keeper(self, keep: int) -> KeepResidual:
        """Keeps a residual the validator recomputed bit for bit (its digest is the committed one)."""

        def keep_residual(digest: str, tensors: Mapping[str, Tensor]) -> None:
            self.residuals.offer(digest, encode_tensors(tensors), tensors, keep=keep)

        return keep_residual

    def _source_fetcher(self, miner: str, url: str | None, remaining: Remaining | None = None) -> FetchSource:
        """Fetches ``miner``'s own earlier update named by an ``ef.source`` (F12): the digest must be its
        on-chain commitment of that round; the bytes come from this validator's store, the miner or peers."""

        coord = self.conn.coord

        def fetch(s: int, digest_hex: str) -> bytes:
            commitment = coord.update_commitments(s).get(miner)
            if commitment is None:
                raise SourceMismatchError(f"{miner} committed no update in round {s}")
            expect = update_commitment(coord.chain_id, coord.contract, s, miner, bytes.fromhex(digest_hex))
            if commitment != expect:
                raise SourceMismatchError(f"{digest_hex[:16]} is not what {miner} committed in round {s}")
            held = self.held_update(s, miner, commitment)
            if held is not None:
                return held
            urls = [u for u in (url, *self.conn.cfg.peer_urls) if u and u != self.conn.url]
            return fetch_blob(urls, "0x" + digest_hex, policy=self.policy(remaining))

        return fetch

    def prefetch(self, round: int) -> None:
        """Start fetching the committed updates not held yet, in :data:`PREFETCH_WORKERS` threads, during
        REVEAL; returns at once (a miner frozen after announcing holds a thread, not the node).
        A miss starts that miner's withholding grace here, not in SCORE_COMMIT, so the grace runs while
        the phase runs anyway and a withholder holds nobody later."""
        for miner in sorted(self.conn.coord.update_commitments(round)):
            key = (round, miner)
            running = self._prefetching.get(key)
            if miner in self.cache.updates or (running is not None and not running.done()):
                continue
            self._prefetching[key] = self._prefetch.submit(self._prefetch_one, round, miner)
        for key in [k for k, f in self._prefetching.items() if k[0] != round and f.done()]:
            del self._prefetching[key]

    def _prefetch_one(self, round: int, miner: str) -> None:
        cache = self.cache
        try:
            self.fetch_update(round, miner)
        except (TransferError, NotAnnouncedError):
            cache.first_miss.setdefault(miner, time.monotonic())
        except Exception:  # a prefetch is an optimisation: verification fetches again and judges
            log.exception("round %d: prefetch of %s failed", round, miner[:10])

    def matches_commitment(self, round: int, miner: str, commitment: bytes | None, data: bytes) -> bool:
        """Whether ``data`` is what ``miner`` committed to in ``round``."""
        coord = self.conn.coord
        return commitment is not None and commitment == update_commitment(
            coord.chain_id, coord.contract, round, miner, update_digest(data)
        )

    def keep_update(self, round: int, miner: str, data: bytes) -> None:
        """Store an update whose bytes matched its commitment; served to peers (``/blobs``, ``/updates``)."""
        state = self.conn.state
        digest = self.conn.public.put(data, digest_fn=sha256_digest)
        held = dict(state.round(round).updates or {})
        if held.get(miner) != digest:
            held[miner] = digest
            with state.edit(round) as rec:
                rec.updates = held

    def keep_verified(self, round: int, miner: str) -> None:
        """Keep ``miner``'s fetched update of this round, if any (its bytes matched the commitment)."""
        if self.cache.round == round and miner in self.cache.updates:
            self.keep_update(round, miner, self.cache.updates[miner])

    def held_update(self, round: int, miner: str, commitment: bytes | None) -> bytes | None:
        """The update of ``miner`` in ``round`` if held locally (and matching its commitment)."""
        state = self.conn.state
        found: list[bytes] = []
        if self.cache.round == round and miner in self.cache.updates:
            found.append(self.cache.updates[miner])
        v = state.verdict(round, miner)
        digests = [(state.round(round).updates or {}).get(miner)]
        digests.append("0x" + v.digest if v and v.digest else None)
        for d in digests:
            for store in (self.conn.public, state.blobs):
                if d and store.has(d):
                    found.append(store.get(d))
        return next((x for x in found if self.matches_commitment(round, miner, commitment, x)), None)

    def fetch_missing_update(
        self, round: int, miner: str, commitment: bytes | None, digest: str | None = None
    ) -> bytes | None:
        """Fetch an update the consensus accepted but this validator does not hold: by digest from the
        miner and the peer validators (``/blobs``), else from a peer's ``/updates/{p}/{miner}``. Whatever
        arrives is checked against the on-chain commitment, so no peer has to be trusted."""
        if commitment is None:
            return None
        conn = self.conn
        digests: list[str] = [digest] if digest else []
        v = conn.state.verdict(round, miner)
        if v and v.digest:
            digests.append("0x" + v.digest)
        records = [
            *conn.discovery.find(round, fresh=True, want=(miner,)),
            *conn.discovery.find(round + 1, fresh=True, want=(miner,)),
        ]
        for rec in records:
            if rec.address.lower() == miner.lower() and rec.role == "miner":
                d = rec.digest_of("update")
                if d is not None and d not in digests:
                    digests.append(d)
        miner_urls = [rec.url for rec in records if rec.address.lower() == miner.lower()]
        peers = [rec.url for rec in records if rec.role == "validator" and rec.address != conn.address]
        peers += [u for u in conn.cfg.peer_urls if u != conn.url]
        peers = [u for u in dict.fromkeys(peers) if u != conn.url]
        for d in digests:
            try:
                data = fetch_blob([*dict.fromkeys(miner_urls), *peers], d, policy=conn.fetch_policy)
            except TransferError as exc:
                log.info("round %d: update %s of %s not fetched: %s", round, d[:18], miner[:10], exc)
                continue
            if self.matches_commitment(round, miner, commitment, data):
                self.keep_update(round, miner, data)
                return data
        for url in peers:
            try:  # bounded in bytes and in wall time: a peer that drips bytes cannot hold the validator
                body = get_capped(
                    f"{url.rstrip('/')}/updates/{round}/{miner}",
                    max_bytes=conn.cfg.verify.max_update_bytes,
                    timeout=conn.cfg.fetch_timeout,
                )
            except TransferError as exc:
                log.info("round %d: %s did not serve the update of %s: %s", round, url, miner[:10], exc)
                continue
            if self.matches_commitment(round, miner, commitment, body):
                self.keep_update(round, miner, body)
                return body
        return None
