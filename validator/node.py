"""The validator node: watch the chain, verify every committed update, score, settle, merge, certify.

Per round r (see ``protocol.coordinator`` for the phases):

- COMMIT: commit a seed share (its secret stored first);
- REVEAL: reveal the share; fetch every committed update (cheap checks need no seed);
- SCORE_COMMIT: the seed is fixed; run every check (``validator.verify``), store each verdict, then
  store the score vector and salt and commit it; propose/vote slashing on provable failures;
- SCORE_REVEAL: reveal exactly what was committed (checked against the chain first);
- FINALIZE: settle the round on-chain (any validator may; a race is harmless);
- after settlement: merge the updates with positive consensus score (``validator.merge``), store and
  announce theta_{r+1}, sign its digest and collect the other validators' signatures over HTTP; with a
  quorum, certify it on-chain.

Every step is idempotent and written to :class:`validator.state.ValidatorState`, so a restart at any point
resumes without revealing twice or losing a verdict.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import torch
from eth_utils import keccak
from torch import Tensor

from protocol.canonical import check_json_depth, dumps_canonical
from protocol.coordinator import (
    SCORE_MAX,
    Coordinator,
    CoordinatorError,
    Phase,
    RoundState,
    update_commitment,
)
from protocol.discovery import Discovery
from protocol.errors import ProtocolError
from protocol.nodeapi import NodeMetrics, NodeServer, create_node_app
from protocol.nodeloop import failure_reporter, step_forever
from protocol.records import Served
from protocol.runspec import COMPUTE_LOCK, RunSpec, compute_platform, warm_up_torch
from protocol.tensorblob import (
    decode_tensors,
    encode_tensors,
    join_checkpoint,
    split_checkpoint,
    tensor_blob_digest,
    tensors_digest,
)
from protocol.transfer import BlobStore, FetchPolicy, TransferError, fetch_blob, get_capped, sha256_digest
from protocol.update import decode_update, update_digest
from training.config import CodecConfig
from training.data import Dataset, prepare
from training.device import use_deterministic
from validator.config import ValidatorConfig
from validator.errors import CertificationError, SourceMismatchError, ValidatorError
from validator.merge import MergePolicy, next_checkpoint
from validator.state import ValidatorState
from validator.verify import (
    CheckEvidence,
    FetchSource,
    RoundContext,
    Verdict,
    VerifyPolicy,
    heldout_loss,
    recheck_segment,
    verify_update,
)
from validator.web import LIVE_PAGE

log = logging.getLogger(__name__)

#: Blocks before the SCORE_COMMIT deadline after which an unreachable miner's verdict becomes final.
RETRY_MARGIN_BLOCKS = 4
#: Largest accepted ``/verdicts/{round}`` answer of a peer validator (slashing evidence is re-checked).
MAX_VERDICTS_RESPONSE_BYTES = 4 * 1024 * 1024
#: Largest accepted ``/signatures/{round}`` answer of a peer validator (a few hundred bytes in practice).
MAX_SIGNATURE_RESPONSE_BYTES = 64 * 1024


def dev_evidence_checker(chain_id: int, seed: bytes) -> CheckEvidence:
    """Verify evidence against the *development* enclave root of ``attestation.simulated`` (devnet only)."""
    from attestation import AttestationError, Binding, verify
    from attestation.simulated import SimulatedEnclave

    enclave = SimulatedEnclave.from_seed(seed)
    policy = enclave.policy()

    def check(evidence: bytes, round: int, miner: str, digest: bytes) -> str | None:
        now = dt.datetime.now(dt.UTC)
        try:
            verify(
                evidence,
                enclave.collateral(now),
                policy,
                now,
                expected=Binding(chain_id, round, bytes.fromhex(miner[2:]), digest),
            )
        except AttestationError as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    return check


@dataclass
class _Theta:
    round: int
    digest: str
    params: dict[str, Tensor]
    momentum: dict[str, Tensor]


@dataclass
class _RoundCache:
    round: int
    updates: dict[str, bytes] = field(default_factory=dict)
    evidence: dict[str, bytes] = field(default_factory=dict)


class ValidatorNode:
    """A validator: one process, one key, one run."""

    def __init__(
        self,
        cfg: ValidatorConfig,
        spec: RunSpec,
        coord: Coordinator,
        discovery: Discovery,
        private_key: str,
        *,
        check_evidence: CheckEvidence | None = None,
        entropy: Callable[[str, int], bytes] | None = None,
    ) -> None:
        self.cfg = cfg
        # 32 fresh bytes per (purpose, round): seed-share secrets and score salts. A test harness may pass a
        # deterministic source so that runs it compares share their round seeds; a node never does.
        self._entropy = entropy or (lambda purpose, r: os.urandom(32))
        self.spec = spec
        self.coord = coord
        self.discovery = discovery
        self._key = private_key
        self.address = coord.address
        self.check_evidence = check_evidence
        self.state = ValidatorState(cfg.data_dir.expanduser())
        self.public = BlobStore(self.state.dir / "public", digest_fn=tensor_blob_digest)
        self.metrics = NodeMetrics.create("validator")
        self.fetch_policy = FetchPolicy(
            max_bytes=cfg.max_update_bytes, timeout=cfg.fetch_timeout, attempts=cfg.fetch_attempts
        )
        self.policy = VerifyPolicy(
            max_update_bytes=cfg.max_update_bytes,
            max_rel_norm=cfg.max_rel_norm,
            segments_per_miner=cfg.segments_per_miner,
            replay_rel_tol=cfg.replay_rel_tol,
            param_rel_tol=cfg.param_rel_tol,
            ef_rel_tol=cfg.ef_rel_tol,
            min_final_cosine=cfg.min_final_cosine,
            attested_check_probability=cfg.attested_check_probability,
            min_own_gain=cfg.min_own_gain,
            usefulness_rel_norm=cfg.usefulness_rel_norm,
            device=cfg.device,
        )
        self.merge_policy = MergePolicy(cfg.merge_method, cfg.clip_factor, cfg.trim)
        self._ds: Dataset | None = None
        self._theta: _Theta | None = None
        self._cache = _RoundCache(0)
        self.phase = "starting"
        self.last_error = ""
        self.server: NodeServer | None = None
        self.url = ""
        self.history: list[dict[str, Any]] = []
        self._last_phase: tuple[int, int] = (0, -1)
        self._pending: set[str] = set()
        self._first_miss: dict[str, float] = {}
        """When each pending miner's update or states first failed to arrive this round (monotonic)."""
        self._rechecked_phases: set[tuple[int, int]] = set()

    # -- lifecycle -------------------------------------------------------------------------------------
    @property
    def dataset(self) -> Dataset:
        """The run's prepared corpus."""
        if self._ds is None:
            self._ds = prepare(self.spec.load_corpus(), self.spec.model)
        return self._ds

    def start(self) -> ValidatorNode:
        """Start the HTTP API and register on-chain if needed."""
        torch.set_num_threads(max(1, self.cfg.threads))
        use_deterministic(self.cfg.device)
        log.info("torch warm-up took %.2fs (%s)", warm_up_torch(), compute_platform())
        app = create_node_app(role="validator", status=self.status, store=self.public, metrics=self.metrics)
        self._add_routes(app)
        self.server = NodeServer(app, self.cfg.host, self.cfg.port).start()
        self.url = self.cfg.public_url or self.server.url
        if self.coord.ensure_registered("validator", self.cfg.stake):
            log.info("registered %s as a validator", self.address)
        self.phase = "ready"
        return self

    def stop(self) -> None:
        """Stop serving."""
        if self.server is not None:
            self.server.stop()

    def _add_routes(self, app: Any) -> None:
        from fastapi import HTTPException
        from fastapi.responses import HTMLResponse

        @app.get("/signatures/{round}", summary="This validator's signature of theta_{round+1}'s digest")
        def signature(round: int) -> dict[str, Any]:
            rec = self.state.rounds().get(round, {})
            if "signature" not in rec:
                raise HTTPException(status_code=404, detail="not signed yet")
            return {
                "round": round,
                "digest": rec["merged"],
                "signer": self.address,
                "signature": rec["signature"],
            }

        from fastapi.responses import Response

        @app.get(
            "/updates/{round}/{miner}",
            summary="The update this validator holds for a miner (bytes that matched its commitment)",
            response_class=Response,
            responses={
                200: {
                    "content": {
                        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
                    }
                }
            },
        )
        def held_update(round: int, miner: str) -> Any:
            # read without creating: a lookup of an unknown round must not add a record (state.json growth)
            digest = self.state.rounds().get(round, {}).get("updates", {}).get(miner)
            if not digest or not self.public.has(digest):
                raise HTTPException(status_code=404, detail="not held")
            return Response(self.public.get(digest), media_type="application/octet-stream")

        @app.get("/verdicts/{round}", summary="Verdicts (with evidence) of a round")
        def verdicts(round: int) -> dict[str, Any]:
            return dict(self.state.rounds().get(round, {}).get("verdicts", {}))

        @app.get("/rounds", summary="Per-round summary: scores, consensus, rewards, losses")
        def rounds() -> list[dict[str, Any]]:
            return self.summary()

        @app.get("/", response_class=HTMLResponse, summary="Live page of the network")
        def live() -> str:
            return LIVE_PAGE

    def summary(self) -> list[dict[str, Any]]:
        """Per-round summary for the API and the live page."""
        out = []
        for r, rec in sorted(self.state.rounds().items()):
            v = rec.get("verdicts", {})
            out.append(
                {
                    "round": r,
                    "scores": {m: x.get("score", 0) for m, x in v.items()},
                    "stages": {m: x.get("stage") for m, x in v.items()},
                    "consensus": rec.get("consensus", {}),
                    "rewards": rec.get("rewards", {}),
                    "heldout_before": rec.get("heldout_before"),
                    "heldout_after": rec.get("heldout_after"),
                    "checkpoint": rec.get("merged"),
                    "certified": rec.get("certified", False),
                    "verify_seconds": rec.get("verify_seconds"),
                }
            )
        return out

    def status(self) -> dict[str, Any]:
        """The /status document."""
        return {
            "role": "validator",
            "address": self.address,
            "url": self.url,
            "round": self._cache.round,
            "phase": self.phase,
            "last_error": self.last_error,
            "theta_round": self._theta.round if self._theta else None,
            "dht_refused_records": self.discovery.refused,
        }

    # -- loop ------------------------------------------------------------------------------------------
    def run(self, stop: threading.Event | None = None) -> None:
        """Step until ``stop`` is set; errors are retried with backoff."""
        step_forever(
            self.step,
            stop=stop or threading.Event(),
            interval=self.cfg.poll_interval,
            retry_on=(ProtocolError, ValidatorError),
            on_error=failure_reporter(self, "validator", log),
        )

    def step(self) -> None:
        """Take whatever action the chain's current state calls for."""
        st = self.coord.current()
        r = st.round
        self.metrics.round.set(r)
        if self._cache.round != r:
            self._cache = _RoundCache(r)
            self._pending = set()
            self._first_miss = {}
        if r > 1:
            self._settle_previous(r - 1)
        if st.checkpoint is None:
            self.phase = "waiting-certificate"
            self._maybe_advance(st)
            return
        theta = self._ensure_theta(r, st.checkpoint)
        key = (r, int(st.phase))
        if key != self._last_phase:
            log.info("round %d: phase %s (block %d, deadline %d)", r, st.phase.name, st.block, st.deadline)
            self._last_phase = key
        if st.block > st.deadline and st.phase != Phase.FINALIZE:
            self.phase = f"{st.phase.name.lower()} closed"
        elif st.phase == Phase.COMMIT:
            self.phase = "commit"
            self._seed_commit(r)
        elif st.phase == Phase.REVEAL:
            self.phase = "reveal"
            self._seed_reveal(r)
            self._prefetch(r)
        elif st.phase == Phase.SCORE_COMMIT:
            self.phase = "verify"
            complete = self._verify_all(st, theta) is not False
            late = self.coord.current().block >= st.deadline - RETRY_MARGIN_BLOCKS
            if (complete and not self._pending) or late:
                # near the deadline, commit what was verified (the rest scores 0) rather than miss the phase
                self._commit_scores(r)
        elif st.phase == Phase.SCORE_REVEAL:
            self.phase = "score-reveal"
            self._reveal_scores(r)
            self._recheck_peer_slashes(st, theta)
        elif st.phase == Phase.FINALIZE:
            self.phase = "finalize"
            self._recheck_peer_slashes(st, theta)
            try:
                self.coord.finalize(r)
            except CoordinatorError as exc:
                if self.coord.current().round == r:
                    raise
                log.info("round %d finalized by another validator (%s)", r, exc)
        self._maybe_advance(st)

    def _maybe_advance(self, st: RoundState) -> None:
        if st.phase != Phase.FINALIZE and st.block > st.deadline:
            try:
                self.coord.advance()
            except CoordinatorError:
                pass

    # -- checkpoints -----------------------------------------------------------------------------------
    def _ensure_theta(self, r: int, digest: bytes) -> _Theta:
        hexd = "0x" + digest.hex()
        if self._theta is not None and self._theta.round == r and self._theta.digest == hexd:
            return self._theta
        if self.public.has(hexd):
            tensors = decode_tensors(self.public.get(hexd))
        else:
            genesis = {f"param/{k}": v for k, v in self.spec.genesis_params().items()}
            if tensors_digest(genesis) == hexd:
                tensors = genesis
                self.public.put(encode_tensors(genesis), hexd)
            else:
                urls = self.discovery.urls_for(r, "checkpoint", hexd) + [
                    u for u in self.cfg.peer_urls if u != self.url
                ]
                try:
                    data = fetch_blob(urls, hexd, policy=self.fetch_policy, digest_fn=tensor_blob_digest)
                except TransferError as exc:
                    raise ValidatorError(f"theta_{r} ({hexd[:18]}) unavailable: {exc}") from exc
                self.public.put(data, hexd)
                tensors = decode_tensors(data)
        params, momentum = split_checkpoint(tensors)
        self.state.put_checkpoint(r, hexd)
        self._theta = _Theta(r, hexd, params, momentum)
        self.discovery.announce(r, "validator", self.url, [Served("checkpoint", hexd)])
        return self._theta

    # -- seed ------------------------------------------------------------------------------------------
    def _seed_commit(self, r: int) -> None:
        committed, _ = self.coord.seed_share_status(r)
        if committed:
            return
        rec = self.state.round(r)
        if "seed_secret" not in rec:
            self.state.set(r, seed_secret=self._entropy("seed", r).hex())
        self.coord.commit_seed(r, bytes.fromhex(self.state.round(r)["seed_secret"]))

    def _seed_reveal(self, r: int) -> None:
        committed, revealed = self.coord.seed_share_status(r)
        secret = self.state.round(r).get("seed_secret")
        if committed and not revealed and secret:
            self.coord.reveal_seed(r, bytes.fromhex(secret))

    # -- verification ----------------------------------------------------------------------------------
    def _miner_url(self, r: int, miner: str) -> str | None:
        return self.discovery.url_of(r, miner)

    def _fetch_update(self, r: int, miner: str) -> bytes:
        if miner in self._cache.updates:
            return self._cache.updates[miner]
        rec = next((x for x in self.discovery.find(r) if x.address == miner and x.role == "miner"), None)
        if rec is None:
            rec = next(
                (x for x in self.discovery.find(r, fresh=True) if x.address == miner and x.role == "miner"),
                None,
            )
        if rec is None:
            raise TransferError(f"{miner} announced nothing for round {r}")
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

    def _prefetch(self, r: int) -> None:
        for miner in sorted(self.coord.update_commitments(r)):
            if miner not in self._cache.updates:
                try:
                    self._fetch_update(r, miner)
                except TransferError:
                    pass

    def _verify_all(self, st: RoundState, theta: _Theta) -> bool | None:
        """Verify every committed update not judged yet; False if the deadline cut it short (None, from
        subclasses that do not say, counts as complete)."""
        r = st.round
        if self.state.round(r).get("scores") is not None:
            return True
        if st.seed is None:
            log.warning("round %d: in SCORE_COMMIT without a seed", r)
            return False
        commits = self.coord.update_commitments(r)
        log.info("round %d: verifying %d committed updates", r, len(commits))
        ctx = self._round_context(st, theta)
        t0 = time.perf_counter()
        complete = True
        # updates already fetched first: a peer that stalls must not eat the time of the others
        for miner in sorted(commits, key=lambda a: (a not in self._cache.updates, int(a, 16))):
            if self.state.verdict(r, miner) is not None:
                continue
            if self.coord.current().block >= st.deadline - RETRY_MARGIN_BLOCKS:
                log.warning(
                    "round %d: score-commit deadline near; %s left unverified (scored 0)", r, miner[:10]
                )
                complete = False
                break
            url = self._miner_url(r, miner)

            def fetch_state(digest: str, url: str | None = url) -> dict[str, Tensor]:
                if url is None:
                    raise TransferError("miner has no URL")
                data = fetch_blob(url, digest, policy=self.fetch_policy, digest_fn=tensor_blob_digest)
                self.metrics.bytes_received.labels(kind="transcript").inc(len(data))
                return decode_tensors(data)

            # this miner's verification stops where the phase's margin begins (issue 10): the chain is
            # asked between stages and replayed segments, so a slow miner cannot push the commit late
            def out_of_time(limit: int = st.deadline - RETRY_MARGIN_BLOCKS) -> bool:
                return self.coord.current().block >= limit

            now_block = self.coord.current().block
            verdict, _update = verify_update(
                ctx,
                miner,
                commits[miner],
                lambda miner=miner: self._fetch_update(r, miner),  # type: ignore[misc]
                fetch_state,
                self.policy,
                evidence=self._cache.evidence.get(miner),
                check_evidence=self.check_evidence,
                fetch_source=self._source_fetcher(miner, url),
                out_of_time=out_of_time,
            )
            retryable = verdict.stage == "fetch" or (verdict.stage == "recompute" and not verdict.provable)
            first_miss = self._first_miss.setdefault(miner, time.monotonic()) if retryable else 0.0
            in_grace = time.monotonic() - first_miss < self.cfg.withhold_grace_seconds
            if retryable and in_grace and now_block < st.deadline - RETRY_MARGIN_BLOCKS:
                # a peer that is slow or restarting: try again next step, for at most the grace period, so
                # that a miner that withholds costs the others no more than that (issue 10)
                self._pending.add(miner)
                self._cache.updates.pop(miner, None)
                log.info("round %d: %s not verifiable yet (%s); retrying", r, miner[:10], verdict.reason)
                continue
            self._pending.discard(miner)
            if verdict.digest and verdict.stage not in ("commit", "fetch", "digest"):
                # keep every update whose bytes matched the commitment, accepted or not: the consensus may
                # accept what this validator refused, and the merge must follow the consensus (F11)
                if miner in self._cache.updates:
                    self._keep_update(r, miner, self._cache.updates[miner])
            self.state.put_verdict(r, miner, verdict.to_json())
            self.metrics.verifications.labels(outcome=verdict.stage).inc()
            log.info(
                "round %d: %s -> %s (%s) score %d",
                r,
                miner[:10],
                verdict.stage,
                verdict.reason,
                verdict.score,
            )
            if verdict.provable and self.cfg.slash:
                self._slash(verdict)
        with COMPUTE_LOCK:
            before = heldout_loss(self.spec, self.dataset, theta.params, device=self.cfg.device)
        self.state.set(r, verify_seconds=round(time.perf_counter() - t0, 4), heldout_before=round(before, 6))
        return complete

    def _slash(self, v: Verdict) -> None:
        evidence = keccak(
            dumps_canonical({"round": v.round, "miner": v.miner, "stage": v.stage, "digest": v.digest})
        )
        try:
            self.coord.slash(v.miner, evidence)
            log.warning("round %d: slashing %s on provable %s failure", v.round, v.miner, v.stage)
        except CoordinatorError as exc:
            log.info("slash of %s not counted: %s", v.miner, exc)

    def _recheck_peer_slashes(self, st: RoundState, theta: _Theta) -> None:
        """Vote on other validators' slashing evidence after re-running it (F8).

        Every validator serves its verdicts with their evidence (``/verdicts/{round}``); a provable
        ``recompute`` failure names the update digest (bound to the on-chain commitment) and the failing
        segment, so it is self-contained. Once the scores are committed (every peer's verdicts are final),
        this validator replays each such segment it did not itself find failing and, if the replay fails,
        votes for the same evidence hash ``keccak({round, miner, stage, digest})``. One catch by any
        validator then suffices for a slash, instead of 2/3 of the stake catching it independently.
        Deterministic stages (format, header, bounds, the anchor, the cosine) are re-run by every validator
        on the same committed bytes anyway, so only the seed-sampled segment replays need this.
        """
        r = st.round
        if not self.cfg.slash or st.seed is None or (r, int(st.phase)) in self._rechecked_phases:
            return
        self._rechecked_phases.add((r, int(st.phase)))
        done: dict[str, bool] = dict(self.state.round(r).get("rechecked", {}))
        commits = self.coord.update_commitments(r)
        peers = [x.url for x in self.discovery.find(r) if x.role == "validator" and x.address != self.address]
        peers += list(self.cfg.peer_urls)
        for url in [u for u in dict.fromkeys(peers) if u != self.url]:
            try:
                body = get_capped(
                    f"{url.rstrip('/')}/verdicts/{r}",
                    max_bytes=MAX_VERDICTS_RESPONSE_BYTES,
                    timeout=self.cfg.fetch_timeout,
                )
                check_json_depth(body)
                doc = json.loads(body)
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
                    and pv.get("stage") == "recompute"
                    and pv.get("round") == r
                    and isinstance(digest, str)
                    and len(digest) == 64
                    and isinstance(seg, list)
                    and len(seg) == 2
                    and all(isinstance(x, int) and not isinstance(x, bool) for x in seg)
                ):
                    continue
                key = f"{miner}:{digest}"
                own = self.state.verdict(r, miner)
                if key in done or (own and own.get("stage") == "recompute" and own.get("provable")):
                    continue  # decided already, or this validator caught it itself and voted then
                verdict = self._recheck(st, theta, miner, digest, seg[0], commits[miner])
                if verdict is None:
                    continue  # undecidable now (a state not served): try again in the next phase
                done[key] = verdict.provable
                self.state.set(r, rechecked=done)
                if verdict.provable:
                    log.warning(
                        "round %d: %s's evidence against %s re-checked: %s", r, url, miner, verdict.reason
                    )
                    self._slash(verdict)

    def _recheck(
        self, st: RoundState, theta: _Theta, miner: str, digest: str, segment: int, commitment: bytes
    ) -> Verdict | None:
        """Re-run segment ``segment`` of ``miner``'s update ``digest``; a provable verdict if it fails, an
        unprovable one if it replays or the evidence is not about the committed bytes, None if undecided."""
        r = st.round
        v = Verdict(miner=miner, round=r, accepted=False, stage="recompute", reason="", digest=digest)
        data = self._held_update(r, miner, commitment) or self._fetch_missing_update(
            r, miner, commitment, digest="0x" + digest
        )
        if data is None:
            return None
        if update_digest(data).hex() != digest:
            v.reason = "the evidence is not about the committed update"
            return v
        try:
            update = decode_update(data, None, *self._run_model(theta))
        except ProtocolError:
            return v  # a format failure is re-checked by every validator's own verification
        url = self._miner_url(r, miner)

        def fetch_state(d: str) -> dict[str, Tensor]:
            if url is None:
                raise TransferError("miner has no URL")
            return decode_tensors(fetch_blob(url, d, policy=self.fetch_policy, digest_fn=tensor_blob_digest))

        failed, reason = recheck_segment(
            self._round_context(st, theta), miner, update, fetch_state, self.policy, segment
        )
        if failed is None:
            return None
        v.provable, v.reason = failed, reason
        return v

    def _run_model(self, theta: _Theta) -> tuple[dict[str, tuple[int, ...]], CodecConfig]:
        """The run's parameter shapes and codec, which an update's header must match before it decodes."""
        return {n: tuple(t.shape) for n, t in theta.params.items()}, self.spec.codec

    def _round_context(self, st: RoundState, theta: _Theta) -> RoundContext:
        assert st.seed is not None
        return RoundContext(
            spec=self.spec,
            dataset=self.dataset,
            round=st.round,
            chain_id=self.coord.chain_id,
            contract=self.coord.contract,
            validator=self.address,
            checkpoint=theta.params,
            checkpoint_digest=bytes.fromhex(theta.digest[2:]),
            assign_seed=st.assign_seed,
            seed=st.seed,
            registry=self.coord.miners(st.round),
            validators=self.coord.validators(),
        )

    def _commit_scores(self, r: int) -> None:
        committed, _ = self.coord.score_status(r)
        if committed:
            return
        rec = self.state.round(r)
        if rec.get("scores") is None:
            miners = sorted(self.coord.update_commitments(r), key=lambda a: int(a, 16))
            scores = []
            for m in miners:
                v = self.state.verdict(r, m)
                scores.append(min(SCORE_MAX, int(v["score"])) if v else 0)
            self.state.set(r, miners=miners, scores=scores, salt=self._entropy("salt", r).hex())
            rec = self.state.round(r)
        self.coord.commit_scores(r, rec["scores"], bytes.fromhex(rec["salt"]))
        self.state.set(r, score_committed=True)

    def _reveal_scores(self, r: int) -> None:
        committed, revealed = self.coord.score_status(r)
        rec = self.state.round(r)
        if revealed or not committed or rec.get("scores") is None:
            if revealed and not rec.get("score_revealed"):
                self.state.set(r, score_revealed=True)
            return
        self.coord.reveal_scores(r, rec["scores"], bytes.fromhex(rec["salt"]))
        self.state.set(r, score_revealed=True)

    # -- settlement, merge, certificate ----------------------------------------------------------------
    def _settle_previous(self, p: int) -> None:
        """After round p was finalized: merge, sign and certify theta_{p+1} (idempotent)."""
        if self.coord.checkpoint(p + 1) is not None:
            rec = self.state.round(p)
            if not rec.get("certified"):
                self._record_settlement(p)
                self.state.set(p, certified=True)
                self.metrics.rounds.inc()
            return
        rec = self.state.round(p)
        if "merged" not in rec:
            if self._theta is None or self._theta.round != p:
                cp = self.coord.checkpoint(p)
                if cp is None:
                    return
                self._ensure_theta(p, cp)
            assert self._theta is not None
            self._record_settlement(p)
            self._merge(p, self._theta)
            rec = self.state.round(p)
        self._certify(p, rec["merged"])

    def _record_settlement(self, p: int) -> None:
        s = self.coord.settlement(p)
        if s is None:
            return
        rewards = {
            **{k: str(v) for k, v in s.miner_rewards.items()},
            **{k: str(v) for k, v in s.validator_rewards.items()},
        }
        self.state.set(p, consensus=s.consensus, rewards=rewards)
        mine = s.validator_rewards.get(self.address, 0)
        if mine:
            self.metrics.rewards.inc(mine)

    def _merge(self, p: int, theta: _Theta) -> None:
        s = self.coord.settlement(p)
        if s is None:
            raise ValidatorError(f"round {p} has no settlement yet")
        t0 = time.perf_counter()
        contributions = []
        commitments = {m.lower(): c for m, c in self.coord.update_commitments(p).items()}
        # strictly the on-chain consensus: every miner with a positive consensus score, weighted by it, in
        # a fixed order (robust_merge sorts by address), whatever this validator's own verdicts were (F11)
        for miner, score in sorted(s.consensus.items()):
            if score <= 0:
                continue
            commitment = commitments.get(miner.lower())
            data = self._held_update(p, miner, commitment)
            if data is None:
                data = self._fetch_missing_update(p, miner, commitment)
            if data is None:
                raise ValidatorError(
                    f"round {p}: update of {miner} (consensus {score}) is neither held nor served by a peer"
                )
            # the run's model and codec let the decoder's caps cover an honest update of any size (issue 11)
            update = decode_update(data, None, *self._run_model(theta))
            contributions.append((float(score), miner, update.pseudo_gradient()))
        with COMPUTE_LOCK:
            params, momentum = next_checkpoint(
                theta.params, theta.momentum, contributions, self.spec.outer, self.merge_policy
            )
        tensors = join_checkpoint(params, momentum)
        data = encode_tensors(tensors)
        digest = self.public.put(data)
        sig = self._sign_checkpoint(p, bytes.fromhex(digest[2:]))
        self.state.set(
            p,
            merged=digest,
            merged_from=[m for _, m, _ in contributions],
            signature="0x" + bytes(sig).hex(),
            merge_seconds=round(time.perf_counter() - t0, 4),
        )
        self.state.put_checkpoint(p + 1, digest)
        with COMPUTE_LOCK:
            after = heldout_loss(self.spec, self.dataset, params, device=self.cfg.device)
        self.state.set(p, heldout_after=round(after, 6))
        self.discovery.announce(p + 1, "validator", self.url, [Served("checkpoint", digest, len(data))])
        log.info("round %d: merged %d updates into %s", p, len(contributions), digest[:18])

    def _sign_checkpoint(self, p: int, digest: bytes) -> bytes:
        """This validator's certificate signature of theta_{p+1} = ``digest`` (served at ``/signatures``)."""
        return self.coord.sign_checkpoint(p, digest)

    def _matches_commitment(self, p: int, miner: str, commitment: bytes | None, data: bytes) -> bool:
        return commitment is not None and commitment == update_commitment(
            self.coord.chain_id, self.coord.contract, p, miner, update_digest(data)
        )

    def _keep_update(self, p: int, miner: str, data: bytes) -> None:
        """Store an update whose bytes matched its commitment; served to peers (``/blobs``, ``/updates``)."""
        digest = self.public.put(data, digest_fn=sha256_digest)
        held = dict(self.state.round(p).get("updates", {}))
        if held.get(miner) != digest:
            held[miner] = digest
            self.state.set(p, updates=held)

    def _held_update(self, p: int, miner: str, commitment: bytes | None) -> bytes | None:
        """The update of ``miner`` in round ``p`` if held locally (and matching its commitment)."""
        found: list[bytes] = []
        if self._cache.round == p and miner in self._cache.updates:
            found.append(self._cache.updates[miner])
        v = self.state.verdict(p, miner)
        digests = [self.state.round(p).get("updates", {}).get(miner)]
        digests.append("0x" + v["digest"] if v and v.get("digest") else None)
        for d in digests:
            for store in (self.public, self.state.blobs):
                if d and store.has(d):
                    found.append(store.get(d))
        return next((x for x in found if self._matches_commitment(p, miner, commitment, x)), None)

    def _fetch_missing_update(
        self, p: int, miner: str, commitment: bytes | None, digest: str | None = None
    ) -> bytes | None:
        """Fetch an update the consensus accepted but this validator does not hold: by digest from the
        miner and the peer validators (``/blobs``), else from a peer's ``/updates/{p}/{miner}``. Whatever
        arrives is checked against the on-chain commitment, so no peer has to be trusted."""
        if commitment is None:
            return None
        digests: list[str] = [digest] if digest else []
        v = self.state.verdict(p, miner)
        if v and v.get("digest"):
            digests.append("0x" + v["digest"])
        records = [*self.discovery.find(p, fresh=True), *self.discovery.find(p + 1, fresh=True)]
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
                log.info("round %d: update %s of %s not fetched: %s", p, d[:18], miner[:10], exc)
                continue
            if self._matches_commitment(p, miner, commitment, data):
                self._keep_update(p, miner, data)
                return data
        for url in peers:
            try:  # bounded in bytes and in wall time: a peer that drips bytes cannot hold the validator
                body = get_capped(
                    f"{url.rstrip('/')}/updates/{p}/{miner}",
                    max_bytes=self.cfg.max_update_bytes,
                    timeout=self.cfg.fetch_timeout,
                )
            except TransferError as exc:
                log.info("round %d: %s did not serve the update of %s: %s", p, url, miner[:10], exc)
                continue
            if self._matches_commitment(p, miner, commitment, body):
                self._keep_update(p, miner, body)
                return body
        return None

    def _certify(self, p: int, digest: str) -> None:
        sigs: dict[str, bytes] = {self.address: bytes.fromhex(self.state.round(p)["signature"][2:])}
        peers = {
            r.url
            for r in self.discovery.find(p + 1, fresh=True)
            if r.role == "validator" and r.address != self.address
        }
        peers |= {u for u in self.cfg.peer_urls if u != self.url}
        validators = set(self.coord.validators())
        for url in sorted(peers):
            try:
                body = get_capped(
                    f"{url.rstrip('/')}/signatures/{p}",
                    max_bytes=MAX_SIGNATURE_RESPONSE_BYTES,
                    timeout=self.cfg.fetch_timeout,
                )
                check_json_depth(body)
                doc = json.loads(body)
                signer = str(doc["signer"])
                if doc.get("digest") != digest or signer not in validators or signer in sigs:
                    continue
                sig = bytes.fromhex(str(doc["signature"])[2:])
            except (ProtocolError, httpx.HTTPError, ValueError, KeyError, TypeError, RecursionError):
                continue
            # one bad signature would make the aggregate, so the whole certificate, fail: check each
            if not self.coord.check_checkpoint_signature(p, bytes.fromhex(digest[2:]), signer, sig):
                log.warning("round %d: %s served an invalid certificate signature; left out", p, url)
                self.metrics.errors.labels(type="BadPeerSignature").inc()
                continue
            sigs[signer] = sig
        if 3 * len(sigs) < 2 * len(validators):
            self.phase = f"certifying ({len(sigs)}/{len(validators)} signatures)"
            return
        # the lowest signer submits first; the others wait a little and submit only if still needed
        if min(sigs, key=lambda a: int(a, 16)) != self.address:
            rec = self.state.round(p)
            first_seen = rec.get("certify_wait_since") or time.time()
            if "certify_wait_since" not in rec:
                self.state.set(p, certify_wait_since=first_seen)
            if time.time() - first_seen < 5.0:
                return
        try:
            self.coord.certify(p, bytes.fromhex(digest[2:]), sigs)
            log.info("round %d: certified theta_%d = %s with %d signatures", p, p + 1, digest[:18], len(sigs))
        except CoordinatorError as exc:
            if self.coord.checkpoint(p + 1) is None:
                raise CertificationError(f"certifying theta_{p + 1} failed: {exc}") from exc
