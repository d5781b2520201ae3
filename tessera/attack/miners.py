"""Adversarial miner modes, as :class:`miner.behaviour.Behaviour` subclasses registered by name.

Every mode changes only the hook it needs (see ``miner/behaviour.py``); everything else is the honest
miner's code path, so what a validator sees is exactly what such a miner would send. Modes that need
information from outside the miner (another miner's revealed update, a previous round's quote) read it
from a :class:`Board` the scenario shares with them: in a real network that is public data (revealed
updates and quotes are served to anyone after the commit deadline).

``register_all()`` makes every mode selectable with ``tessera miner run --behaviour NAME``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from attestation import report_data
from attestation.simulated import SimulatedEnclave
from miner.behaviour import Behaviour, BehaviourContext, register
from protocol.rounds.epochs import epoch_first_round
from protocol.wire.update import Update, decode_update, encode_update
from tessera.attack.dodgers import (
    DripWhenAudited,
    HangWhenAudited,
    LastDeltaHangWhenAudited,
    LastDeltaRider,
    WithholdWhenAudited,
)
from tessera.nodes import dev_tee_seed


@dataclass
class Board:
    """Public material a scenario exposes to adversaries: revealed updates and evidence by (round, miner)."""

    updates: dict[tuple[int, str], bytes] = field(default_factory=dict)
    evidence: dict[tuple[int, str], bytes] = field(default_factory=dict)

    def latest_update(self, miner: str, before: int) -> bytes | None:
        """The most recent update ``miner`` revealed before round ``before``."""
        rounds = [r for (r, m) in self.updates if m.lower() == miner.lower() and r < before]
        return self.updates[(max(rounds), miner)] if rounds else None


class FreeRiderZero(Behaviour):
    """Sends an all-zero pseudo-gradient (pretends to have trained)."""

    name = "free-rider-zero"

    def pseudo_gradient(self, ctx: BehaviourContext, delta: dict[str, Tensor]) -> dict[str, Tensor]:
        """Zeros of the right shapes."""
        return {k: torch.zeros_like(v) for k, v in delta.items()}


class FreeRiderRandom(Behaviour):
    """Sends Gaussian noise with the norm of a real update (so the norm bound does not catch it)."""

    name = "free-rider-random"

    def pseudo_gradient(self, ctx: BehaviourContext, delta: dict[str, Tensor]) -> dict[str, Tensor]:
        """Noise scaled to the true delta's norm, per tensor."""
        g = torch.Generator().manual_seed(ctx.round)
        out = {}
        for k, v in delta.items():
            noise = torch.randn(v.shape, generator=g, dtype=v.dtype)
            out[k] = noise * (float(v.norm()) / max(float(noise.norm()), 1e-12))
        return out


class FreeRiderStale(Behaviour):
    """Commits the update it built in an earlier round (honest in its first round)."""

    name = "free-rider-stale"

    def __init__(self) -> None:
        self.first: bytes | None = None

    def update_bytes(self, ctx: BehaviourContext, data: bytes) -> bytes:
        """The first update it ever built, again and again."""
        if self.first is None:
            self.first = data
            return data
        return self.first


class LazyMiner(Behaviour):
    """Does not do a fraction ``f`` of its assigned inner steps: trains those on other data.

    The substituted steps are packed into the first transcript segments (the cheater's best packing, see
    ``validator.sampling``), so exactly ``ceil(f * S)`` segments fail recomputation. Detection is by
    sampled replay only; the transcript it serves is self-consistent.
    """

    name = "lazy"

    def __init__(self, fraction: float = 0.1, segments: int = 3) -> None:
        self.fraction = fraction
        self.segments = segments

    def batches(self, ctx: BehaviourContext, batches: Tensor) -> Tensor:
        """The assigned batches, with those of the first ``ceil(f S)`` segments replaced."""
        steps = batches.shape[0]
        bad = min(self.segments, max(1, math.ceil(self.fraction * self.segments - 1e-12)))
        n = math.ceil(steps * bad / self.segments) if self.fraction > 0 else 0
        out = batches.clone()
        if n:
            out[:n] = torch.roll(batches[:n], shifts=batches.shape[-1] // 2 + 1, dims=-1)
        return out


class LazyOtherData(LazyMiner):
    """Trains all its steps on other data than assigned (f = 1)."""

    name = "lazy-other-data"

    def __init__(self) -> None:
        super().__init__(1.0)


class EpochPrepared(Behaviour):
    """Knows its DiPaCo path for a whole assignment epoch and prepares its data once: trains
    every round of the epoch on the batches it drew at the epoch's first round it trained in (no new data
    reads, the same windows each round). Each round's batches come from that round's own seed, so a
    validator replaying any segment refuses the update, provably."""

    name = "epoch-prepared"

    def __init__(self) -> None:
        # (the epoch's first round, the path) -> the batches drawn at the first round it trained in
        self.prepared: dict[tuple[int, tuple[str, ...]], Tensor] = {}

    def batches(self, ctx: BehaviourContext, batches: Tensor) -> Tensor:
        """The epoch's first batches from its second round on (the round's own where the shape differs)."""
        key = (epoch_first_round(ctx.round, ctx.epoch_rounds), ctx.modules)
        held = self.prepared.setdefault(key, batches.clone())
        return held.clone() if held.shape == batches.shape else batches


class OverfitScorer(Behaviour):
    """Spends its whole round fitting the one batch it knows before committing (its batch 0: what the
    usefulness score was once measured on), and attests the result with an honest TEE.

    Its transcript is self-consistent but not the assigned training, so any replayed segment but the first
    fails (provably); the score itself is measured on windows drawn after the commits closed, which it
    could not fit.
    """

    name = "overfit-scorer"

    def batches(self, ctx: BehaviourContext, batches: Tensor) -> Tensor:
        """Batch 0 at every step."""
        return batches[:1].expand_as(batches).clone()


class Copier(Behaviour):
    """Re-labels another miner's most recent revealed update as its own (round, miner, base checkpoint).

    Updates are revealed only after the commit deadline, so the freshest it can copy is the previous
    round's. In its first round (nothing to copy) it is honest.
    """

    name = "copier"

    def __init__(self, board: Board | None = None, victim: str = "") -> None:
        self.board = board or Board()
        self.victim = victim

    def update_bytes(self, ctx: BehaviourContext, data: bytes) -> bytes:
        """The victim's last update, re-headered for this round and this miner."""
        src = self.board.latest_update(self.victim, ctx.round)
        if src is None:
            return data
        mine = decode_update(data).header
        theirs = decode_update(src)
        header = replace(
            theirs.header, round=ctx.round, miner=mine.miner, base_checkpoint=mine.base_checkpoint
        )
        return encode_update(Update(header, theirs.tensors))


class Replayer(Behaviour):
    """Commits its own update of an earlier round, unchanged (a replay of signed-off work)."""

    name = "replayer"

    def __init__(self, board: Board | None = None) -> None:
        self.board = board or Board()
        self.me = ""

    def update_bytes(self, ctx: BehaviourContext, data: bytes) -> bytes:
        """Its last revealed update, if any."""
        old = self.board.latest_update(ctx.miner, ctx.round)
        return old if old is not None else data


class QuoteReplayer(Behaviour):
    """Serves the TEE quote of an earlier round (its update is honest)."""

    name = "quote-replayer"

    def __init__(self, board: Board | None = None) -> None:
        self.board = board or Board()

    def evidence(self, ctx: BehaviourContext, evidence: bytes | None) -> bytes | None:
        """The evidence it served in an earlier round, if any."""
        rounds = [r for (r, m) in self.board.evidence if m.lower() == ctx.miner.lower() and r < ctx.round]
        if not rounds:
            return evidence
        return self.board.evidence[(max(rounds), ctx.miner)]


class Poisoner(Behaviour):
    """Sends its true update transformed: scaled, sign-flipped, NaN or huge."""

    name = "poisoner"

    def __init__(self, mode: str = "scaled", factor: float = 3.0) -> None:
        self.mode = mode
        self.factor = factor

    def pseudo_gradient(self, ctx: BehaviourContext, delta: dict[str, Tensor]) -> dict[str, Tensor]:
        """The transformed delta."""
        if self.mode == "scaled":
            return {k: v * self.factor for k, v in delta.items()}
        if self.mode == "flip":
            return {k: -v for k, v in delta.items()}
        if self.mode == "huge":
            return {k: v * 1e6 for k, v in delta.items()}
        return delta  # nan: injected on the wire (the codec refuses to encode non-finite values)

    def update_bytes(self, ctx: BehaviourContext, data: bytes) -> bytes:
        """NaN mode: write a NaN into the first float field of the encoded update."""
        if self.mode != "nan":
            return data
        up = decode_update(data)
        name, _ = up.header.params[0]
        enc = up.tensors[name]
        for fname, t in enc.fields.items():
            if t.is_floating_point():
                t = t.clone()
                t.view(-1)[0] = float("nan")
                enc.fields[fname] = t
                break
        return encode_update(Update(up.header, up.tensors))


PUBLIC_DEV_SEED = b"tessera-devnet"
"""The development-enclave seed every devnet once used (on every validator's command line)."""


class Forger(Behaviour):
    """Serves attestation evidence that does not hold: corrupted bytes, a quote for another digest
    (``mismatch``, from the run's own development enclave), or a well-bound quote from the old public
    development seed (``public-seed``: what anyone who read ``ps`` on a devnet could make)."""

    name = "forger"

    def __init__(self, mode: str = "corrupt", seed: bytes | None = None) -> None:
        self.mode = mode
        self.seed = seed

    def evidence(self, ctx: BehaviourContext, evidence: bytes | None) -> bytes | None:
        """Corrupted, mismatched or publicly forged evidence (fabricated if the node has no TEE)."""
        if self.mode in ("mismatch", "public-seed"):
            chain_id = int(ctx.extra.get("chain_id", 31337))
            if self.mode == "mismatch":
                enclave = SimulatedEnclave.from_seed(self.seed or dev_tee_seed())
                return enclave.quote(report_data(chain_id, ctx.round, ctx.miner, b"\x00" * 32))
            digest = bytes(ctx.extra.get("update_digest", b"\x00" * 32))
            return SimulatedEnclave.from_seed(PUBLIC_DEV_SEED).quote(
                report_data(chain_id, ctx.round, ctx.miner, digest)
            )
        if evidence is None:
            return b"\x04\x00\x02\x00" + b"\x00" * 1000
        b = bytearray(evidence)
        b[len(b) // 2] ^= 0xFF
        return bytes(b)


class Withholder(Behaviour):
    """Commits, then serves nothing."""

    name = "withholder"

    def served_update(self, ctx: BehaviourContext, data: bytes) -> bytes:
        """Nothing."""
        return b""


class RunLazyMiner(LazyMiner):
    """A :class:`LazyMiner` whose segments are its run's transcript segments (``H / k``), bound when its
    node starts: faking ``f`` of them fakes ``f`` of the steps (``tessera devnet --adversary NODE=lazy-10``)."""

    def bind(self, spec: Any, coord: Any) -> None:
        """One segment per transcript state of the run."""
        inner = spec.inner
        self.segments = max(1, inner.steps // max(1, inner.transcript_interval))


def register_all() -> None:
    """Register every mode with ``miner.behaviour`` (``--behaviour NAME``)."""
    for cls in (
        FreeRiderZero,
        FreeRiderRandom,
        FreeRiderStale,
        LazyMiner,
        LazyOtherData,
        OverfitScorer,
        EpochPrepared,
        Replayer,
        QuoteReplayer,
        Withholder,
    ):
        register(cls.name, cls)
    # the ways around an audit read the draw and the run through the node that binds them
    for way in (
        WithholdWhenAudited,
        HangWhenAudited,
        DripWhenAudited,
        LastDeltaRider,
        LastDeltaHangWhenAudited,
    ):
        register(way.name, way)
    register("lazy-10", lambda: RunLazyMiner(0.1))
    register("lazy-50", lambda: RunLazyMiner(0.5))
    register("poisoner-scaled", lambda: Poisoner("scaled"))
    register("poisoner-flip", lambda: Poisoner("flip"))
    register("poisoner-huge", lambda: Poisoner("huge"))
    register("poisoner-nan", lambda: Poisoner("nan"))
    register("forger", lambda: Forger("corrupt"))
    register("forger-mismatch", lambda: Forger("mismatch"))
    register("forger-public-seed", lambda: Forger("public-seed"))
