"""Verification of one miner's update, cheapest check first, ending in a verdict with evidence.

Stages, in order (the first failure decides; later, costlier stages are not run):

1. ``fetch``     the update is served and fits the size cap (``protocol.transfer`` enforces it);
2. ``digest``    SHA-256 of the bytes, wrapped in the sender-bound commitment, equals the on-chain one;
3. ``format``    ``protocol.update.decode_update``: magic, version, header, codec, dtypes, shapes, finite;
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from protocol.coordinator import SCORE_SCALE, update_commitment
from protocol.runspec import COMPUTE_LOCK, RunSpec
from protocol.update import Update, UpdateCaps, UpdateError, decode_update, update_digest
from training.assignment import Assignment, assign
from training.codecs import ErrorFeedback
from training.config import CodecConfig
from training.data import Dataset, batch_offsets, eval_windows, miner_batches, scoring_batches
from training.digest import state_digest
from training.diloco import pseudo_gradient
from training.errors import TrainingError
from training.inner import replay_segment, states_close
from training.model import build_model, lm_loss, load_params, module_of
from validator.errors import SourceMismatchError
from validator.policy import VerifyPolicy
from validator.sampling import check_this_round, segments_to_check, validator_slot
from validator.stages import Stage

#: Fetches bytes by digest from the miner (raises on failure).
log = logging.getLogger(__name__)

FetchBytes = Callable[[str], bytes]
#: Fetches a transcript state by its (hex) state digest.
FetchState = Callable[[str], dict[str, Tensor]]
#: The bytes of this miner's own update of an earlier round by (round, hex digest), already checked
#: against that round's on-chain commitment: raises :class:`validator.errors.SourceMismatchError` when the
#: digest is not what the miner committed (provable), anything else when it cannot be fetched.
FetchSource = Callable[[int, str], bytes]
#: Verifies TEE evidence bound to (round, miner, digest); returns None if it holds, else the reason.
CheckEvidence = Callable[[bytes, int, str, bytes], str | None]


@dataclass
class Verdict:
    """The outcome for one miner."""

    miner: str
    round: int
    accepted: bool
    stage: str
    """A :class:`validator.stages.Stage`: ``ok`` or the stage that decided (empty while undecided)."""
    reason: str
    score: int = 0
    provable: bool = False
    attested: bool = False
    digest: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """JSON form (stored and served)."""
        return asdict(self)


@dataclass
class RoundContext:
    """What is fixed for every miner of a round."""

    spec: RunSpec
    dataset: Dataset
    round: int
    chain_id: int
    contract: str
    validator: str
    checkpoint: dict[str, Tensor]
    checkpoint_digest: bytes
    assign_seed: bytes
    seed: bytes
    registry: Sequence[str]
    validators: Sequence[str] = ()
    """The round's registered validators: this validator's slot among them picks its window of segments
    (``validator.sampling``); empty (or not among them): an independent draw."""
    assignments: dict[str, Assignment] = field(default_factory=dict)
    _heldout: dict[int, tuple[Tensor, float]] = field(default_factory=dict)

    def assignment(self, miner: str) -> Assignment:
        """The miner's assignment (computed once for the round)."""
        if not self.assignments:
            self.assignments = assign(
                self.assign_seed, list(self.registry), self.spec.model, self.spec.experts_per_miner
            )
        return self.assignments[miner]


class _Fail(Exception):
    def __init__(self, stage: Stage, reason: str, provable: bool = False, **evidence: Any) -> None:
        super().__init__(reason)
        self.stage, self.reason, self.provable, self.evidence = stage, reason, provable, evidence


def _loss(model: torch.nn.Module, params: Mapping[str, Tensor], batches: Tensor, path: Any) -> float:
    """Mean loss of ``batches`` (CPU) under ``params`` (CPU), computed where ``model`` lives."""
    load_params(model, params)
    model.eval()
    dev = next(model.parameters()).device
    with torch.no_grad():
        vals = [float(lm_loss(model, b.to(dev), path)[0]) for b in batches]  # type: ignore[arg-type]
    return sum(vals) / max(1, len(vals))


def _apply(base: Mapping[str, Tensor], delta: Mapping[str, Tensor]) -> dict[str, Tensor]:
    out = dict(base)
    for k, d in delta.items():
        out[k] = base[k] - d
    return out


def _run_model(ctx: RoundContext) -> tuple[dict[str, tuple[int, ...]], CodecConfig]:
    """The run's parameter shapes and codec, which an update's header must match before it is decoded."""
    return {n: tuple(t.shape) for n, t in ctx.checkpoint.items()}, ctx.spec.codec


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
) -> tuple[Verdict, Update | None]:
    """Run every stage for one miner; returns the verdict and (when it decoded) the update.

    The stages run in the order of :class:`validator.stages.Stage`, each a function below that raises at
    the first failure. ``fetch_source`` fetches the miner's earlier update that the header's ``ef.source``
    names; without it an update that names one is refused (unprovably). ``out_of_time()`` is asked before
    each stage and each replayed segment (the node asks the chain whether the phase's margin has begun):
    once it says yes, the verdict is the unprovable stage ``budget`` (scored 0), so one slow or stalling
    miner cannot make the validator miss a phase (issue 10)."""
    v = Verdict(miner=miner, round=ctx.round, accepted=False, stage="", reason="")
    update: Update | None = None
    t = time.perf_counter()

    def lap(name: Stage, check: bool = True) -> None:
        nonlocal t
        now = time.perf_counter()
        v.timings[name] = round(now - t, 6)
        t = now
        if check and out_of_time is not None and out_of_time():
            raise _Fail(Stage.BUDGET, f"verification budget exhausted after {name}", False)

    try:
        data = _stage_fetch(commitment, fetch_update, policy)
        lap(Stage.FETCH)
        assert commitment is not None  # _stage_fetch refused a miner without one
        digest = _stage_digest(ctx, miner, commitment, data, v)
        proof = {"update_digest": digest.hex(), "commitment": commitment.hex()}
        update = _stage_format(ctx, data, policy, proof)
        lap(Stage.FORMAT)
        assignment = _stage_header(ctx, miner, update, proof)
        delta = update.pseudo_gradient()
        _stage_bounds(ctx, delta, policy, proof)
        lap(Stage.BOUNDS)
        v.attested = _stage_attestation(ctx, miner, digest, evidence, check_evidence, proof)
        lap(Stage.ATTESTATION)
        full = not v.attested or check_this_round(ctx.seed, miner, policy.attested_check_probability)
        segments = (
            policy.segments_per_miner if full else min(policy.attested_segments, policy.segments_per_miner)
        )
        _recompute(
            ctx, v, assignment, update, delta, fetch_state, fetch_source, policy, segments, proof, out_of_time
        )
        lap(Stage.RECOMPUTE)
        with COMPUTE_LOCK:
            _usefulness(ctx, v, assignment, delta, policy)
        lap(Stage.USEFULNESS, check=False)
        v.accepted = v.score > 0
        v.stage = Stage.OK if v.accepted else Stage.USEFULNESS
        v.reason = "accepted" if v.accepted else "the update does not lower the loss on the miner's data"
    except _Fail as f:
        v.stage, v.reason, v.provable = f.stage, f.reason, f.provable
        v.evidence.update(f.evidence)
        v.accepted, v.score = False, 0
        lap(f.stage, check=False)
    except Exception as exc:  # one miner's input must not stop the verification of the others
        # an error no stage anticipated: this miner scores 0 (unprovably) and the loop goes on to the next
        log.exception("round %d: verifying %s raised %s", ctx.round, miner, type(exc).__name__)
        v.stage, v.reason, v.provable = Stage.ERROR, f"{type(exc).__name__}: {exc}", False
        v.accepted, v.score = False, 0
        lap(Stage.ERROR, check=False)
    return v, update


def _stage_fetch(commitment: bytes | None, fetch_update: Callable[[], bytes], policy: VerifyPolicy) -> bytes:
    """``commit`` and ``fetch``: the miner committed, and served bytes within the size cap."""
    if commitment is None:
        raise _Fail(Stage.COMMIT, "no commitment on-chain")
    try:
        data = fetch_update()
    except Exception as exc:  # transfer errors are typed; any failure means not served
        raise _Fail(Stage.FETCH, f"{type(exc).__name__}: {exc}") from exc
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


def _recompute(
    ctx: RoundContext,
    v: Verdict,
    a: Assignment,
    update: Update,
    delta: Mapping[str, Tensor],
    fetch_state: FetchState,
    fetch_source: FetchSource | None,
    policy: VerifyPolicy,
    segments: int,
    ev: dict[str, Any],
    out_of_time: Callable[[], bool] | None = None,
) -> None:
    h = update.header
    digests = list(h.transcript_digests)
    steps = list(h.transcript_steps)

    def get(i: int) -> dict[str, Tensor]:
        try:
            st = fetch_state("0x" + digests[i])
        except Exception as exc:
            raise _Fail(
                Stage.RECOMPUTE, f"state at step {steps[i]} not served: {exc}", False, step=steps[i]
            ) from exc
        if state_digest(st).hex() != digests[i]:
            raise _Fail(Stage.RECOMPUTE, f"state at step {steps[i]} does not match the transcript", False)
        return st

    # anchor: the step-0 state's parameters are exactly theta_r's (moments are the miner's choice)
    start0 = get(0)
    mods = set(a.module_ids)
    want = {n for n in ctx.checkpoint if module_of(n) in mods}
    have = {k.removeprefix("param/") for k in start0 if k.startswith("param/")}
    if have != want or any(not torch.equal(start0[f"param/{n}"], ctx.checkpoint[n]) for n in want):
        raise _Fail(Stage.RECOMPUTE, "transcript does not start at the checkpoint", True, **ev, step=0)

    final = get(len(steps) - 1)
    num = den_a = den_b = 0.0
    for name, d in delta.items():
        # compare on the update's support: top-k codecs send few coordinates, error feedback shifts them
        true = ctx.checkpoint[name].double() - final[f"param/{name}"].double()
        mask = d != 0
        dd, tt = d.double()[mask], true[mask]
        num += float((dd * tt).sum())
        den_a += float(dd.pow(2).sum())
        den_b += float(tt.pow(2).sum())
    cos = num / max(math.sqrt(den_a * den_b), 1e-30)
    v.metrics["final_cosine"] = round(cos, 6)
    if cos < policy.min_final_cosine:
        raise _Fail(Stage.RECOMPUTE, f"update is unrelated to the transcript (cosine {cos:.3f})", True, **ev)
    _check_error_feedback(ctx, v, update, delta, final, fetch_state, fetch_source, policy, ev)
    if segments <= 0:
        v.evidence["segments"] = []
        return
    segs = segments_to_check(
        ctx.seed,
        v.miner,
        len(steps) - 1,
        segments,
        ctx.validator.encode(),
        slot=validator_slot(ctx.validator, ctx.validators),
    )
    v.evidence["segments"] = [steps[i] for i in segs]
    batches = miner_batches(
        ctx.dataset,
        ctx.assign_seed,
        a,
        ctx.spec.inner.steps,
        ctx.spec.inner.batch_size,
        ctx.spec.model.seq_len,
    )
    replayed_steps = 0
    worst_param = worst_moment = 0.0
    for i in segs:
        if out_of_time is not None and out_of_time():
            raise _Fail(
                Stage.BUDGET, f"verification budget exhausted before replaying step {steps[i]}", False
            )
        t0 = time.perf_counter()
        d_param, d_moment = _replay_one(ctx, a, update, batches, get, policy, i, ev)
        worst_param, worst_moment = max(worst_param, d_param), max(worst_moment, d_moment)
        replayed_steps += steps[i + 1] - steps[i]
        v.metrics["replay_seconds"] = v.metrics.get("replay_seconds", 0.0) + time.perf_counter() - t0
    v.metrics["replayed_steps"] = replayed_steps
    v.metrics["replay_param_rel_diff"] = _sig(worst_param)
    v.metrics["replay_moment_rel_diff"] = _sig(worst_moment)


def _fetch_digest_state(fetch_state: FetchState, digest: str, what: str) -> dict[str, Tensor]:
    """A state served by digest, checked against it (not served: an unprovable failure)."""
    try:
        st = fetch_state("0x" + digest)
    except Exception as exc:
        raise _Fail(Stage.RECOMPUTE, f"{what} not served: {exc}", False) from exc
    if state_digest(st).hex() != digest:
        raise _Fail(Stage.RECOMPUTE, f"{what} does not match its digest", False)
    return st


def _sig(x: float) -> float:
    """``x`` to 4 significant digits (a metric: small honest differences must not round to 0)."""
    return float(f"{x:.4g}")


def _rel_err(got: Mapping[str, Tensor], want: Mapping[str, Tensor]) -> float:
    """||got - want|| / ||want|| over every tensor of ``want`` (float64)."""
    num = sum(float((got[n].double() - w.double()).pow(2).sum()) for n, w in want.items())
    den = sum(float(w.double().pow(2).sum()) for w in want.values())
    return math.sqrt(num) / max(math.sqrt(den), 1e-30)


def _check_error_feedback(
    ctx: RoundContext,
    v: Verdict,
    update: Update,
    delta: Mapping[str, Tensor],
    final: Mapping[str, Tensor],
    fetch_state: FetchState,
    fetch_source: FetchSource | None,
    policy: VerifyPolicy,
    ev: dict[str, Any],
) -> None:
    """Recompute the compressed update from the transcript and the miner's committed residual (F12).

    The residual the miner started from is the one it committed to (``ef.after``) in the earlier update
    that ``ef.source`` names, an update whose bytes match that round's on-chain commitment; with no source
    it is zero. Everything compared is committed, so a mismatch is provable."""
    h = update.header
    prev: dict[str, Tensor] = {}
    if h.ef_source is not None:
        s, src_digest = h.ef_source
        if s >= ctx.round:
            raise _Fail(
                Stage.RECOMPUTE, f"error-feedback source round {s} is not before {ctx.round}", True, **ev
            )
        if fetch_source is None:
            raise _Fail(Stage.RECOMPUTE, "cannot fetch the error-feedback source update", False)
        try:
            data = fetch_source(s, src_digest)
        except SourceMismatchError as exc:
            raise _Fail(Stage.RECOMPUTE, f"error-feedback source: {exc}", True, **ev) from exc
        except Exception as exc:
            raise _Fail(
                Stage.RECOMPUTE, f"error-feedback source of round {s} not available: {exc}", False
            ) from exc
        try:
            src = decode_update(
                data, UpdateCaps(max_update_bytes=policy.max_update_bytes), *_run_model(ctx)
            ).header
        except UpdateError as exc:
            raise _Fail(Stage.RECOMPUTE, f"error-feedback source does not decode: {exc}", True, **ev) from exc
        if src.round != s or src.miner.lower() != v.miner.lower():
            raise _Fail(
                Stage.RECOMPUTE, "error-feedback source is not this miner's update of its round", True, **ev
            )
        residual = _fetch_digest_state(fetch_state, src.ef_after, f"error-feedback residual of round {s}")
        for key, t in residual.items():
            name = key.removeprefix("ef/")
            if name in delta:
                if t.shape != delta[name].shape or t.dtype != torch.float32:
                    raise _Fail(
                        Stage.RECOMPUTE, f"residual of {name} has the wrong shape or dtype", True, **ev
                    )
                prev[name] = t
    truth = pseudo_gradient(ctx.checkpoint, {n: final[f"param/{n}"] for n in delta})
    ef = ErrorFeedback(replace(h.codec, ef_beta=ctx.spec.codec.ef_beta))
    ef.load_state_dict({f"ef/{n}": t for n, t in prev.items()})
    _encs, sent = ef.compress(truth)
    err = _rel_err(delta, sent)
    v.metrics["ef_rel_err"] = _sig(err)
    if err > policy.ef_rel_tol:
        raise _Fail(
            Stage.RECOMPUTE,
            f"the update is not the compressed transcript result (relative error {err:.3g} against the "
            f"recomputation with the committed error-feedback residual)",
            True,
            **ev,
        )
    after = _fetch_digest_state(fetch_state, h.ef_after, "error-feedback residual after the update")
    want = ef.state_dict()
    if set(after) != set(want) or any(after[k].shape != want[k].shape for k in want):
        raise _Fail(
            Stage.RECOMPUTE, "the committed residual does not cover the update's parameters", True, **ev
        )
    err_after = _rel_err(after, want)
    v.metrics["ef_after_rel_err"] = _sig(err_after)
    if err_after > policy.ef_rel_tol:
        raise _Fail(
            Stage.RECOMPUTE, f"the committed residual is not the recomputed one ({err_after:.3g})", True, **ev
        )


def _replay_one(
    ctx: RoundContext,
    a: Assignment,
    update: Update,
    batches: Tensor,
    get: Callable[[int], dict[str, Tensor]],
    policy: VerifyPolicy,
    i: int,
    ev: dict[str, Any],
) -> tuple[float, float]:
    """Replay transcript segment ``i`` (states ``i`` -> ``i + 1``); :class:`_Fail` (provable) if it fails.

    Returns the largest relative difference, per tensor, of the replay against the served end state:
    (parameters, moments and counters), 0 when the digests agree."""
    steps, digests = list(update.header.transcript_steps), list(update.header.transcript_digests)
    start, end = get(i), get(i + 1)
    try:
        with COMPUTE_LOCK:
            got = replay_segment(
                ctx.spec.model,
                ctx.spec.inner,
                ctx.checkpoint,
                a,
                batches,
                ctx.round,
                start,
                steps[i + 1],
                device=policy.device,
            )
    except TrainingError as exc:
        raise _Fail(Stage.RECOMPUTE, f"segment {steps[i]}: {exc}", True, **ev, segment=steps[i]) from exc
    same = state_digest(got).hex() == digests[i + 1]
    if not same and not _replay_matches(got, end, policy):
        worst = _worst_rel_diff(got, end)
        raise _Fail(
            Stage.RECOMPUTE,
            f"segment {steps[i]}..{steps[i + 1]} does not replay",
            True,
            **ev,
            segment=[steps[i], steps[i + 1]],
            start_digest=digests[i],
            claimed=digests[i + 1],
            replayed=state_digest(got).hex(),
            worst_tensor=worst[0],
            worst_rel_diff=worst[1],
        )
    return (0.0, 0.0) if same else replay_differences(got, end)


def recheck_segment(
    ctx: RoundContext,
    miner: str,
    update: Update,
    fetch_state: FetchState,
    policy: VerifyPolicy,
    segment_start: int,
) -> tuple[bool | None, str]:
    """Re-run another validator's slashing evidence: the replay of the transcript segment that starts at
    inner step ``segment_start`` of ``update`` (whose bytes the caller checked against the commitment).

    Returns ``(True, reason)`` if the segment provably fails (the anchor or the replay), ``(False, "")`` if
    it replays, ``(None, reason)`` if it cannot be decided (a state not served, a segment the transcript
    does not have): vote only on ``True``.
    """
    h = update.header
    steps, digests = list(h.transcript_steps), list(h.transcript_digests)
    if miner not in ctx.registry or segment_start not in steps[:-1]:
        return None, f"no segment starts at step {segment_start}"
    i = steps.index(segment_start)
    a = ctx.assignment(miner)

    def get(j: int) -> dict[str, Tensor]:
        try:
            st = fetch_state("0x" + digests[j])
        except Exception as exc:
            raise _Fail(Stage.RECOMPUTE, f"state at step {steps[j]} not served: {exc}", False) from exc
        if state_digest(st).hex() != digests[j]:
            raise _Fail(Stage.RECOMPUTE, f"state at step {steps[j]} does not match the transcript", False)
        return st

    batches = miner_batches(
        ctx.dataset,
        ctx.assign_seed,
        a,
        ctx.spec.inner.steps,
        ctx.spec.inner.batch_size,
        ctx.spec.model.seq_len,
    )
    try:
        _replay_one(ctx, a, update, batches, get, policy, i, {})
    except _Fail as f:
        return (True if f.provable else None), f.reason
    return False, ""


def _replay_matches(got: Mapping[str, Tensor], served: Mapping[str, Tensor], policy: VerifyPolicy) -> bool:
    """Moments and counters within ``replay_rel_tol``, parameters within ``param_rel_tol``."""
    if set(got) != set(served):
        return False
    params = {k: v for k, v in got.items() if k.startswith("param/")}
    others = {k: v for k, v in got.items() if not k.startswith("param/")}
    return states_close(others, {k: served[k] for k in others}, policy.replay_rel_tol) and states_close(
        params, {k: served[k] for k in params}, policy.param_rel_tol
    )


def replay_differences(got: Mapping[str, Tensor], served: Mapping[str, Tensor]) -> tuple[float, float]:
    """The largest per-tensor relative L2 difference of a replayed state against the served one, as
    ``(parameters, moments and counters)``: what ``param_rel_tol`` and ``replay_rel_tol`` bound."""
    params = {k for k in got if k.startswith("param/")}
    d_param = _worst_rel_diff({k: got[k] for k in params}, {k: served[k] for k in params if k in served})
    d_other = _worst_rel_diff(
        {k: v for k, v in got.items() if k not in params},
        {k: v for k, v in served.items() if not k.startswith("param/")},
    )
    return d_param[1], d_other[1]


def _worst_rel_diff(a: Mapping[str, Tensor], b: Mapping[str, Tensor]) -> tuple[str, float]:
    """The tensor of ``a`` furthest from ``b`` in relative L2 (names missing in either count as inf)."""
    worst = ("", 0.0)
    for k in sorted(set(a) | set(b)):
        if k not in a or k not in b or a[k].shape != b[k].shape:
            return (k, math.inf)
        x, y = a[k].double(), b[k].double()
        d = float(torch.linalg.vector_norm(x - y)) / max(float(torch.linalg.vector_norm(y)), 1e-12)
        if d > worst[1]:
            worst = (k, d)
    return worst


def _normalised(
    checkpoint: Mapping[str, Tensor], delta: Mapping[str, Tensor], rel_norm: float
) -> dict[str, Tensor]:
    """``delta`` rescaled (up or down, one factor for the whole update) to ``rel_norm`` times the norm of
    the weights it touches (F9).

    Why a fixed reference norm, rescaling both ways, rather than clipping to the merge's bound (or to the
    round's median norm): clipping only shrinks, so an update under the bound still gains by being scaled
    up to it, and a per-round median is not known while miners are verified one at a time (and a
    cheater's own norm moves it). With one global factor the module proportions (the update's direction)
    are kept and the score is a function of the direction alone: a scaled copy scores as the original.
    The merge still clips the real contribution to ``clip_factor`` x the median (``validator.merge``).
    """
    dn = sum(float(d.double().pow(2).sum()) for d in delta.values())
    wn = sum(float(checkpoint[k].double().pow(2).sum()) for k in delta)
    if rel_norm <= 0 or dn <= 0 or wn <= 0:
        return dict(delta)
    factor = rel_norm * math.sqrt(wn) / math.sqrt(dn)
    return {k: (d.double() * factor).to(d.dtype) for k, d in delta.items()}


def _usefulness(
    ctx: RoundContext, v: Verdict, a: Assignment, delta: Mapping[str, Tensor], policy: VerifyPolicy
) -> None:
    spec = ctx.spec
    t0 = time.perf_counter()
    model = build_model(spec.model).to(policy.device)
    # Scored on windows of the miner's shard that the round seed picks (fixed only after the commits
    # closed) and that it did not train on: not on batches it knew when it committed (issue 10).
    trained = batch_offsets(
        ctx.dataset, ctx.assign_seed, a, spec.inner.steps, spec.inner.batch_size, spec.model.seq_len
    )
    own = scoring_batches(
        ctx.dataset,
        ctx.seed,
        a,
        trained,
        max(1, policy.eval_own_batches),
        spec.inner.batch_size,
        spec.model.seq_len,
    )
    after = _apply(ctx.checkpoint, _normalised(ctx.checkpoint, delta, policy.usefulness_rel_norm))
    own_before = _loss(model, ctx.checkpoint, own, a.path)
    own_after = _loss(model, after, own, a.path)
    key = a.shard if a.path is not None else -1
    if key not in ctx._heldout:
        stream = ctx.dataset.path_heldout[a.shard] if a.path is not None else ctx.dataset.heldout
        windows = eval_windows(stream, spec.model.seq_len, policy.heldout_windows).unsqueeze(0)
        ctx._heldout[key] = (windows, _loss(model, ctx.checkpoint, windows, a.path))
    held, held_before = ctx._heldout[key]
    held_after = _loss(model, after, held, a.path)
    g_own = (own_before - own_after) / max(own_before, 1e-9)
    g_held = (held_before - held_after) / max(held_before, 1e-9)
    v.metrics.update(
        own_before=round(own_before, 6),
        own_after=round(own_after, 6),
        heldout_before=round(held_before, 6),
        heldout_after=round(held_after, 6),
        own_gain=round(g_own, 6),
        heldout_gain=round(g_held, 6),
    )
    v.metrics["eval_seconds"] = time.perf_counter() - t0
    if not g_own > policy.min_own_gain:
        v.score = 0
        return
    s = min(1.0, g_own)
    if g_held > g_own + policy.max_heldout_excess and g_held > 0:
        s *= max(0.0, g_own / g_held)
    v.score = max(1, int(s * SCORE_SCALE))


def heldout_loss(
    spec: RunSpec, ds: Dataset, params: Mapping[str, Tensor], windows: int = 32, device: str = "cpu"
) -> float:
    """Held-out loss of a full checkpoint (DiPaCo: the mean over paths of each path's held-out stream),
    computed on ``device``."""
    model = build_model(spec.model).to(device)
    if spec.model.mode == "dipaco":
        from training.model import all_paths

        vals = []
        for i, path in enumerate(all_paths(spec.model)):
            stream = ds.path_heldout[i]
            if stream.numel() > spec.model.seq_len + 1:
                w = eval_windows(stream, spec.model.seq_len, windows).unsqueeze(0)
                vals.append(_loss(model, params, w, path))
        return sum(vals) / max(1, len(vals))
    w = eval_windows(ds.heldout, spec.model.seq_len, windows).unsqueeze(0)
    return _loss(model, params, w, None)
