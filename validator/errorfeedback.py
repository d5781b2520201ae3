"""The error-feedback check of the ``recompute`` stage (F12): the update must be what the codec makes of
theta_r minus the transcript's final parameters plus the residual the miner committed to in the update
its header names (``ef.source``), and the residual it commits to now must be the recomputed one."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from protocol.wire.update import Update, decode_update
from protocol.wire.updatecost import UpdateCaps
from protocol.wire.updateerrors import UnsupportedVersion, UpdateError
from protocol.wire.updateheader import UpdateHeader
from training.digest import state_digest
from training.diloco import pseudo_gradient
from training.feedback import ErrorFeedback
from validator.context import FetchSource, FetchState, KeepResidual, RoundContext, Verdict, _Fail, _run_model
from validator.errors import SourceMismatchError
from validator.policy import VerifyPolicy
from validator.replay import _sig
from validator.stages import Stage
from validator.transcript import _fetch_digest_state


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
    keep_residual: KeepResidual | None = None,
) -> None:
    """Recompute the compressed update from the transcript and the miner's committed residual (F12).

    The residual the miner started from is the one it committed to (``ef.after``) in the earlier update
    that ``ef.source`` names, an update whose bytes match that round's on-chain commitment; with no source
    it is zero. Everything compared is committed, so a mismatch is provable."""
    h = update.header
    prev = _source_residual(ctx, v, h, delta, fetch_state, fetch_source, policy, ev)
    truth = pseudo_gradient(ctx.checkpoint, {n: final[f"param/{n}"] for n in delta})
    ef = ErrorFeedback(replace(h.codec, ef_beta=ctx.spec.codec.ef_beta))
    ef.load_state_dict({f"ef/{n}": t for n, t in prev.items()})
    # where the recomputed encoding is the served one, its decode is the one the format stage made
    _encs, sent = ef.compress(truth, known={n: (update.tensors[n], d) for n, d in delta.items()})
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
    want = ef.state_dict()
    if state_digest(want).hex() == h.ef_after:
        # the recomputed residual is the committed one, bit for bit: nothing to fetch (issue 13)
        v.metrics["ef_after_rel_err"] = 0.0
        if keep_residual is not None:
            keep_residual("0x" + h.ef_after, want)
        return
    after = _fetch_digest_state(fetch_state, h.ef_after, "error-feedback residual after the update")
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


def _source_residual(
    ctx: RoundContext,
    v: Verdict,
    h: UpdateHeader,
    delta: Mapping[str, Tensor],
    fetch_state: FetchState,
    fetch_source: FetchSource | None,
    policy: VerifyPolicy,
    ev: dict[str, Any],
) -> dict[str, Tensor]:
    """The residual the miner started from, by parameter: the one committed (``ef.after``) in the earlier
    update that ``h.ef_source`` names, fetched and checked against that round's on-chain commitment by
    ``fetch_source``; empty (zero) without a source."""
    prev: dict[str, Tensor] = {}
    if h.ef_source is None:
        return prev
    s, src_digest = h.ef_source
    if s >= ctx.round:
        raise _Fail(Stage.RECOMPUTE, f"error-feedback source round {s} is not before {ctx.round}", True, **ev)
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
    except UnsupportedVersion as exc:
        # a source written before this node's wire version (a network upgraded between rounds): refused,
        # but not provable, since the miner committed it under the version of its round
        raise _Fail(Stage.RECOMPUTE, f"error-feedback source of another wire version: {exc}", False) from exc
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
                raise _Fail(Stage.RECOMPUTE, f"residual of {name} has the wrong shape or dtype", True, **ev)
            prev[name] = t
    return prev
