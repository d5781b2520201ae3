"""One round of a miner's work, with no I/O: assignment, batches, inner loop, pseudo-gradient, codec, update.

:func:`build_update` is called by the node with the round's inputs (:class:`RoundInputs`: the checkpoint it
fetched, the residual it stored); it returns the encoded update, its digest and what the miner must keep to serve (transcript snapshots) and
to persist (the new error-feedback residual). :func:`transcript_state` regenerates any transcript state
from the nearest kept snapshot, so a miner need not store every step's state to answer a validator.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from torch import Tensor

from miner.behaviour import Behaviour, BehaviourContext
from protocol.runspec import RunSpec
from protocol.wire.update import encode_update, make_update, update_digest
from protocol.wire.updateheader import HeaderFields, transcript_root, transcript_tensors
from training.assignment import Assignment, assign_in_epoch
from training.codecs import Encoded
from training.config import CodecConfig
from training.data import Dataset, miner_batches
from training.digest import split_state, state_digest
from training.diloco import pseudo_gradient
from training.feedback import ErrorFeedback
from training.inner import Device, InnerResult, Transcript, replay_segment, train_inner


@dataclass(frozen=True)
class RoundInputs:
    """What one miner's update of one round is built from (the chain's round and the miner's own carry)."""

    round: int
    """The round the update is for."""
    miner: str
    """The miner's address (its assignment and the update's header)."""
    checkpoint: Mapping[str, Tensor]
    """theta_r's parameters, which the inner loop starts from."""
    checkpoint_digest: bytes
    """theta_r's certified digest (the header's ``base_checkpoint``)."""
    assign_seed: bytes
    """The round's assignment seed: the miner's batches (and its modules when ``epoch_seed`` is None)."""
    registry: Sequence[str]
    """The round's registered miners, among whom the modules are assigned."""
    ef_state: Mapping[str, Tensor] = field(default_factory=dict)
    """What an earlier round's :attr:`BuiltUpdate.ef_state` held: its residual (``ef/*``, used only with
    ``ef_source``) and the AdamW state (``opt/*``) carried into this round."""
    ef_source: tuple[int, bytes] | None = None
    """(round, update digest) of the earlier update whose residual ``ef_state`` holds; named in the header
    so that a validator fetches the same residual (F12)."""
    epoch_seed: bytes | None = None
    """The seed of the round's assignment epoch (``protocol.rounds.epochs``): the miner's modules; None:
    ``assign_seed`` (epochs of one round)."""
    epoch_registry: Sequence[str] | None = None
    """The registry of the epoch's first round, whose miners rank first; None: ``registry``."""


@dataclass
class BuiltUpdate:
    """The result of a round's work."""

    round: int
    assignment: Assignment
    update: bytes
    """Encoded update (protocol.wire.update)."""
    digest: bytes
    """SHA-256 of ``update`` (32 bytes): what the miner commits to."""
    transcript_steps: list[int]
    transcript_parts: list[tuple[bytes, bytes]]
    """(parameters, rest) digests of each recorded state: what the update's transcript commits to."""
    states: dict[int, dict[str, Tensor]]
    """Every transcript state (served from memory while the round is live)."""
    snapshots: dict[int, dict[str, Tensor]]
    """The states persisted to disk (every ``snapshot_every`` recorded steps, plus the first and last);
    after a restart other states are replayed from the nearest (exact on one platform only while the
    training core's replay is exact, see docs/operator-miner.md)."""
    ef_state: dict[str, Tensor]
    """The error-feedback residual (``ef/*``) and the AdamW state carried to the next round (``opt/*``)
    after this update: persisted before committing."""
    ef_after: bytes
    """State digest of the residual's ``ef/*`` tensors (the header's ``ef.after``); served by digest."""
    ef_source: tuple[int, bytes] | None
    """(round, update digest) of the earlier update whose residual this one started from."""
    losses: list[float]
    tokens: int
    train_seconds: float
    train_cpu_seconds: float = 0.0
    """This thread's CPU seconds of the inner loop (the state digests hashed in a helper thread are not
    in it): the compute a validator's ``verify_cpu_seconds`` is measured against."""
    trained_params: int = 0
    """Parameters this update trained (the denominator of bits per trained parameter)."""

    def residual(self) -> dict[str, Tensor]:
        """The committed error-feedback residual (``ef/*``), served under ``"0x" + ef_after.hex()``."""
        return {k: v for k, v in self.ef_state.items() if k.startswith("ef/")}

    @cached_property
    def transcript_digests(self) -> list[bytes]:
        """``state_digest`` of each recorded state (an index of the states for tools and tests; the update
        commits to :attr:`transcript_parts`), computed on first use."""
        return [state_digest(self.states[s]) for s in self.transcript_steps]

    def transcript(self) -> dict[str, Tensor]:
        """The transcript's digest pairs as the blob served under the header's ``transcript.root``."""
        return transcript_tensors(self.transcript_parts)

    def state_parts(self, i: int) -> dict[str, dict[str, Tensor]]:
        """The two parts of the ``i``-th recorded state by their digests (``0x`` + hex), as served."""
        params, rest = split_state(self.states[self.transcript_steps[i]])
        p, r = self.transcript_parts[i]
        return {"0x" + p.hex(): params, "0x" + r.hex(): rest}

    @cached_property
    def _published(self) -> dict[str, dict[str, Tensor]]:
        out = {
            "0x" + self.ef_after.hex(): self.residual(),
            "0x" + transcript_root(self.transcript_parts): self.transcript(),
        }
        for i in range(len(self.transcript_steps)):
            out.update(self.state_parts(i))
        return out

    def published(self) -> dict[str, dict[str, Tensor]]:
        """Everything a validator fetches by digest: the residual, the transcript and both parts of every
        recorded state (computed once)."""
        return self._published


def assignment_for(
    spec: RunSpec,
    epoch_seed: bytes,
    registry: Sequence[str],
    miner: str,
    epoch_registry: Sequence[str] | None = None,
) -> Assignment:
    """This miner's assignment for the round: drawn from its epoch's seed (the round's ``assign_seed``
    with epochs of one round) among the round's ``registry``, the miners of ``epoch_registry`` (the
    epoch's first round's; None: the round's) ranked first (``training.assignment.assign_in_epoch``)."""
    epoch = registry if epoch_registry is None else epoch_registry
    return assign_in_epoch(epoch_seed, list(epoch), list(registry), spec.model, spec.experts_per_miner)[miner]


def round_batches(spec: RunSpec, ds: Dataset, assign_seed: bytes, a: Assignment) -> Tensor:
    """The miner's batches for the round."""
    return miner_batches(ds, assign_seed, a, spec.inner.steps, spec.inner.batch_size, spec.model.seq_len)


def build_update(
    spec: RunSpec,
    ds: Dataset,
    inputs: RoundInputs,
    behaviour: Behaviour,
    *,
    snapshot_every: int = 10,
    device: Device = "cpu",
) -> BuiltUpdate:
    """Train the round's assignment and package the compressed update.

    The residual of ``inputs.ef_state`` is used only with ``inputs.ef_source`` (F12), and only that of
    parameters assigned again is carried; the rest is dropped. ``behaviour`` may alter what the miner
    trains on and sends (the attack suite's miners). The inner loop computes on ``device``
    (``training.device``); the pseudo-gradient, the codec and everything returned are on the CPU in fp32;
    every ``snapshot_every``-th transcript state is kept for serving after a restart.
    """
    round, miner, checkpoint = inputs.round, inputs.miner, inputs.checkpoint
    assign_seed, ef_state, ef_source = inputs.assign_seed, inputs.ef_state, inputs.ef_source
    epoch_seed = assign_seed if inputs.epoch_seed is None else inputs.epoch_seed
    a = assignment_for(spec, epoch_seed, inputs.registry, miner, inputs.epoch_registry)
    ctx = BehaviourContext(round, miner, a.module_ids, spec.inner.steps, epoch_rounds=spec.epoch_rounds)
    batches = behaviour.batches(ctx, round_batches(spec, ds, assign_seed, a))
    t0, cpu0 = time.perf_counter(), time.thread_time()
    res = behaviour.inner_result(
        ctx, checkpoint, lambda: _train(spec, checkpoint, a, batches, round, ef_state, device)
    )
    train_s, train_cpu = time.perf_counter() - t0, time.thread_time() - cpu0
    tr = res.transcript
    delta = behaviour.pseudo_gradient(ctx, pseudo_gradient(checkpoint, res.params))
    encs, ef_after = _compress(spec.codec, delta, ef_state, ef_source)
    ef_after_digest = state_digest(ef_after)
    fields = HeaderFields(
        round=round, miner=miner, modules=a.module_ids, codec=spec.codec, base_checkpoint=inputs.checkpoint_digest,
        transcript_interval=tr.interval, transcript_steps=tr.steps, transcript_parts=tr.parts,
        tokens=res.tokens, ef_after=ef_after_digest, ef_source=ef_source,
    )  # fmt: skip
    data = behaviour.update_bytes(ctx, encode_update(make_update(fields, encs)))
    return BuiltUpdate(
        round=round,
        assignment=a,
        update=data,
        digest=update_digest(data),
        transcript_steps=list(tr.steps),
        transcript_parts=list(tr.parts),
        states=dict(tr.states),
        snapshots=_snapshots(tr, snapshot_every),
        ef_state={**ef_after, **{f"opt/{k}": v for k, v in res.optimizer_state.items()}},
        ef_after=ef_after_digest,
        ef_source=ef_source,
        losses=res.losses,
        tokens=res.tokens,
        train_seconds=train_s,
        train_cpu_seconds=train_cpu,
        trained_params=sum(v.numel() for v in delta.values()),
    )


def _train(
    spec: RunSpec,
    checkpoint: Mapping[str, Tensor],
    a: Assignment,
    batches: Tensor,
    round: int,
    ef_state: Mapping[str, Tensor],
    device: Device,
) -> InnerResult:
    """The inner loop on the round's batches, every state kept, AdamW's moments carried from the miner's
    previous round (``opt/*`` of ``ef_state``)."""
    carried = {k.removeprefix("opt/"): v for k, v in ef_state.items() if k.startswith("opt/")}
    return train_inner(
        spec.model,
        spec.inner,
        checkpoint,
        a,
        batches,
        round,
        keep_states=True,
        optimizer_state=carried or None,
        device=device,
    )


def _snapshots(tr: Transcript, every: int) -> dict[int, dict[str, Tensor]]:
    """The transcript states the miner keeps: every ``every``-th recorded one, the first and the last."""
    keep = {s for i, s in enumerate(tr.steps) if i % max(1, every) == 0} | {tr.steps[0], tr.steps[-1]}
    return {s: tr.states[s] for s in sorted(keep)}


def _compress(
    codec: CodecConfig,
    delta: Mapping[str, Tensor],
    ef_state: Mapping[str, Tensor],
    ef_source: tuple[int, bytes] | None,
) -> tuple[dict[str, Encoded], dict[str, Tensor]]:
    """The pseudo-gradient compressed with error feedback, and the residual after it. The residual of
    ``ef_state`` (``ef/*``) is carried only with ``ef_source`` and only for parameters assigned again."""
    ef = ErrorFeedback(codec)
    if ef_source is not None:
        ef.load_state_dict({k: v for k, v in ef_state.items() if k.startswith("ef/") and k[3:] in delta})
    encs, _sent = ef.compress(delta)
    return encs, ef.state_dict()


@dataclass(frozen=True)
class KeptTranscript:
    """What a miner regenerates its round's transcript states from."""

    round: int
    """The round trained."""
    checkpoint: Mapping[str, Tensor]
    """theta_r's parameters, which the round started from."""
    assign_seed: bytes
    """The round's assignment seed (the miner's batches)."""
    assignment: Assignment
    """The miner's assignment that round."""
    snapshots: Mapping[int, Mapping[str, Tensor]]
    """The kept transcript states by inner step (:attr:`BuiltUpdate.snapshots`)."""


def transcript_state(
    spec: RunSpec, ds: Dataset, kept: KeptTranscript, step: int, device: Device = "cpu"
) -> dict[str, Tensor]:
    """The transcript state at ``step``: a kept snapshot, or a replay (on ``device``) from the nearest
    earlier one; on the CPU either way."""
    snapshots = kept.snapshots
    if step in snapshots:
        return {k: v.clone() for k, v in snapshots[step].items()}
    base = max((s for s in snapshots if s < step), default=None)
    if base is None:
        raise KeyError(step)
    a = kept.assignment
    batches = round_batches(spec, ds, kept.assign_seed, a)
    return replay_segment(
        spec.model, spec.inner, kept.checkpoint, a, batches, kept.round, snapshots[base], step, device=device
    )
