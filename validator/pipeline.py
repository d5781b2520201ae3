"""The verification pipeline: one miner's update in, its verdict out, cheapest check first.

:class:`VerificationPipeline` owns the checks: the cheap stateless stages below (this module), the
``recompute`` stage (``validator.recompute``: the transcript, error feedback and segment replays) and the
``usefulness`` stage (``validator.usefulness``). The node gives it one :class:`validator.context.Incoming`
per miner (whose fetchers are the node's intake) and a :class:`validator.context.RoundContext`, and gets a
:class:`validator.context.Verdict`. Which checks run for a (miner, round) is decided in one place
(:meth:`VerificationPipeline.plan`), and the per-miner time budget is the ``Incoming.out_of_time`` the
pipeline asks between stages.

Stages, in order (the first failure decides; later, costlier stages are not run):

1. ``fetch``     the update is served and fits the size cap (``protocol.p2p.transfer`` enforces it);
2. ``digest``    SHA-256 of the bytes, wrapped in the sender-bound commitment, equals the on-chain one;
3. ``format``    ``protocol.wire.update.decode_update``: magic, version, header, codec, dtypes, shapes, finite;
4. ``header``    round, miner, base checkpoint digest, assigned modules and transcript steps are the
                 expected ones;
5. ``bounds``    every module's pseudo-gradient norm is at most ``max_rel_norm`` times its weights' norm;
6. ``attestation`` TEE evidence, if served, verifies and binds (chain, round, miner, update digest);
                 an attested miner is fully recomputed in a seed-chosen ``attested_check_probability``
                 of rounds and replays ``attested_segments`` seed-chosen segments in every other round
                 (a quote alone must never stand for the training it claims);
7. ``recompute`` the transcript's step-0 digest is the checkpoint's (anchor); ``segments_per_miner``
                 seed-chosen segments (this validator's window of the round's order, so the validators
                 check different segments) are replayed from the served start state and compared with the
                 served end state (both checked against the transcript digests); the update is exactly
                 what the codec makes of theta_r minus the final state plus the miner's error-feedback
                 residual, which is fetched through the header's ``ef`` chain (the residual the miner
                 committed to after its own earlier update) and checked within ``ef_rel_tol``, as is the
                 residual it commits to now (F12: a scaled or otherwise altered update fails here);
                 the largest honest differences measured are kept in the verdict's metrics
                 (``replay_param_rel_diff``, ``replay_moment_rel_diff``, ``ef_rel_err``,
                 ``ef_after_rel_err``) so an operator sees the margin to each tolerance;
8. ``usefulness`` loss before/after applying the update, rescaled to ``usefulness_rel_norm`` of the
                 weights' norm (direction only: scaling an update cannot raise its score), on the
                 miner's own batches and on held-out windows; the score is the relative loss drop on its own data, zero unless it beats
                 ``min_own_gain``, scaled down if the held-out gain is better than the own gain by more than
                 ``max_heldout_excess`` (a miner that trained on other data than assigned).

A failure at ``format``, ``header``, ``bounds``, ``attestation`` or ``recompute`` on bytes that match the
commitment is *provable*: anyone can re-run the check from the evidence, so it is slashing evidence.

Replays and loss evaluations compute on ``VerifyPolicy.device`` (``training.device``); the states they
return, and the codec that recomputes the update, are on the CPU in fp32.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from protocol.runspec import COMPUTE_LOCK
from protocol.wire.commitments import update_commitment
from protocol.wire.update import Update, decode_update, update_digest
from protocol.wire.updatecost import UpdateCaps
from protocol.wire.updateerrors import UpdateError
from training.assignment import Assignment
from training.model import module_of
from validator.context import (
    AuditRole,
    CheckEvidence,
    FetchState,
    Incoming,
    RoundContext,
    StageFailure,
    UpdateCheck,
    Verdict,
    run_model,
    unreachable,
)
from validator.policy import VerifyPolicy
from validator.recompute import recheck_segment, recompute
from validator.sampling import check_this_round
from validator.stages import Stage
from validator.usefulness import score_usefulness

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    """Which checks run for one (miner, round), decided by :meth:`VerificationPipeline.plan` after the
    ``attestation`` stage: every update gets the checks that move no state; only an audit (this validator
    on the miner's committee) fetches states, replays and checks the update-to-transcript tie."""

    segments: int
    """Transcript segments to replay (0: none)."""
    role: AuditRole = AuditRole.AUDIT
    """This validator's part in the miner's audit (``abstain`` and ``unaudited`` fetch no state)."""


class VerificationPipeline:
    """Every check of one update, in order, ending in a verdict (see the module doc)."""

    def __init__(self, policy: VerifyPolicy, check_evidence: CheckEvidence | None = None) -> None:
        self.policy = policy
        """The thresholds and budgets the checks run with."""
        self.check_evidence = check_evidence
        """Verifies TEE evidence (None: no miner is attested; every one is fully recomputed)."""

    def verify(self, incoming: Incoming, ctx: RoundContext) -> Verdict:
        """Run every stage for one miner; the verdict (see :meth:`verify_decoded`)."""
        return self.verify_decoded(incoming, ctx)[0]

    def verify_decoded(self, incoming: Incoming, ctx: RoundContext) -> tuple[Verdict, Update | None]:
        """Run every stage for one miner: the verdict and, when it decoded, the update.

        The stages run in the order of :class:`validator.stages.Stage`, each raising
        :class:`validator.context.StageFailure` at its first failure. ``incoming.out_of_time()`` is asked
        before each stage and each replayed segment: once it says yes, the verdict is the unprovable stage
        ``budget`` (scored 0), so one slow or stalling miner cannot make the validator miss a phase (issue
        10). Any error no stage anticipated scores 0 (``error``, unprovable) and is logged."""
        run = _Run(
            Verdict(miner=incoming.miner, round=ctx.round, accepted=False, stage="", reason=""), incoming
        )
        cpu0 = time.thread_time()
        try:
            self._run_stages(run, ctx)
        except StageFailure as f:
            run.refuse(f.stage, f.reason, f.provable, f.evidence)
        except Exception as exc:  # one miner's input must not stop the verification of the others
            log.exception("round %d: verifying %s raised %s", ctx.round, incoming.miner, type(exc).__name__)
            run.refuse(Stage.ERROR, f"{type(exc).__name__}: {exc}", False, {})
        # this thread's CPU seconds: the validator's compute for this miner, every stage included (decoding,
        # hashing, the codec, replays, evaluations), not the waits on the network, the lock or a loaded CPU;
        # the devnet report sets it against the miners' train_cpu_seconds (5% budget)
        run.verdict.metrics["verify_cpu_seconds"] = round(time.thread_time() - cpu0, 6)
        return run.verdict, run.update

    def plan(self, ctx: RoundContext, miner: str, attested: bool) -> Plan:
        """The checks for ``miner`` this round. With the chain's audit draw: a committee member
        replays ``audit_segments`` seed-chosen segments and checks the tie, the others fetch no state,
        and a TEE quote lowers nothing (development quotes never lower q). Without one (every validator
        audits every miner): an attested miner is fully recomputed in a seed-chosen
        ``attested_check_probability`` of rounds and replays ``attested_segments`` segments in every other
        round (a quote alone never stands for the training it claims)."""
        p = self.policy
        role = ctx.audit_role(miner)
        if role is not AuditRole.AUDIT:
            return Plan(segments=0, role=role)
        if miner in ctx.audits:
            return Plan(segments=p.audit_segments, role=role)
        full = not attested or check_this_round(ctx.seed, miner, p.attested_check_probability)
        return Plan(segments=p.segments_per_miner if full else min(p.attested_segments, p.segments_per_miner))

    def recheck_segment(
        self, ctx: RoundContext, miner: str, update: Update, fetch_state: FetchState, segment_start: int
    ) -> tuple[bool | None, str]:
        """Re-run a peer's slashing evidence: the replay of ``update``'s segment starting at inner step
        ``segment_start`` (``validator.recompute.recheck_segment``); vote only on ``True``."""
        return recheck_segment(ctx, miner, update, fetch_state, self.policy, segment_start)

    def _run_stages(self, run: _Run, ctx: RoundContext) -> None:
        """Every stage in order; the first failure raises :class:`StageFailure`."""
        inc, policy, v, lap = run.incoming, self.policy, run.verdict, run.lap
        data = stage_fetch(inc, policy)
        lap(Stage.FETCH)
        assert inc.commitment is not None  # stage_fetch refused a miner without one
        digest = stage_digest(ctx, inc.miner, inc.commitment, data, v)
        proof = {"update_digest": digest.hex(), "commitment": inc.commitment.hex()}
        update = run.update = stage_format(ctx, data, policy, proof)
        lap(Stage.FORMAT)
        assignment = stage_header(ctx, inc.miner, update, proof)
        delta = update.pseudo_gradient()
        stage_bounds(ctx, delta, policy, proof)
        lap(Stage.BOUNDS)
        v.attested = stage_attestation(ctx, inc.miner, digest, inc.evidence, self.check_evidence, proof)
        lap(Stage.ATTESTATION)
        plan = self.plan(ctx, inc.miner, v.attested)
        v.evidence["audit"] = str(plan.role)
        check = UpdateCheck(ctx, v, assignment, update, delta, inc, policy, proof)
        recompute(check, plan.segments, audit=plan.role is AuditRole.AUDIT)
        lap(Stage.RECOMPUTE)
        with COMPUTE_LOCK:
            score_usefulness(ctx, v, assignment, delta, policy)
        lap(Stage.USEFULNESS, check=False)
        v.accepted = v.score > 0
        v.stage = Stage.OK if v.accepted else Stage.USEFULNESS
        v.reason = "accepted" if v.accepted else "the update does not lower the loss on the miner's data"


class _Run:
    """One verification under way: its verdict, the update once it decoded, and the stage clock."""

    def __init__(self, verdict: Verdict, incoming: Incoming) -> None:
        self.verdict = verdict
        self.incoming = incoming
        self.update: Update | None = None
        self.t = time.perf_counter()

    def lap(self, name: Stage, check: bool = True) -> None:
        """Record the time since the last lap as stage ``name``'s; then (``check``) refuse at ``budget``
        if the miner's time budget has run out."""
        now = time.perf_counter()
        self.verdict.timings[name] = round(now - self.t, 6)
        self.t = now
        out_of_time = self.incoming.out_of_time
        if check and out_of_time is not None and out_of_time():
            raise StageFailure(Stage.BUDGET, f"verification budget exhausted after {name}", False)

    def refuse(self, stage: Stage, reason: str, provable: bool, evidence: dict[str, Any]) -> None:
        """The verdict is a refusal at ``stage`` (score 0)."""
        v = self.verdict
        v.stage, v.reason, v.provable = stage, reason, provable
        v.evidence.update(evidence)
        v.accepted, v.score = False, 0
        self.lap(stage, check=False)


def stage_fetch(incoming: Incoming, policy: VerifyPolicy) -> bytes:
    """``commit`` and ``fetch``: the miner committed, and served bytes within the size cap."""
    if incoming.commitment is None:
        raise StageFailure(Stage.COMMIT, "no commitment on-chain")
    try:
        data = incoming.fetch_update()
    except Exception as exc:  # transfer errors are typed; any failure means not served
        raise StageFailure(Stage.FETCH, f"{type(exc).__name__}: {exc}", unreachable=unreachable(exc)) from exc
    if len(data) > policy.max_update_bytes:
        raise StageFailure(Stage.FETCH, f"{len(data)} bytes > cap {policy.max_update_bytes}")
    return data


def stage_digest(ctx: RoundContext, miner: str, commitment: bytes, data: bytes, v: Verdict) -> bytes:
    """``digest``: the bytes are what the miner committed to (the sender-bound commitment); their digest."""
    digest = update_digest(data)
    v.digest = digest.hex()
    if update_commitment(ctx.chain_id, ctx.contract, ctx.round, miner, digest) != commitment:
        raise StageFailure(Stage.DIGEST, "served bytes do not match the on-chain commitment")
    return digest


def stage_format(ctx: RoundContext, data: bytes, policy: VerifyPolicy, proof: dict[str, Any]) -> Update:
    """``format``: the bytes decode as an update of the run's model and codec, checked before decoding
    . Provable: anyone can decode the committed bytes again."""
    try:
        return decode_update(
            data, UpdateCaps(max_update_bytes=policy.max_update_bytes), *run_model(ctx.checkpoint, ctx.spec)
        )
    except UpdateError as exc:
        raise StageFailure(Stage.FORMAT, f"{type(exc).__name__}: {exc}", True, **proof) from exc


def stage_header(ctx: RoundContext, miner: str, update: Update, proof: dict[str, Any]) -> Assignment:
    """``header``: round, miner, base checkpoint, assigned modules, transcript steps and parameter shapes
    are this round's for this miner; returns the miner's assignment."""
    h = update.header
    if miner not in ctx.registry:
        raise StageFailure(Stage.HEADER, "the miner is not in this round's registry", True, **proof)
    a = ctx.assignment(miner)
    problems = []
    if h.round != ctx.round:
        problems.append(f"round {h.round} != {ctx.round}")
    if h.miner.lower() != miner.lower():
        problems.append(f"miner {h.miner} != {miner}")
    if h.base_checkpoint != ctx.checkpoint_digest.hex():
        problems.append("base checkpoint is not theta_r")
    if tuple(h.modules) != tuple(a.module_ids):
        problems.append(f"modules {list(h.modules)} != assigned {list(a.module_ids)}")
    H, k = ctx.spec.inner.steps, ctx.spec.inner.transcript_interval
    expect_steps = sorted({*range(0, H, k), H})
    if list(h.transcript_steps) != expect_steps or h.transcript_interval != k:
        problems.append("transcript steps are not the run's")
    want = {n: tuple(t.shape) for n, t in ctx.checkpoint.items() if module_of(n) in set(a.module_ids)}
    if dict(h.params) != want:
        problems.append("parameters do not match the assigned modules")
    if problems:
        raise StageFailure(Stage.HEADER, "; ".join(problems), True, **proof)
    return a


def stage_bounds(
    ctx: RoundContext, delta: Mapping[str, Tensor], policy: VerifyPolicy, proof: dict[str, Any]
) -> None:
    """``bounds``: each module's pseudo-gradient norm is at most ``max_rel_norm`` times its weights'."""
    by_module: dict[str, list[float]] = {}
    for name, d in delta.items():
        m = module_of(name)
        by_module.setdefault(m, [0.0, 0.0])
        by_module[m][0] += float(d.double().pow(2).sum())
        by_module[m][1] += float(ctx.checkpoint[name].double().pow(2).sum())
    for m, (dn, wn) in sorted(by_module.items()):
        if math.sqrt(dn) > policy.max_rel_norm * max(math.sqrt(wn), 1e-12):
            raise StageFailure(
                Stage.BOUNDS,
                f"module {m}: norm {math.sqrt(dn):.4g} > {policy.max_rel_norm} x {math.sqrt(wn):.4g}",
                True,
                **proof,
            )


def stage_attestation(
    ctx: RoundContext,
    miner: str,
    digest: bytes,
    evidence: bytes | None,
    check_evidence: CheckEvidence | None,
    proof: dict[str, Any],
) -> bool:
    """``attestation``: served TEE evidence verifies and binds (chain, round, miner, digest); whether the
    miner is attested (no evidence, or no checker: not attested, and fully recomputed)."""
    if evidence is None or check_evidence is None:
        return False
    why = check_evidence(evidence, ctx.round, miner, digest)
    if why is not None:
        raise StageFailure(Stage.ATTESTATION, why, True, **proof)
    return True
