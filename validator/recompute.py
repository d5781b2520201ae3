"""The ``recompute`` stage, one seam: the transcript of an update read by digest, its anchor at theta_r,
the update as exactly what the codec makes of the final state plus the miner's error feedback (F12), and
seed-chosen segment replays; and the re-check of a peer's slashing evidence, which replays the segment it
names (F8).

- the transcript: its digests list is fetched by the header's ``transcript.root`` and its
  states part by part, each checked against its digest (a state not served, or not the committed one: an
  unprovable failure);
- the anchor and the final state: the step-0 parameters are theta_r's, the update's cosine with theta_r
  minus the final parameters is at least ``min_final_cosine``;
- error feedback: the update must be what the codec makes of theta_r minus the transcript's final
  parameters plus the residual the miner committed to in the update its header names (``ef.source``),
  and the residual it commits to now must be the recomputed one;
- replay: one segment ``i`` -> ``i + 1`` from the served start state with the miner's batches
  (``training.inner.replay_segment``), compared with the served end state bit for bit or within
  ``param_rel_tol`` / ``replay_rel_tol``.

One module because it is one stage over one transcript: every part reads the same states through the
same cache (``_States``), and the pipeline calls it through :func:`recompute` alone.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from protocol.runspec import COMPUTE_LOCK
from protocol.wire.update import Update, decode_update
from protocol.wire.updatecost import UpdateCaps
from protocol.wire.updateerrors import UnsupportedVersion, UpdateError
from protocol.wire.updateheader import UpdateHeader, with_transcript
from training.assignment import Assignment
from training.data import miner_batches
from training.digest import PARAM_PREFIX, part_digests, state_digest
from training.diloco import pseudo_gradient
from training.errors import TrainingError
from training.feedback import ErrorFeedback
from training.inner import replay_segment, states_close
from training.model import module_of
from validator.context import FetchState, RoundContext, StageFailure, UpdateCheck, run_model, unreachable
from validator.errors import SourceMismatchError
from validator.policy import VerifyPolicy
from validator.sampling import segments_to_check, validator_slot
from validator.stages import Stage


def recompute(check: UpdateCheck, segments: int, audit: bool = True) -> None:
    """The stage: the transcript and its anchor at theta_r (digests only: every update); then, for an
    audit, ``segments`` seed-chosen segment replays, the final state (the last replay's when it reached
    the end bit for bit, else its parameters fetched) and the error feedback; :class:`StageFailure` at
    the first failure."""
    fetch_state = check.incoming.fetch_state
    update = _with_transcript(check.update, fetch_state)
    states = _States(update, fetch_state)
    theta = _anchor(check, states)
    check.verdict.evidence["segments"] = []
    if not audit:
        return  # no state crosses the wire for a miner this validator does not audit
    if segments > 0:
        _replay_segments(check, states, segments)
    final = _final(check, states, theta)
    _final_cosine(check, final)
    _check_error_feedback(check, update.header, final)


def _anchor(check: UpdateCheck, states: _States) -> dict[str, Tensor]:
    """theta_r's assigned parameters, once the transcript's step-0 parameters are exactly them (the moments
    are the miner's choice): their digest is checked against theta_r's without fetching anything, and a
    mismatch is provable."""
    ctx = check.ctx
    mods = set(check.assignment.module_ids)
    theta = {f"{PARAM_PREFIX}{n}": ctx.checkpoint[n] for n in ctx.checkpoint if module_of(n) in mods}
    if state_digest(theta).hex() != states.pairs[0][0]:
        raise check.fail("transcript does not start at the checkpoint", step=0)
    states.params[0] = theta
    return theta


def _final(check: UpdateCheck, states: _States, theta: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The transcript's final parameters: a replay of the last segment that reached them bit for bit
    left them in the cache, so they need not cross the wire; else their part is fetched. The update is
    checked against the final parameters, not its moments."""
    final = states.params_of(len(states.steps) - 1)
    if set(final) != set(theta) or any(
        final[k].shape != t.shape or final[k].dtype != t.dtype for k, t in theta.items()
    ):
        raise check.fail("the final state does not hold the assigned parameters")
    return final


def _final_cosine(check: UpdateCheck, final: Mapping[str, Tensor]) -> None:
    """The cosine of the update and theta_r minus the final parameters on the update's support (top-k
    codecs send few coordinates, error feedback shifts them), at least ``min_final_cosine``."""
    num = den_a = den_b = 0.0
    for name, d in check.delta.items():
        true = check.ctx.checkpoint[name].double() - final[f"param/{name}"].double()
        mask = d != 0
        dd, tt = d.double()[mask], true[mask]
        num += float((dd * tt).sum())
        den_a += float(dd.pow(2).sum())
        den_b += float(tt.pow(2).sum())
    cos = num / max(math.sqrt(den_a * den_b), 1e-30)
    check.verdict.metrics["final_cosine"] = round(cos, 6)
    if cos < check.policy.min_final_cosine:
        raise check.fail(f"update is unrelated to the transcript (cosine {cos:.3f})")


def _replay_segments(check: UpdateCheck, states: _States, segments: int) -> None:
    """Replay this validator's window of the seed-chosen segments (``validator.sampling``), asking
    ``out_of_time`` before each; the largest differences go to the verdict's metrics."""
    ctx, v, a = check.ctx, check.verdict, check.assignment
    steps = states.steps
    segs = segments_to_check(
        ctx.seed,
        v.miner,
        len(steps) - 1,
        segments,
        ctx.validator.encode(),
        slot=validator_slot(ctx.validator, ctx.auditors(v.miner)),  # the committee's windows differ
    )
    v.evidence["segments"] = [steps[i] for i in segs]
    batches = _training_batches(ctx, a)
    replayed_steps = 0
    worst_param = worst_moment = 0.0
    for i in segs:
        if check.out_of_time():
            raise StageFailure(
                Stage.BUDGET, f"verification budget exhausted before replaying step {steps[i]}", False
            )
        t_fetch = time.perf_counter()
        states.get(i)  # the start state (cached for the replay): its fetch is timed apart
        t0, cpu0 = time.perf_counter(), time.thread_time()
        v.metrics["fetch_seconds"] = v.metrics.get("fetch_seconds", 0.0) + t0 - t_fetch
        d_param, d_moment = _replay_one(ctx, a, batches, states, check.policy, i, check.proof)
        worst_param, worst_moment = max(worst_param, d_param), max(worst_moment, d_moment)
        replayed_steps += steps[i + 1] - steps[i]
        v.metrics["replay_seconds"] = v.metrics.get("replay_seconds", 0.0) + time.perf_counter() - t0
        v.metrics["replay_cpu_seconds"] = v.metrics.get("replay_cpu_seconds", 0.0) + time.thread_time() - cpu0
    v.metrics["replayed_steps"] = replayed_steps
    v.metrics["replay_param_rel_diff"] = _sig(worst_param)
    v.metrics["replay_moment_rel_diff"] = _sig(worst_moment)


# -- error feedback (F12) ---------------------------------------------------------------------------


def _rel_err(got: Mapping[str, Tensor], want: Mapping[str, Tensor]) -> float:
    """||got - want|| / ||want|| over every tensor of ``want`` (float64)."""
    num = sum(float((got[n].double() - w.double()).pow(2).sum()) for n, w in want.items())
    den = sum(float(w.double().pow(2).sum()) for w in want.values())
    return math.sqrt(num) / max(math.sqrt(den), 1e-30)


def _check_error_feedback(check: UpdateCheck, h: UpdateHeader, final: Mapping[str, Tensor]) -> None:
    """Recompute the compressed update from the transcript and the miner's committed residual (F12).

    The residual the miner started from is the one it committed to (``ef.after``) in the earlier update
    that ``ef.source`` names, an update whose bytes match that round's on-chain commitment; with no source
    it is zero. Everything compared is committed, so a mismatch is provable. ``h`` is the update's header
    with its transcript attached."""
    ctx, v, delta, policy = check.ctx, check.verdict, check.delta, check.policy
    prev = _source_residual(check, h)
    truth = pseudo_gradient(ctx.checkpoint, {n: final[f"param/{n}"] for n in delta})
    ef = ErrorFeedback(replace(h.codec, ef_beta=ctx.spec.codec.ef_beta))
    ef.load_state_dict({f"ef/{n}": t for n, t in prev.items()})
    # where the recomputed encoding is the served one, its decode is the one the format stage made
    _encs, sent = ef.compress(truth, known={n: (check.update.tensors[n], d) for n, d in delta.items()})
    err = _rel_err(delta, sent)
    v.metrics["ef_rel_err"] = _sig(err)
    if err > policy.ef_rel_tol:
        raise check.fail(
            f"the update is not the compressed transcript result (relative error {err:.3g} against the "
            f"recomputation with the committed error-feedback residual)"
        )
    want = ef.state_dict()
    if state_digest(want).hex() == h.ef_after:
        # the recomputed residual is the committed one, bit for bit: nothing to fetch
        v.metrics["ef_after_rel_err"] = 0.0
        if check.incoming.keep_residual is not None:
            check.incoming.keep_residual("0x" + h.ef_after, want)
        return
    after = _fetch_digest_state(
        check.incoming.fetch_state, h.ef_after, "error-feedback residual after the update"
    )
    if set(after) != set(want) or any(after[k].shape != want[k].shape for k in want):
        raise check.fail("the committed residual does not cover the update's parameters")
    err_after = _rel_err(after, want)
    v.metrics["ef_after_rel_err"] = _sig(err_after)
    if err_after > policy.ef_rel_tol:
        raise check.fail(f"the committed residual is not the recomputed one ({err_after:.3g})")


def _source_residual(check: UpdateCheck, h: UpdateHeader) -> dict[str, Tensor]:
    """The residual the miner started from, by parameter: the one committed (``ef.after``) in the earlier
    update that ``h.ef_source`` names, fetched and checked against that round's on-chain commitment by
    ``fetch_source``; empty (zero) without a source."""
    ctx, fetch_source = check.ctx, check.incoming.fetch_source
    prev: dict[str, Tensor] = {}
    if h.ef_source is None:
        return prev
    s, src_digest = h.ef_source
    if s >= ctx.round:
        raise check.fail(f"error-feedback source round {s} is not before {ctx.round}")
    if fetch_source is None:
        raise check.fail("cannot fetch the error-feedback source update", False)
    try:
        data = fetch_source(s, src_digest)
    except SourceMismatchError as exc:
        raise check.fail(f"error-feedback source: {exc}") from exc
    except Exception as exc:
        raise check.fail(f"error-feedback source of round {s} not available: {exc}", False) from exc
    try:
        src = decode_update(
            data,
            UpdateCaps(max_update_bytes=check.policy.max_update_bytes),
            *run_model(ctx.checkpoint, ctx.spec),
        ).header
    except UnsupportedVersion as exc:
        # a source written before this node's wire version (a network upgraded between rounds): refused,
        # but not provable, since the miner committed it under the version of its round
        raise check.fail(f"error-feedback source of another wire version: {exc}", False) from exc
    except UpdateError as exc:
        raise check.fail(f"error-feedback source does not decode: {exc}") from exc
    if src.round != s or src.miner.lower() != check.verdict.miner.lower():
        raise check.fail("error-feedback source is not this miner's update of its round")
    residual = _fetch_digest_state(
        check.incoming.fetch_state, src.ef_after, f"error-feedback residual of round {s}"
    )
    for key, t in residual.items():
        name = key.removeprefix("ef/")
        if name in check.delta:
            if t.shape != check.delta[name].shape or t.dtype != torch.float32:
                raise check.fail(f"residual of {name} has the wrong shape or dtype")
            prev[name] = t
    return prev


# -- segment replays --------------------------------------------------------------------------------


def _training_batches(ctx: RoundContext, a: Assignment) -> Tensor:
    """The batches the miner trained on (its assignment's, in the round's order)."""
    return miner_batches(
        ctx.dataset,
        ctx.assign_seed,
        a,
        ctx.spec.inner.steps,
        ctx.spec.inner.batch_size,
        ctx.spec.model.seq_len,
    )


def _sig(x: float) -> float:
    """``x`` to 4 significant digits (a metric: small honest differences must not round to 0)."""
    return float(f"{x:.4g}")


def _replay_one(
    ctx: RoundContext,
    a: Assignment,
    batches: Tensor,
    states: _States,
    policy: VerifyPolicy,
    i: int,
    ev: Mapping[str, Any],
) -> tuple[float, float]:
    """Replay transcript segment ``i`` (states ``i`` -> ``i + 1``); :class:`StageFailure` (provable) if it fails.

    Returns the largest relative difference, per tensor, of the replay against the served end state:
    (parameters, moments and counters), 0 when the digests agree."""
    steps, pairs = states.steps, states.pairs
    start = states.get(i)
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
                model=ctx.model(policy.device),
                device=policy.device,
            )
    except TrainingError as exc:
        raise StageFailure(
            Stage.RECOMPUTE, f"segment {steps[i]}: {exc}", True, **ev, segment=steps[i]
        ) from exc
    if states.matches(i + 1, got):
        states.keep(i + 1, got)  # the last segment's end stands for the final parameters
        return 0.0, 0.0  # bit for bit: the end state need not cross the wire
    end = states.get(i + 1)  # a different platform's rounding: compare within the tolerances
    if not _replay_matches(got, end, policy):
        worst = _worst_rel_diff(got, end)
        replayed = part_digests(got)
        raise StageFailure(
            Stage.RECOMPUTE,
            f"segment {steps[i]}..{steps[i + 1]} does not replay",
            True,
            **ev,
            segment=[steps[i], steps[i + 1]],
            start_digest=list(pairs[i]),
            claimed=list(pairs[i + 1]),
            replayed=[replayed[0].hex(), replayed[1].hex()],
            worst_tensor=worst[0],
            worst_rel_diff=worst[1],
        )
    return replay_differences(got, end)


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
    steps = list(update.header.transcript_steps)
    if miner not in ctx.registry or segment_start not in steps[:-1]:
        return None, f"no segment starts at step {segment_start}"
    i = steps.index(segment_start)
    a = ctx.assignment(miner)
    try:
        states = _States(_with_transcript(update, fetch_state), fetch_state)
        _replay_one(ctx, a, _training_batches(ctx, a), states, policy, i, {})
    except StageFailure as f:
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


# -- the transcript ---------------------------------------------------------------------------------


class _States:
    """The transcript's states as a check reads them, fetched part by part: a state's
    parameters and the rest are committed apart, each fetched at most once and checked against its
    digest; theta_r's parameters stand for step 0's once they hash to its parameter digest."""

    def __init__(self, update: Update, fetch_state: FetchState) -> None:
        self.pairs = list(update.header.transcript_digests)
        self.steps = list(update.header.transcript_steps)
        self.fetch_state = fetch_state
        self.params: dict[int, dict[str, Tensor]] = {}
        self.full: dict[int, dict[str, Tensor]] = {}

    def _part(self, i: int, which: int, what: str) -> dict[str, Tensor]:
        digest = self.pairs[i][which]
        try:
            part = self.fetch_state("0x" + digest)
        except Exception as exc:
            raise StageFailure(
                Stage.RECOMPUTE,
                f"{what} at step {self.steps[i]} not served: {exc}",
                False,
                step=self.steps[i],
                unreachable=unreachable(exc),
                unanswered=True,
            ) from exc
        if state_digest(part).hex() != digest:
            raise StageFailure(
                Stage.RECOMPUTE,
                f"{what} at step {self.steps[i]} does not match the transcript",
                False,
                unanswered=True,
            )
        # the bytes are the committed ones: a part holding the other part's tensors is the miner's, provably
        if any(k.startswith(PARAM_PREFIX) != (which == 0) for k in part):
            raise StageFailure(
                Stage.RECOMPUTE, f"{what} at step {self.steps[i]} holds the wrong tensors", True
            )
        return part

    def params_of(self, i: int) -> dict[str, Tensor]:
        """The parameters (``param/*``) of the ``i``-th recorded state."""
        if i not in self.params:
            self.params[i] = self._part(i, 0, "parameters")
        return self.params[i]

    def get(self, i: int) -> dict[str, Tensor]:
        """The whole ``i``-th recorded state."""
        if i not in self.full:
            self.full[i] = {**self.params_of(i), **self._part(i, 1, "optimizer state")}
        return self.full[i]

    def keep(self, i: int, state: Mapping[str, Tensor]) -> None:
        """Cache ``state`` as the ``i``-th recorded state (it hashes to the transcript's digests)."""
        self.full[i] = dict(state)
        self.params[i] = {k: t for k, t in state.items() if k.startswith(PARAM_PREFIX)}

    def matches(self, i: int, state: Mapping[str, Tensor]) -> bool:
        """Whether ``state`` is, bit for bit, the ``i``-th recorded state."""
        p, r = part_digests(state)
        return (p.hex(), r.hex()) == self.pairs[i]


def _fetch_digest_state(fetch_state: FetchState, digest: str, what: str) -> dict[str, Tensor]:
    """A state served by digest, checked against it (not served: an unprovable failure)."""
    try:
        st = fetch_state("0x" + digest)
    except Exception as exc:
        raise StageFailure(
            Stage.RECOMPUTE, f"{what} not served: {exc}", False, unreachable=unreachable(exc), unanswered=True
        ) from exc
    if state_digest(st).hex() != digest:
        raise StageFailure(Stage.RECOMPUTE, f"{what} does not match its digest", False, unanswered=True)
    return st


def _with_transcript(update: Update, fetch_state: FetchState) -> Update:
    """``update`` with its transcript's digests attached: fetched by the header's ``transcript.root`` like a
    state. Not served, or not the committed list: an unprovable failure, as for a state."""
    h = update.header
    if len(h.transcript_digests) == len(h.transcript_steps):
        return update
    served = _fetch_digest_state(fetch_state, h.transcript_root, "transcript")
    try:
        return replace(update, header=with_transcript(h, served))
    except UpdateError as exc:
        raise StageFailure(Stage.RECOMPUTE, f"transcript: {exc}", False) from exc
