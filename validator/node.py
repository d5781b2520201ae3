"""The validator node: watch the chain, verify every committed update, score, settle, merge, certify.

Per round r (see ``protocol.rounds.coordinator`` for the phases):

- COMMIT: commit a seed share (its secret stored first);
- REVEAL: reveal the share; fetch every committed update (cheap checks need no seed);
- SCORE_COMMIT: the seed is fixed; run every check (``validator.verify``), store each verdict, then
  store the score vector and salt and commit it; propose/vote slashing on provable failures;
- SCORE_REVEAL: reveal exactly what was committed (checked against the chain first);
- FINALIZE: settle the round on-chain (any validator may; a race is harmless);
- after settlement: merge the updates with positive consensus score (``training.merge``), store and
  announce theta_{r+1}, sign its digest and collect the other validators' signatures over HTTP; with a
  quorum, certify it on-chain.

Every step is idempotent and written to :class:`validator.state.ValidatorState`, so a restart at any point
resumes without revealing twice or losing a verdict.

This module is the phase machine; the parts it drives live beside it: ``validator.intake`` (fetching and
holding updates), ``validator.slashing`` (proposals and peers' evidence), ``validator.checkpoints``
(theta_r, the merge, signatures and the certificate), ``validator.api`` (HTTP routes), over the shared
attributes of ``validator.parts``; ``validator.verify`` checks one update, ``training.merge`` merges.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from attestation import AttestationError, Binding, verify
from attestation.simulated import SimulatedEnclave
from protocol.node.api import NodeMetrics, NodeServer
from protocol.node.start import ServingNode
from protocol.node.traffic import TrafficLedger
from protocol.p2p.discovery import Discovery
from protocol.p2p.transfer import BlobStore, FetchPolicy
from protocol.rounds.coordinator import (
    SCORE_MAX,
    Coordinator,
    CoordinatorError,
    Phase,
    RoundState,
)
from protocol.runspec import COMPUTE_LOCK, RunSpec
from protocol.wire.tensorblob import (
    tensor_blob_digest,
)
from training.data import Dataset
from validator.api import ApiMixin
from validator.checkpoints import CheckpointsMixin
from validator.config import ValidatorConfig
from validator.context import RoundContext, Verdict
from validator.errors import ValidatorError
from validator.parts import RoundCache, Theta
from validator.residuals import ResidualCache
from validator.slashing import SlashingMixin
from validator.stages import Stage
from validator.state import ValidatorState
from validator.verify import (
    CheckEvidence,
    heldout_loss,
    verify_update,
)

log = logging.getLogger(__name__)

#: Blocks before the SCORE_COMMIT deadline after which an unreachable miner's verdict becomes final.
RETRY_MARGIN_BLOCKS = 4


def dev_evidence_checker(chain_id: int, seed: bytes) -> CheckEvidence:
    """Verify evidence against the *development* enclave root of ``attestation.simulated`` (devnet only)."""
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


class ValidatorNode(ApiMixin, SlashingMixin, CheckpointsMixin, ServingNode):
    """A validator: one process, one key, one run; this class is its phase machine (``step``), the other
    parts are mixins: intake, slashing, checkpoints and the API (``start`` and ``stop``:
    ``protocol.node.start``)."""

    role = "validator"
    retried = (ValidatorError,)
    node_log = log
    cfg: ValidatorConfig

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
        traffic: TrafficLedger | None = None,
    ) -> None:
        self.cfg = cfg
        self.traffic = traffic or TrafficLedger()
        # 32 fresh bytes per (purpose, round): seed-share secrets and score salts. A test harness may pass a
        # deterministic source so that runs it compares share their round seeds; a node never does.
        self._entropy = entropy or (lambda purpose, round: os.urandom(32))
        self.spec = spec
        self.coord = coord
        self.discovery = discovery
        self._key = private_key
        self.address = coord.address
        self.check_evidence = check_evidence
        self.state = ValidatorState(cfg.data_dir.expanduser())
        self.public = BlobStore(self.state.dir / "public", digest_fn=tensor_blob_digest)
        self._residuals = ResidualCache(self.state.dir / "residuals")
        self.metrics = NodeMetrics.create("validator")
        self.fetch_policy = FetchPolicy(
            max_bytes=cfg.verify.max_update_bytes, timeout=cfg.fetch_timeout, attempts=cfg.fetch_attempts
        )
        self.policy = cfg.verify
        self.merge_policy = spec.merge  # the run's: miners rebuild theta_{r+1} with it too
        self._ds: Dataset | None = None
        self._theta: Theta | None = None
        self._cache = RoundCache(0)
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

    # -- loop ------------------------------------------------------------------------------------------

    def step(self) -> None:
        """Take whatever action the chain's current state calls for."""
        st = self.coord.current()
        r = st.round
        self.metrics.round.set(r)
        self.traffic.round = r
        if self._cache.round != r:
            self._cache = RoundCache(r)
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

    # -- checkpoints -----------------------------------------------------------------------------------

    # -- seed ------------------------------------------------------------------------------------------
    def _seed_commit(self, round: int) -> None:
        committed, _ = self.coord.seed_share_status(round)
        if committed:
            return
        rec = self.state.round(round)
        if rec.seed_secret is None:
            with self.state.edit(round) as rec:
                rec.seed_secret = self._entropy("seed", round).hex()
        self.coord.commit_seed(round, bytes.fromhex(rec.seed_secret))

    def _seed_reveal(self, round: int) -> None:
        committed, revealed = self.coord.seed_share_status(round)
        secret = self.state.round(round).seed_secret
        if committed and not revealed and secret:
            self.coord.reveal_seed(round, bytes.fromhex(secret))

    # -- verification ----------------------------------------------------------------------------------

    def _verify_all(self, st: RoundState, theta: Theta) -> bool | None:
        """Verify every committed update not judged yet; False if the deadline cut it short (None, from
        subclasses that do not say, counts as complete)."""
        r = st.round
        if self.state.round(r).scores is not None:
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
            self._verify_one(st, ctx, miner, commits[miner])
        with COMPUTE_LOCK:
            before = heldout_loss(self.spec, self.dataset, theta.params, device=self.cfg.device)
        with self.state.edit(r) as rec:
            rec.verify_seconds = round(time.perf_counter() - t0, 4)
            rec.heldout_before = round(before, 6)
        return complete

    def _verify_one(self, st: RoundState, ctx: RoundContext, miner: str, commitment: bytes) -> None:
        """Verify ``miner``'s update: record the verdict, or leave it pending when the miner could not be
        reached and its grace period has not run out (issue 10)."""
        r = st.round
        url = self._miner_url(r, miner)
        keep = 2 * len(ctx.registry) + 2  # residuals: this round's and the previous, per miner

        # this miner's verification stops where the phase's margin begins (issue 10): the chain is
        # asked between stages and replayed segments, so a slow miner cannot push the commit late
        def out_of_time(limit: int = st.deadline - RETRY_MARGIN_BLOCKS) -> bool:
            # asked between stages and segments: a reading younger than half a poll is recent enough
            return self.coord.current(max_age=self.cfg.poll_interval / 2).block >= limit

        now_block = self.coord.current().block
        verdict, _update = verify_update(
            ctx,
            miner,
            commitment,
            lambda: self._fetch_update(r, miner),
            self._state_fetcher(url, keep=keep),
            self.policy,
            evidence=self._cache.evidence.get(miner),
            check_evidence=self.check_evidence,
            fetch_source=self._source_fetcher(miner, url),
            out_of_time=out_of_time,
            keep_residual=self._residual_keeper(keep=keep),
        )
        # only a miner that could not be reached is waited for; one that answers without the bytes is
        # final at once, so a withholder costs the others no time (issue 10)
        retryable = Stage(verdict.stage).retryable(verdict.provable) and bool(
            verdict.evidence.get("unreachable")
        )
        first_miss = self._first_miss.setdefault(miner, time.monotonic()) if retryable else 0.0
        in_grace = time.monotonic() - first_miss < self.cfg.withhold_grace_seconds
        if retryable and in_grace and now_block < st.deadline - RETRY_MARGIN_BLOCKS:
            # a peer that is slow or restarting: try again next step, for at most the grace period, so
            # that a miner that withholds costs the others no more than that (issue 10)
            self._pending.add(miner)
            self._cache.updates.pop(miner, None)
            log.info("round %d: %s not verifiable yet (%s); retrying", r, miner[:10], verdict.reason)
            return
        self._pending.discard(miner)
        self._record_verdict(r, miner, verdict)

    def _record_verdict(self, round: int, miner: str, verdict: Verdict) -> None:
        """Persist a final verdict, keep the update whose bytes matched, and slash what is provable."""
        if verdict.digest and Stage(verdict.stage).bytes_matched:
            # keep every update whose bytes matched the commitment, accepted or not: the consensus may
            # accept what this validator refused, and the merge must follow the consensus (F11)
            if miner in self._cache.updates:
                self._keep_update(round, miner, self._cache.updates[miner])
        self.state.put_verdict(round, miner, verdict)
        self.metrics.verifications.labels(outcome=verdict.stage).inc()
        log.info(
            "round %d: %s -> %s (%s) score %d",
            round,
            miner[:10],
            verdict.stage,
            verdict.reason,
            verdict.score,
        )
        if verdict.provable and self.cfg.slash:
            self._slash(verdict)

    def _round_scores(self, round: int, miners: list[str]) -> list[int]:
        """The score vector to commit for ``miners`` (ascending address order): each one's verdict's score,
        at most ``SCORE_MAX``, 0 where this validator has no verdict."""
        scores = []
        for m in miners:
            v = self.state.verdict(round, m)
            scores.append(min(SCORE_MAX, v.score) if v else 0)
        return scores

    def _commit_scores(self, round: int) -> None:
        committed, _ = self.coord.score_status(round)
        if committed:
            return
        rec = self.state.round(round)
        if rec.scores is None or rec.salt is None:
            miners = sorted(self.coord.update_commitments(round), key=lambda a: int(a, 16))
            scores = self._round_scores(round, miners)
            with self.state.edit(round) as rec:
                rec.miners, rec.scores, rec.salt = miners, scores, self._entropy("salt", round).hex()
        self.coord.commit_scores(round, rec.scores, bytes.fromhex(rec.salt))
        with self.state.edit(round) as rec:
            rec.score_committed = True

    def _reveal_scores(self, round: int) -> None:
        committed, revealed = self.coord.score_status(round)
        rec = self.state.round(round)
        if revealed or not committed or rec.scores is None or rec.salt is None:
            if revealed and not rec.score_revealed:
                with self.state.edit(round) as rec:
                    rec.score_revealed = True
            return
        self.coord.reveal_scores(round, rec.scores, bytes.fromhex(rec.salt))
        with self.state.edit(round) as rec:
            rec.score_revealed = True

    # -- settlement, merge, certificate ----------------------------------------------------------------
