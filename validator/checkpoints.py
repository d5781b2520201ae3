"""Checkpoints: hold theta_r, merge the consensus' updates into theta_{r+1}, sign it, gather the other
validators' signatures and certify it on-chain."""

from __future__ import annotations

import logging
import time

import httpx

from protocol.errors import ProtocolError
from protocol.p2p.blobs import TransferError
from protocol.p2p.transfer import fetch_blob
from protocol.rounds.coordinator import CoordinatorError, Settlement
from protocol.runspec import COMPUTE_LOCK
from protocol.wire.records import Served
from protocol.wire.tensorblob import (
    decode_tensors,
    encode_tensors,
    join_checkpoint,
    split_checkpoint,
    tensor_blob_digest,
    tensors_digest,
)
from protocol.wire.update import decode_update
from training.errors import MergeError
from training.merge import next_checkpoint
from validator.connections import Connections, Theta
from validator.context import run_model
from validator.errors import CertificationError, MergeFailedError, ValidatorError
from validator.intake import Intake
from validator.usefulness import heldout_loss

log = logging.getLogger(__name__)

#: Largest accepted ``/signatures/{round}`` answer of a peer validator (a few hundred bytes in practice).
MAX_SIGNATURE_RESPONSE_BYTES = 64 * 1024


class Checkpoints:
    """theta_r in, theta_{r+1} certified out; the updates it merges come through ``intake``."""

    def __init__(self, conn: Connections, intake: Intake) -> None:
        self.conn = conn
        self.intake = intake
        self.theta: Theta | None = None
        """theta_r of the round this validator works on (None until known)."""
        self._settled: list[tuple[int, Settlement]] = []

    def take_settled(self) -> list[tuple[int, Settlement]]:
        """The rounds whose settlement :meth:`settle_previous` recorded since the last call, with their
        settlements (the node logs their lines: ``validator.node.ValidatorNode.report_settled``)."""
        taken, self._settled = self._settled, []
        return taken

    def ensure_theta(self, round: int, digest: bytes) -> Theta:
        """theta_round = ``digest``: from this validator's store, the genesis, or a peer; announced."""
        c = self.conn
        hexd = "0x" + digest.hex()
        if self.theta is not None and self.theta.round == round and self.theta.digest == hexd:
            return self.theta
        if c.public.has(hexd):
            tensors = decode_tensors(c.public.get(hexd))
        else:
            genesis = {f"param/{k}": v for k, v in c.spec.genesis_params().items()}
            if tensors_digest(genesis) == hexd:
                tensors = genesis
                c.public.put(encode_tensors(genesis), hexd)
            else:
                urls = c.discovery.urls_for(round, "checkpoint", hexd) + c.peer_urls()
                try:
                    data = fetch_blob(urls, hexd, policy=c.fetch_policy, digest_fn=tensor_blob_digest)
                except TransferError as exc:
                    raise ValidatorError(f"theta_{round} ({hexd[:18]}) unavailable: {exc}") from exc
                c.public.put(data, hexd)
                tensors = decode_tensors(data)
        params, momentum = split_checkpoint(tensors)
        c.state.put_checkpoint(round, hexd)
        self.theta = Theta(round, hexd, params, momentum)
        c.discovery.announce(round, "validator", c.url, [Served("checkpoint", hexd)])
        return self.theta

    def settle_previous(self, round: int) -> None:
        """After round p was finalized: merge, sign and certify theta_{p+1} (idempotent)."""
        c = self.conn
        if c.coord.checkpoint(round + 1) is not None:
            if not c.state.round(round).certified:
                self._record_settlement(round)
                with c.state.edit(round) as rec:
                    rec.certified = True
                c.metrics.rounds.inc()
            return
        if c.state.round(round).merged is None:
            if self.theta is None or self.theta.round != round:
                cp = c.coord.checkpoint(round)
                if cp is None:
                    return
                self.ensure_theta(round, cp)
            assert self.theta is not None
            self._record_settlement(round)
            self._merge(round, self.theta)
        merged = c.state.round(round).merged
        assert merged is not None  # _merge stores it or raises
        self.certify(round, merged)

    def _record_settlement(self, round: int) -> None:
        s = self.conn.coord.settlement(round)
        if s is None:
            return
        rewards = {
            **{k: str(v) for k, v in s.miner_rewards.items()},
            **{k: str(v) for k, v in s.validator_rewards.items()},
        }
        # this validator's own figures (owed, claimed, stake) are read from the chain: validator.api
        with self.conn.state.edit(round) as rec:
            rec.consensus, rec.rewards = dict(s.consensus), rewards
        self._settled.append((round, s))

    def _merge(self, round: int, theta: Theta) -> None:
        c = self.conn
        s = c.coord.settlement(round)
        if s is None:
            raise ValidatorError(f"round {round} has no settlement yet")
        t0 = time.perf_counter()
        contributions = []
        commitments = {m.lower(): x for m, x in c.coord.update_commitments(round).items()}
        # strictly the on-chain consensus: every miner with a positive consensus score, weighted by it, in
        # a fixed order (robust_merge sorts by address), whatever this validator's own verdicts were (F11)
        for miner, score in sorted(s.consensus.items()):
            if score <= 0:
                continue
            commitment = commitments.get(miner.lower())
            data = self.intake.held_update(round, miner, commitment)
            if data is None:
                data = self.intake.fetch_missing_update(round, miner, commitment)
            if data is None:
                raise ValidatorError(
                    f"round {round}: update of {miner} (consensus {score}) is neither held nor served by a peer"
                )
            # the run's model and codec let the decoder's caps cover an honest update of any size
            update = decode_update(data, None, *run_model(theta.params, c.spec))
            contributions.append((float(score), miner, update.pseudo_gradient()))
        try:
            with COMPUTE_LOCK:
                params, momentum = next_checkpoint(
                    theta.params, theta.momentum, contributions, c.spec.outer, c.spec.merge
                )
        except MergeError as exc:
            raise MergeFailedError(f"round {round}: {exc}") from exc
        tensors = join_checkpoint(params, momentum)
        data = encode_tensors(tensors)
        digest = c.public.put(data)
        sig = self.sign_checkpoint(round, bytes.fromhex(digest[2:]))
        with c.state.edit(round) as rec:
            rec.merged = digest
            rec.merged_from = [m for _, m, _ in contributions]
            rec.signature = "0x" + bytes(sig).hex()
            rec.merge_seconds = _seconds_since(t0)
        c.state.put_checkpoint(round + 1, digest)
        with COMPUTE_LOCK:
            after = heldout_loss(c.spec, c.dataset, params, device=c.cfg.device)
        with c.state.edit(round) as rec:
            rec.heldout_after = _loss_figure(after)
        c.discovery.announce(round + 1, "validator", c.url, [Served("checkpoint", digest, len(data))])
        log.info("round %d: merged %d updates into %s", round, len(contributions), digest[:18])

    def sign_checkpoint(self, round: int, digest: bytes) -> bytes:
        """This validator's certificate signature of theta_{round+1} = ``digest`` (served at ``/signatures``)."""
        return self.conn.coord.sign_checkpoint(round, digest)

    def certify(self, round: int, digest: str) -> None:
        """Gather the peers' signatures of theta_{round+1} = ``digest`` and, with a quorum, certify it."""
        c = self.conn
        own = c.state.round(round).signature
        if own is None:
            raise CertificationError(f"round {round}: theta_{round + 1} is not signed by this validator")
        sigs: dict[str, bytes] = {c.address: bytes.fromhex(own[2:])}
        validators = set(c.coord.validators())
        others = validators - {c.address}
        peers = {
            r.url
            for r in c.discovery.find(round + 1, fresh=True, want=others)
            if r.role == "validator" and r.address != c.address
        }
        peers |= set(c.peer_urls())
        for url in sorted(peers):
            try:
                doc = c.peer_json(url, f"/signatures/{round}", MAX_SIGNATURE_RESPONSE_BYTES)
                signer = str(doc["signer"])
                if doc.get("digest") != digest or signer not in validators or signer in sigs:
                    continue
                sig = bytes.fromhex(str(doc["signature"])[2:])
            except (ProtocolError, httpx.HTTPError, ValueError, KeyError, TypeError, RecursionError):
                continue
            # one bad signature would make the aggregate, so the whole certificate, fail: check each
            if not c.coord.check_checkpoint_signature(round, bytes.fromhex(digest[2:]), signer, sig):
                log.warning("round %d: %s served an invalid certificate signature; left out", round, url)
                c.metrics.errors.labels(type="BadPeerSignature").inc()
                continue
            sigs[signer] = sig
        if 3 * len(sigs) < 2 * len(validators):
            c.runtime.phase = f"certifying ({len(sigs)}/{len(validators)} signatures)"
            return
        # the lowest signer submits first; the others wait a little and submit only if still needed
        if min(sigs, key=lambda a: int(a, 16)) != c.address:
            first_seen = c.state.round(round).certify_wait_since
            if first_seen is None:
                with c.state.edit(round) as rec:
                    first_seen = rec.certify_wait_since = time.time()
            if time.time() - first_seen < 5.0:
                return
        try:
            c.coord.certify(round, bytes.fromhex(digest[2:]), sigs)
            log.info(
                "round %d: certified theta_%d = %s with %d signatures",
                round,
                round + 1,
                digest[:18],
                len(sigs),
            )
        except CoordinatorError as exc:
            if c.coord.checkpoint(round + 1) is None:
                raise CertificationError(f"certifying theta_{round + 1} failed: {exc}") from exc


def _seconds_since(t0: float) -> float:
    """Seconds since ``t0`` (``time.perf_counter``) as the round record keeps them (0.1 ms)."""
    return round(time.perf_counter() - t0, 4)


def _loss_figure(loss: float) -> float:
    """A loss as the round record keeps it (6 decimals)."""
    return round(loss, 6)
