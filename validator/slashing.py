"""Slashing: propose provable failures on-chain, and vote on peers' evidence after replaying it (F8)."""

from __future__ import annotations

import logging

import httpx
from eth_utils import keccak
from torch import Tensor

from protocol.errors import ProtocolError
from protocol.p2p.blobs import TransferError
from protocol.p2p.transfer import fetch_blob
from protocol.rounds.coordinator import (
    CoordinatorError,
    RoundState,
)
from protocol.wire.canonical import dumps_canonical
from protocol.wire.tensorblob import (
    decode_tensors,
    tensor_blob_digest,
)
from protocol.wire.update import decode_update, update_digest
from validator.audits import report_unanswered, unanswered
from validator.connections import Connections, Theta
from validator.context import Verdict, run_model
from validator.intake import Intake
from validator.pipeline import VerificationPipeline
from validator.stages import Stage
from validator.witness import Witness

log = logging.getLogger(__name__)

#: Largest accepted ``/verdicts/{round}`` answer of a peer validator (slashing evidence is re-checked).
MAX_VERDICTS_RESPONSE_BYTES = 4 * 1024 * 1024


class Slashing:
    """Proposing and re-checking slashes: peers' evidence is fetched through ``intake`` and re-run by the
    ``pipeline``."""

    def __init__(self, conn: Connections, intake: Intake, pipeline: VerificationPipeline) -> None:
        self.conn = conn
        self.intake = intake
        self.pipeline = pipeline
        self.rechecked_phases: set[tuple[int, int]] = set()
        """(round, phase) in which peers' evidence was re-checked already (once per phase)."""
        self.witness = Witness(conn, intake, pipeline, self.slash)
        """Audits the miners its committees reported unanswered where this validator is a witness."""
        self.peers_of: tuple[int, list[str]] | None = None
        """(round, the other validators) read once a round: whose records the re-check wants."""

    def peer_validator_urls(self, round: int) -> list[str]:
        """The other validators' URLs for ``round``: their records (named, so no DHT read while they came
        over HTTP; the validator list read once a round), then the configured peers."""
        c = self.conn
        if self.peers_of is None or self.peers_of[0] != round:
            self.peers_of = (round, [v for v in c.coord.validators() if v != c.address])
        found = c.discovery.find(round, want=self.peers_of[1])
        peers = [x.url for x in found if x.role == "validator" and x.address != c.address]
        peers += list(c.cfg.peer_urls)
        return [u for u in dict.fromkeys(peers) if u != c.url]

    def slash(self, v: Verdict) -> None:
        """Propose (or vote for) slashing ``v.miner`` on the provable verdict ``v`` (a fraud proof: the
        first one freezes the miner's pay for the round); report an audit ``v`` shows unanswered to the
        committee-quorum path; nothing for any other verdict."""
        if not v.provable:
            if unanswered(v):
                report_unanswered(self.conn.coord, v)
            return
        evidence = keccak(
            dumps_canonical({"round": v.round, "miner": v.miner, "stage": v.stage, "digest": v.digest})
        )
        try:
            self.conn.coord.slash(v.miner, evidence, round=v.round)
            log.warning("round %d: slashing %s on provable %s failure", v.round, v.miner, v.stage)
        except CoordinatorError as exc:
            log.info("slash of %s not counted: %s", v.miner, exc)

    def recheck_peer_slashes(self, st: RoundState, theta: Theta) -> None:
        """Vote on other validators' slashing evidence after re-running it (F8), and on the unanswered
        reports this validator witnesses (``validator.witness``).

        Every validator serves its verdicts with their evidence (``/verdicts/{round}``); a provable
        ``recompute`` failure names the update digest (bound to the on-chain commitment) and the failing
        segment, so it is self-contained. Once the scores are committed (every peer's verdicts are final),
        this validator replays each such segment it did not itself find failing and, if the replay fails,
        votes for the same evidence hash ``keccak({round, miner, stage, digest})``. One catch by any
        validator then suffices for a slash, instead of 2/3 of the stake catching it independently.
        Deterministic stages (format, header, bounds, the anchor, the cosine) are re-run by every validator
        on the same committed bytes anyway, so only the seed-sampled segment replays need this.
        """
        c, r = self.conn, st.round
        if not c.cfg.slash or st.seed is None or (r, int(st.phase)) in self.rechecked_phases:
            return
        self.rechecked_phases.add((r, int(st.phase)))
        self.witness.check(st, theta)  # unanswered reports this validator witnesses
        done: dict[str, bool] = dict(c.state.round(r).rechecked or {})
        commits = c.coord.update_commitments(r)
        for url in self.peer_validator_urls(r):
            try:
                doc = c.peer_json(url, f"/verdicts/{r}", MAX_VERDICTS_RESPONSE_BYTES)
            except (ProtocolError, httpx.HTTPError, ValueError, RecursionError) as exc:
                log.info("round %d: verdicts of %s unavailable: %s", r, url, exc)
                continue
            if not isinstance(doc, dict):
                continue
            for miner, pv in sorted(doc.items()):
                if miner not in commits or not isinstance(pv, dict):
                    continue
                seg, digest = pv.get("evidence", {}).get("segment"), pv.get("digest")
                if not (
                    pv.get("provable") is True
                    and pv.get("stage") == Stage.RECOMPUTE
                    and pv.get("round") == r
                    and isinstance(digest, str)
                    and len(digest) == 64
                    and isinstance(seg, list)
                    and len(seg) == 2
                    and all(isinstance(x, int) and not isinstance(x, bool) for x in seg)
                ):
                    continue
                key = f"{miner}:{digest}"
                own = c.state.verdict(r, miner)
                if key in done or (own and own.stage == Stage.RECOMPUTE and own.provable):
                    continue  # decided already, or this validator caught it itself and voted then
                verdict = self._recheck(st, theta, miner, digest, seg[0], commits[miner])
                if verdict is None:
                    continue  # undecidable now (a state not served): try again in the next phase
                done[key] = verdict.provable
                with c.state.edit(r) as rec:
                    rec.rechecked = dict(done)
                if verdict.provable:
                    log.warning(
                        "round %d: %s's evidence against %s re-checked: %s", r, url, miner, verdict.reason
                    )
                    self.slash(verdict)

    def _recheck(
        self, st: RoundState, theta: Theta, miner: str, digest: str, segment: int, commitment: bytes
    ) -> Verdict | None:
        """Re-run segment ``segment`` of ``miner``'s update ``digest``; a provable verdict if it fails, an
        unprovable one if it replays or the evidence is not about the committed bytes, None if undecided."""
        r = st.round
        v = Verdict(miner=miner, round=r, accepted=False, stage=Stage.RECOMPUTE, reason="", digest=digest)
        data = self.intake.held_update(r, miner, commitment) or self.intake.fetch_missing_update(
            r, miner, commitment, digest="0x" + digest
        )
        if data is None:
            return None
        if update_digest(data).hex() != digest:
            v.reason = "the evidence is not about the committed update"
            return v
        try:
            update = decode_update(data, None, *run_model(theta.params, self.conn.spec))
        except ProtocolError:
            return v  # a format failure is re-checked by every validator's own verification
        url = self.intake.miner_url(r, miner)
        policy = self.conn.fetch_policy

        def fetch_state(d: str) -> dict[str, Tensor]:
            if url is None:
                raise TransferError("miner has no URL")
            return decode_tensors(fetch_blob(url, d, policy=policy, digest_fn=tensor_blob_digest))

        ctx = self.conn.round_context(st, theta)
        failed, reason = self.pipeline.recheck_segment(ctx, miner, update, fetch_state, segment)
        if failed is None:
            return None
        v.provable, v.reason = failed, reason
        return v
