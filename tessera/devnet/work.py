"""The work a round's phases hold, timed in this process with the nodes' own code: one miner's round, one
validator's check of it (with the segment replay), a held-out evaluation and the merge
(:func:`measure_work`). :mod:`tessera.devnet.sizing` runs it in a process started like a node and derives
the phase windows from it."""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from miner.behaviour import make_behaviour
from miner.work import RoundInputs, build_update
from protocol.wire.commitments import update_commitment
from protocol.wire.tensorblob import tensors_digest
from protocol.wire.update import decode_update
from training.data import prepare
from training.merge import MergePolicy, next_checkpoint
from validator.context import Incoming, RoundContext
from validator.pipeline import VerificationPipeline
from validator.policy import VerifyPolicy
from validator.usefulness import heldout_loss


@dataclass(frozen=True)
class WorkTimes:
    """Seconds of each unit of work, measured on this machine under one node setting."""

    train_s: float
    """One miner's round: H inner steps, compression, encoding (``miner.work.build_update``)."""
    verify_s: float
    """One validator's full check of one update, with the segment replay (``validator.pipeline.VerificationPipeline.verify``)."""
    heldout_s: float
    """One held-out loss evaluation (before the score commit; after the merge)."""
    merge_s: float
    """The merge of ``miners`` updates into the next checkpoint."""
    start_s: float = 0.0
    """A node process from launch to ready: imports, torch warm-up, a DHT peer (0: measured in-process)."""
    verify_stage: str = "ok"
    """Where the measured check ended (``ok``: every stage ran; else it stopped early and took less)."""
    setting: dict[str, str] = field(default_factory=dict)
    """The environment it was measured under (beyond the devnet's own), e.g. ``ATEN_CPU_CAPABILITY``."""

    def to_json(self) -> dict[str, Any]:
        """JSON form (rounded)."""
        d = asdict(self)
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in d.items()}


def measure_work(
    spec: Any,
    *,
    miners: int,
    validators: int = 2,
    segments: int = 2,
    merge_method: str = "mean",
    validator: str = "0x" + "0a" * 20,
) -> WorkTimes:
    """Time one miner's round, one validator's check of it (with the replay), a held-out evaluation and
    the merge of ``miners`` such updates, in this process, with the nodes' own code. ``validator`` is the
    address the check runs as (the validators' windows of segments depend on it)."""
    ds = prepare(spec.load_corpus(), spec.model)
    theta = spec.genesis_params()
    digest = bytes.fromhex(tensors_digest({f"param/{k}": v for k, v in theta.items()})[2:])
    registry = ["0x" + f"{i + 1:040x}" for i in range(max(1, miners))]
    vals = [validator, *("0x" + f"{0xF0 + i:040x}" for i in range(max(0, validators - 1)))]
    miner = registry[0]
    assign_seed = hashlib.sha256(b"tessera.sizing.assign").digest()
    t0 = time.perf_counter()
    built = build_update(
        spec,
        ds,
        RoundInputs(
            round=2,
            miner=miner,
            checkpoint=theta,
            checkpoint_digest=digest,
            assign_seed=assign_seed,
            registry=registry,
            ef_state={},
        ),
        make_behaviour("honest"),
    )
    train_s = time.perf_counter() - t0
    check = CheckSetting(
        spec=spec, dataset=ds, checkpoint=theta, checkpoint_digest=digest, assign_seed=assign_seed,
        registry=tuple(registry), validators=tuple(vals), validator=validator, segments=segments,
    )  # fmt: skip
    verify_s, stage = _time_check(check, built, miner)
    t0 = time.perf_counter()
    heldout_loss(spec, ds, theta)
    heldout_s = time.perf_counter() - t0
    delta = decode_update(built.update).pseudo_gradient()
    contributions = [(1.0, registry[i], delta) for i in range(len(registry))]
    t0 = time.perf_counter()
    next_checkpoint(theta, {}, contributions, spec.outer, MergePolicy(merge_method))
    merge_s = time.perf_counter() - t0
    return WorkTimes(
        train_s=train_s, verify_s=verify_s, heldout_s=heldout_s, merge_s=merge_s, verify_stage=stage
    )


@dataclass(frozen=True)
class CheckSetting:
    """The round 2 a timed check runs in (:func:`_time_check`): what a validator's context holds."""

    spec: Any
    """The run spec (model, inner loop, codec, corpus)."""
    dataset: Any
    """``spec``'s corpus, prepared (``training.data.prepare``)."""
    checkpoint: Any
    """theta_r, the round's starting parameters (the genesis checkpoint here)."""
    checkpoint_digest: bytes
    """The digest of ``checkpoint`` (``tensors_digest`` of its ``param/`` tensors)."""
    assign_seed: bytes
    """The seed of the round's module assignment."""
    registry: tuple[str, ...]
    """The registered miners, in order."""
    validators: tuple[str, ...]
    """The registered validators, ``validator`` first."""
    validator: str
    """The address the check runs as (the validators' windows of segments depend on it)."""
    segments: int
    """Transcript segments the validator replays per miner."""


def _time_check(check: CheckSetting, built: Any, miner: str) -> tuple[float, Any]:
    """Seconds of ``check.validator``'s check of ``miner``'s ``built`` update of round 2 (with its segment
    replay, states served from ``built``) and the stage its verdict reached, for :func:`measure_work`."""

    by_digest = dict(
        zip(("0x" + d.hex() for d in built.transcript_digests), built.transcript_steps, strict=True)
    )

    def fetch_state(d: str) -> dict[str, Any]:
        if d in built.published():
            return built.published()[d]
        return {k: v.clone() for k, v in built.states[by_digest[d]].items()}

    ctx = RoundContext(
        spec=check.spec, dataset=check.dataset, round=2, chain_id=31337, contract="0x" + "c0" * 20,
        validator=check.validator, checkpoint=check.checkpoint, checkpoint_digest=check.checkpoint_digest,
        assign_seed=check.assign_seed, seed=hashlib.sha256(b"tessera.sizing.seed").digest(),
        registry=list(check.registry), validators=list(check.validators),
    )  # fmt: skip
    commitment = update_commitment(31337, ctx.contract, 2, miner, built.digest)
    policy = VerifyPolicy(segments_per_miner=check.segments)
    t0 = time.perf_counter()
    verdict = VerificationPipeline(policy).verify(
        Incoming(miner, commitment, lambda: built.update, fetch_state), ctx
    )
    return time.perf_counter() - t0, verdict.stage
