"""Update intake: find, fetch and keep miners' updates and evidence, checked against their on-chain
commitments (from the miner, from this validator's store, or from peer validators); and the fetchers a
verification reads through (:meth:`Intake.incoming` hands the pipeline one miner's update with them)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from torch import Tensor

from protocol.p2p.blobs import TransferError, sha256_digest
from protocol.p2p.transfer import fetch_blob, get_capped
from protocol.wire.commitments import update_commitment
from protocol.wire.tensorblob import decode_tensors, encode_tensors, tensor_blob_digest
from protocol.wire.update import update_digest
from validator.connections import Connections, RoundCache
from validator.context import FetchSource, FetchState, Incoming, KeepResidual
from validator.errors import NotAnnouncedError, SourceMismatchError
from validator.residuals import ResidualCache

log = logging.getLogger(__name__)


class Intake:
    """Fetching and holding updates: the round's in memory (:attr:`cache`), those whose bytes matched their
    commitment in the blob store and the state, residuals in their cache."""

    def __init__(self, conn: Connections) -> None:
        self.conn = conn
        self.cache = RoundCache(0)
        """The current round's fetched updates and evidence, and its unreachable miners."""
        self.residuals = ResidualCache(conn.state.dir / "residuals")
        """Error-feedback residuals fetched or recomputed, kept for the next round's source."""

    def new_round(self, round: int) -> None:
        """Forget the previous round's fetched material once the chain is in ``round``."""
        if self.cache.round != round:
            self.cache = RoundCache(round)

    def miner_url(self, round: int, miner: str) -> str | None:
        """Where ``miner`` serves its round-``round`` material (None: it announced nothing)."""
        return self.conn.discovery.url_of(round, miner)

    def incoming(
        self,
        round: int,
        miner: str,
        commitment: bytes | None,
        registry_size: int,
        out_of_time: Callable[[], bool] | None = None,
    ) -> Incoming:
        """``miner``'s update of ``round`` as the pipeline takes it: fetched (and its evidence) by this
        intake, its states and earlier updates too, within ``out_of_time``."""
        url = self.miner_url(round, miner)
        keep = 2 * registry_size + 2  # residuals: this round's and the previous, per miner
        return Incoming(
            miner=miner,
            commitment=commitment,
            fetch_update=lambda: self.fetch_update(round, miner),
            fetch_state=self._state_fetcher(url, keep=keep),
            evidence=self.cache.evidence.get(miner),
            fetch_source=self._source_fetcher(miner, url),
            keep_residual=self._residual_keeper(keep=keep),
            out_of_time=out_of_time,
        )

    def fetch_update(self, round: int, miner: str) -> bytes:
        """``miner``'s announced update of ``round`` (and its evidence, if announced), kept for the round;
        raises :class:`NotAnnouncedError` or a transfer error."""
        if miner in self.cache.updates:
            return self.cache.updates[miner]
        discovery = self.conn.discovery
        rec = next((x for x in discovery.find(round) if x.address == miner and x.role == "miner"), None)
        if rec is None:
            rec = next(
                (x for x in discovery.find(round, fresh=True) if x.address == miner and x.role == "miner"),
                None,
            )
        if rec is None:
            raise NotAnnouncedError(f"{miner} announced nothing for round {round}")
        digest = rec.digest_of("update")
        if digest is None:
            raise TransferError(f"{miner} does not announce an update")
        data = fetch_blob(rec.url, digest, policy=self.conn.fetch_policy)
        self.conn.metrics.bytes_received.labels(kind="update").inc(len(data))
        self.cache.updates[miner] = data
        ev = rec.digest_of("evidence")
        if ev is not None:
            try:
                self.cache.evidence[miner] = fetch_blob(rec.url, ev, policy=self.conn.fetch_policy)
            except TransferError as exc:
                log.info("evidence of %s unavailable: %s", miner, exc)
        return data

    def _state_fetcher(self, url: str | None, keep: int) -> FetchState:
        """Fetches a transcript state, residual or transcript from the miner at ``url`` by digest, checked
        against it; a residual is looked up in, and kept in, the residual cache (next round's source)."""

        def fetch_state(digest: str) -> dict[str, Tensor]:
            kept = self.residuals.get(digest)  # the source residual: fetched or recomputed last round
            if kept is not None:
                return decode_tensors(kept)
            if url is None:
                raise NotAnnouncedError("miner has no URL")
            data = fetch_blob(url, digest, policy=self.conn.fetch_policy, digest_fn=tensor_blob_digest)
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

    def _source_fetcher(self, miner: str, url: str | None) -> FetchSource:
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
            return fetch_blob(urls, "0x" + digest_hex, policy=self.conn.fetch_policy)

        return fetch

    def prefetch(self, round: int) -> None:
        """Fetch committed updates during REVEAL. A miss starts that miner's withholding grace here, not in
        SCORE_COMMIT, so the grace runs while the phase runs anyway and a withholder holds nobody later."""
        for miner in sorted(self.conn.coord.update_commitments(round)):
            if miner not in self.cache.updates:
                try:
                    self.fetch_update(round, miner)
                except (TransferError, NotAnnouncedError):
                    self.cache.first_miss.setdefault(miner, time.monotonic())

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
        records = [*conn.discovery.find(round, fresh=True), *conn.discovery.find(round + 1, fresh=True)]
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
