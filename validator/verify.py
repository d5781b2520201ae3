"""Verification of one miner's update, cheapest check first, ending in a verdict with evidence.

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
                 (issue 10: a quote alone must never stand for the training it claims);
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
from collections.abc import Callable, Mapping
from typing import Any

from torch import Tensor

from protocol.rounds.coordinator import update_commitment
from protocol.runspec import COMPUTE_LOCK
from protocol.wire.update import Update, decode_update, update_digest
from protocol.wire.updatecost import UpdateCaps
from protocol.wire.updateerrors import UpdateError
from training.assignment import Assignment
from training.model import module_of
from validator.context import (
    CheckEvidence,
    FetchBytes,
    FetchSource,
    FetchState,
    KeepResidual,
    RoundContext,
    Verdict,
    _Fail,
    _run_model,
    unreachable,
)
from validator.policy import VerifyPolicy
from validator.recompute import _recompute, recheck_segment, replay_differences
from validator.sampling import check_this_round
from validator.stages import Stage
from validator.usefulness import _usefulness, heldout_loss

__all__ = [
    "CheckEvidence",
    "FetchBytes",
    "FetchSource",
    "FetchState",
    "RoundContext",
    "Verdict",
    "VerifyPolicy",
    "_usefulness",
    "heldout_loss",
    "recheck_segment",
    "replay_differences",
    "verify_update",
]

#: Fetches bytes by digest from the miner (raises on failure).
log = logging.getLogger(__name__)


def verify_update(
    ctx: RoundContext,
    miner: str,
    commitment: bytes | None,
    fetch_update: Callable[[], bytes],
    fetch_state: FetchState,
    policy: VerifyPolicy,
    *,
    evidence: bytes | None = None,
    check_evidence: CheckEvidence | None = None,
    fetch_source: FetchSource | None = None,
    out_of_time: Callable[[], bool] | None = None,
    keep_residual: KeepResidual | None = None,
) -> tuple[Verdict, Update | None]:
    """Run every stage for one miner; returns the verdict and (when it decoded) the update.

    The stages run in the order of :class:`validator.stages.Stage`, each a function below that raises at
    the first failure. ``fetch_source`` fetches the miner's earlier update that the header's ``ef.source``
    names; without it an update that names one is refused (unprovably). ``out_of_time()`` is asked before
    each stage and each replayed segment (the node asks the chain whether the phase's margin has begun):
    once it says yes, the verdict is the unprovable stage ``budget`` (scored 0), so one slow or stalling
    miner cannot make the validator miss a phase (issue 10). ``fetch_state`` is asked for the transcript
    (by the header's root) and for the parts of the states a check reads (issue 13); ``keep_residual`` is
    given the recomputed error-feedback residual when it hashes to the committed one,
    which then is not fetched (issue 13)."""
    run = _Run(Verdict(miner=miner, round=ctx.round, accepted=False, stage="", reason=""), out_of_time)
    cpu0 = time.thread_time()
    try:
        _run_stages(
            run, ctx, miner, commitment, fetch_update, fetch_state, policy, evidence, check_evidence,
            fetch_source, keep_residual,
        )  # fmt: skip
    except _Fail as f:
        run.refuse(f.stage, f.reason, f.provable, f.evidence)
    except Exception as exc:  # one miner's input must not stop the verification of the others
        # an error no stage anticipated: this miner scores 0 (unprovably) and the loop goes on to the next
        log.exception("round %d: verifying %s raised %s", ctx.round, miner, type(exc).__name__)
        run.refuse(Stage.ERROR, f"{type(exc).__name__}: {exc}", False, {})
    # this thread's CPU seconds: the validator's compute for this miner, every stage included (decoding,
    # hashing, the codec, replays, evaluations), not the waits on the network, the lock or a loaded CPU;
    # the devnet report sets it against the miners' train_cpu_seconds (issue 13's 5% budget)
    run.verdict.metrics["verify_cpu_seconds"] = round(time.thread_time() - cpu0, 6)
    return run.verdict, run.update


class _Run:
    """One verification under way: its verdict, the update once it decoded, and the stage clock."""

    def __init__(self, verdict: Verdict, out_of_time: Callable[[], bool] | None) -> None:
        self.verdict = verdict
        self.update: Update | None = None
        self.out_of_time = out_of_time
        self.t = time.perf_counter()

    def lap(self, name: Stage, check: bool = True) -> None:
        """Record the time since the last lap as stage ``name``'s; then (``check``) refuse at ``budget``
        if ``out_of_time()`` says the phase's margin has begun."""
        now = time.perf_counter()
        self.verdict.timings[name] = round(now - self.t, 6)
        self.t = now
        if check and self.out_of_time is not None and self.out_of_time():
            raise _Fail(Stage.BUDGET, f"verification budget exhausted after {name}", False)

    def refuse(self, stage: Stage, reason: str, provable: bool, evidence: dict[str, Any]) -> None:
        """The verdict is a refusal at ``stage`` (score 0)."""
        v = self.verdict
        v.stage, v.reason, v.provable = stage, reason, provable
        v.evidence.update(evidence)
        v.accepted, v.score = False, 0
        self.lap(stage, check=False)


def _run_stages(
    run: _Run,
    ctx: RoundContext,
    miner: str,
    commitment: bytes | None,
    fetch_update: Callable[[], bytes],
    fetch_state: FetchState,
    policy: VerifyPolicy,
    evidence: bytes | None,
    check_evidence: CheckEvidence | None,
    fetch_source: FetchSource | None,
    keep_residual: KeepResidual | None,
) -> None:
    """Every stage in order (:func:`verify_update`); the first failure raises :class:`_Fail`."""
    v, lap = run.verdict, run.lap
    data = _stage_fetch(commitment, fetch_update, policy)
    lap(Stage.FETCH)
    assert commitment is not None  # _stage_fetch refused a miner without one
    digest = _stage_digest(ctx, miner, commitment, data, v)
    proof = {"update_digest": digest.hex(), "commitment": commitment.hex()}
    update = run.update = _stage_format(ctx, data, policy, proof)
    lap(Stage.FORMAT)
    assignment = _stage_header(ctx, miner, update, proof)
    delta = update.pseudo_gradient()
    _stage_bounds(ctx, delta, policy, proof)
    lap(Stage.BOUNDS)
    v.attested = _stage_attestation(ctx, miner, digest, evidence, check_evidence, proof)
    lap(Stage.ATTESTATION)
    full = not v.attested or check_this_round(ctx.seed, miner, policy.attested_check_probability)
    segments = policy.segments_per_miner if full else min(policy.attested_segments, policy.segments_per_miner)
    _recompute(
        ctx, v, assignment, update, delta, fetch_state, fetch_source, policy, segments, proof, run.out_of_time,
        keep_residual=keep_residual,
    )  # fmt: skip
    lap(Stage.RECOMPUTE)
    with COMPUTE_LOCK:
        _usefulness(ctx, v, assignment, delta, policy)
    lap(Stage.USEFULNESS, check=False)
    v.accepted = v.score > 0
    v.stage = Stage.OK if v.accepted else Stage.USEFULNESS
    v.reason = "accepted" if v.accepted else "the update does not lower the loss on the miner's data"


def _stage_fetch(commitment: bytes | None, fetch_update: Callable[[], bytes], policy: VerifyPolicy) -> bytes:
    """``commit`` and ``fetch``: the miner committed, and served bytes within the size cap."""
    if commitment is None:
        raise _Fail(Stage.COMMIT, "no commitment on-chain")
    try:
        data = fetch_update()
    except Exception as exc:  # transfer errors are typed; any failure means not served
        raise _Fail(Stage.FETCH, f"{type(exc).__name__}: {exc}", unreachable=unreachable(exc)) from exc
    if len(data) > policy.max_update_bytes:
        raise _Fail(Stage.FETCH, f"{len(data)} bytes > cap {policy.max_update_bytes}")
    return data


def _stage_digest(ctx: RoundContext, miner: str, commitment: bytes, data: bytes, v: Verdict) -> bytes:
    """``digest``: the bytes are what the miner committed to (the sender-bound commitment); their digest."""
    digest = update_digest(data)
    v.digest = digest.hex()
    if update_commitment(ctx.chain_id, ctx.contract, ctx.round, miner, digest) != commitment:
        raise _Fail(Stage.DIGEST, "served bytes do not match the on-chain commitment")
    return digest


def _stage_format(ctx: RoundContext, data: bytes, policy: VerifyPolicy, proof: dict[str, Any]) -> Update:
    """``format``: the bytes decode as an update of the run's model and codec, checked before decoding
    (issue 11). Provable: anyone can decode the committed bytes again."""
    try:
        return decode_update(data, UpdateCaps(max_update_bytes=policy.max_update_bytes), *_run_model(ctx))
    except UpdateError as exc:
        raise _Fail(Stage.FORMAT, f"{type(exc).__name__}: {exc}", True, **proof) from exc


def _stage_header(ctx: RoundContext, miner: str, update: Update, proof: dict[str, Any]) -> Assignment:
    """``header``: round, miner, base checkpoint, assigned modules, transcript steps and parameter shapes
    are this round's for this miner; returns the miner's assignment."""
    h = update.header
    if miner not in ctx.registry:
        raise _Fail(Stage.HEADER, "the miner is not in this round's registry", True, **proof)
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
        raise _Fail(Stage.HEADER, "; ".join(problems), True, **proof)
    return a


def _stage_bounds(
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
            raise _Fail(
                Stage.BOUNDS,
                f"module {m}: norm {math.sqrt(dn):.4g} > {policy.max_rel_norm} x {math.sqrt(wn):.4g}",
                True,
                **proof,
            )


def _stage_attestation(
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
        raise _Fail(Stage.ATTESTATION, why, True, **proof)
    return True
