"""Update intake: find, fetch and keep miners' updates and evidence, checked against their on-chain
commitments (from the miner, from this validator's store, or from peer validators)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from torch import Tensor

from protocol.p2p.transfer import TransferError, fetch_blob, get_capped, sha256_digest
from protocol.rounds.coordinator import (
    update_commitment,
)
from protocol.wire.tensorblob import decode_tensors, encode_tensors, tensor_blob_digest
from protocol.wire.update import update_digest
from validator.context import FetchSource, FetchState, KeepResidual
from validator.errors import NotAnnouncedError, SourceMismatchError
from validator.parts import ValidatorParts

log = logging.getLogger(__name__)


class IntakeMixin(ValidatorParts):
    """Fetching and holding updates."""

    def _miner_url(self, round: int, miner: str) -> str | None:
        return self.discovery.url_of(round, miner)

    def _fetch_update(self, round: int, miner: str) -> bytes:
        if miner in self._cache.updates:
            return self._cache.updates[miner]
        rec = next((x for x in self.discovery.find(round) if x.address == miner and x.role == "miner"), None)
        if rec is None:
            rec = next(
                (
                    x
                    for x in self.discovery.find(round, fresh=True)
                    if x.address == miner and x.role == "miner"
                ),
                None,
            )
        if rec is None:
            raise NotAnnouncedError(f"{miner} announced nothing for round {round}")
        digest = rec.digest_of("update")
        if digest is None:
            raise TransferError(f"{miner} does not announce an update")
        data = fetch_blob(rec.url, digest, policy=self.fetch_policy)
        self.metrics.bytes_received.labels(kind="update").inc(len(data))
        self._cache.updates[miner] = data
        ev = rec.digest_of("evidence")
        if ev is not None:
            try:
                self._cache.evidence[miner] = fetch_blob(rec.url, ev, policy=self.fetch_policy)
            except TransferError as exc:
                log.info("evidence of %s unavailable: %s", miner, exc)
        return data

    def _state_fetcher(self, url: str | None, keep: int) -> FetchState:
        """Fetches a transcript state, residual or transcript from the miner at ``url`` by digest, checked
        against it; a residual is looked up in, and kept in, the residual cache (next round's source)."""

        def fetch_state(digest: str) -> dict[str, Tensor]:
            kept = self._residuals.get(digest)  # the source residual: fetched or recomputed last round
            if kept is not None:
                return decode_tensors(kept)
            if url is None:
                raise NotAnnouncedError("miner has no URL")
            data = fetch_blob(url, digest, policy=self.fetch_policy, digest_fn=tensor_blob_digest)
            self.metrics.bytes_received.labels(kind="transcript").inc(len(data))
            tensors = decode_tensors(data)
            self._residuals.offer(digest, data, tensors, keep=keep)
            return tensors

        return fetch_state

    def _residual_keeper(self, keep: int) -> KeepResidual:
        """Keeps a residual the validator recomputed bit for bit (its digest is the committed one)."""

        def keep_residual(digest: str, tensors: Mapping[str, Tensor]) -> None:
            self._residuals.offer(digest, encode_tensors(tensors), tensors, keep=keep)

        return keep_residual

    def _source_fetcher(self, miner: str, url: str | None) -> FetchSource:
        """Fetches ``miner``'s own earlier update named by an ``ef.source`` (F12): the digest must be its
        on-chain commitment of that round; the bytes come from this validator's store, the miner or peers."""

        def fetch(s: int, digest_hex: str) -> bytes:
            commitment = self.coord.update_commitments(s).get(miner)
            if commitment is None:
                raise SourceMismatchError(f"{miner} committed no update in round {s}")
            expect = update_commitment(
                self.coord.chain_id, self.coord.contract, s, miner, bytes.fromhex(digest_hex)
            )
            if commitment != expect:
                raise SourceMismatchError(f"{digest_hex[:16]} is not what {miner} committed in round {s}")
            held = self._held_update(s, miner, commitment)
            if held is not None:
                return held
            urls = [u for u in (url, *self.cfg.peer_urls) if u and u != self.url]
            return fetch_blob(urls, "0x" + digest_hex, policy=self.fetch_policy)

        return fetch

    def _prefetch(self, round: int) -> None:
        """Fetch committed updates during REVEAL. A miss starts that miner's withholding grace here, not in
        SCORE_COMMIT, so the grace runs while the phase runs anyway and a withholder holds nobody later."""
        for miner in sorted(self.coord.update_commitments(round)):
            if miner not in self._cache.updates:
                try:
                    self._fetch_update(round, miner)
                except (TransferError, NotAnnouncedError):
                    self._first_miss.setdefault(miner, time.monotonic())

    def _matches_commitment(self, round: int, miner: str, commitment: bytes | None, data: bytes) -> bool:
        return commitment is not None and commitment == update_commitment(
            self.coord.chain_id, self.coord.contract, round, miner, update_digest(data)
        )

    def _keep_update(self, round: int, miner: str, data: bytes) -> None:
        """Store an update whose bytes matched its commitment; served to peers (``/blobs``, ``/updates``)."""
        digest = self.public.put(data, digest_fn=sha256_digest)
        held = dict(self.state.round(round).updates or {})
        if held.get(miner) != digest:
            held[miner] = digest
            with self.state.edit(round) as rec:
                rec.updates = held

    def _held_update(self, round: int, miner: str, commitment: bytes | None) -> bytes | None:
        """The update of ``miner`` in ``round`` if held locally (and matching its commitment)."""
        found: list[bytes] = []
        if self._cache.round == round and miner in self._cache.updates:
            found.append(self._cache.updates[miner])
        v = self.state.verdict(round, miner)
        digests = [(self.state.round(round).updates or {}).get(miner)]
        digests.append("0x" + v.digest if v and v.digest else None)
        for d in digests:
            for store in (self.public, self.state.blobs):
                if d and store.has(d):
                    found.append(store.get(d))
        return next((x for x in found if self._matches_commitment(round, miner, commitment, x)), None)

    def _fetch_missing_update(
        self, round: int, miner: str, commitment: bytes | None, digest: str | None = None
    ) -> bytes | None:
        """Fetch an update the consensus accepted but this validator does not hold: by digest from the
        miner and the peer validators (``/blobs``), else from a peer's ``/updates/{p}/{miner}``. Whatever
        arrives is checked against the on-chain commitment, so no peer has to be trusted."""
        if commitment is None:
            return None
        digests: list[str] = [digest] if digest else []
        v = self.state.verdict(round, miner)
        if v and v.digest:
            digests.append("0x" + v.digest)
        records = [*self.discovery.find(round, fresh=True), *self.discovery.find(round + 1, fresh=True)]
        for rec in records:
            if rec.address.lower() == miner.lower() and rec.role == "miner":
                d = rec.digest_of("update")
                if d is not None and d not in digests:
                    digests.append(d)
        miner_urls = [rec.url for rec in records if rec.address.lower() == miner.lower()]
        peers = [rec.url for rec in records if rec.role == "validator" and rec.address != self.address]
        peers += [u for u in self.cfg.peer_urls if u != self.url]
        peers = [u for u in dict.fromkeys(peers) if u != self.url]
        for d in digests:
            try:
                data = fetch_blob([*dict.fromkeys(miner_urls), *peers], d, policy=self.fetch_policy)
            except TransferError as exc:
                log.info("round %d: update %s of %s not fetched: %s", round, d[:18], miner[:10], exc)
                continue
            if self._matches_commitment(round, miner, commitment, data):
                self._keep_update(round, miner, data)
                return data
        for url in peers:
            try:  # bounded in bytes and in wall time: a peer that drips bytes cannot hold the validator
                body = get_capped(
                    f"{url.rstrip('/')}/updates/{round}/{miner}",
                    max_bytes=self.cfg.verify.max_update_bytes,
                    timeout=self.cfg.fetch_timeout,
                )
            except TransferError as exc:
                log.info("round %d: %s did not serve the update of %s: %s", round, url, miner[:10], exc)
                continue
            if self._matches_commitment(round, miner, commitment, body):
                self._keep_update(round, miner, body)
                return body
        return None
