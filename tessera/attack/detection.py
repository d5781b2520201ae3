"""Measured detection of lazy miners with the real verification code, against the model.

One lazy update is built with the miner's own code (``miner.work.build_update`` with
:class:`tessera.attack.miners.LazyMiner`), then verified with ``validator.pipeline.VerificationPipeline.verify`` under
many round seeds (the seed only chooses the replayed segments, so the update need not be rebuilt) by
``validators`` validator addresses. The measured per-validator catch rate and the rate at which the
round's lower median would be 0 are compared with :mod:`tessera.attack.economics`.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import torch

from miner.work import KeptTranscript, RoundInputs, build_update, transcript_state
from protocol.rounds.consensus import weighted_median
from protocol.wire.commitments import update_commitment
from protocol.wire.tensorblob import tensors_digest
from tessera.attack import economics as ec
from tessera.attack.harness import tiny_spec
from tessera.attack.miners import LazyMiner
from training.data import prepare
from validator.context import Incoming, RoundContext
from validator.pipeline import VerificationPipeline
from validator.policy import VerifyPolicy
from validator.stages import Stage


@dataclass
class DetectionResult:
    """Measured against modelled detection for one (f, S, m, V)."""

    fraction: float
    segments: int
    checked: int
    validators: int
    trials: int
    measured_one: float
    model_one: float
    measured_zeroed: float
    model_zeroed: float
    measured_all: float
    model_all: float
    """All validators catch (the slash quorum if each voted only on its own catches; since F8 one catch
    leads to a slash)."""

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


@contextmanager
def zero_missing_grads() -> Iterator[None]:
    """Simulate the proposed fix of ``training/inner.py`` (see docs/security.md, finding F2).

    An MoE expert that receives no token in an inner step has ``grad is None``; AdamW then skips it and
    its per-parameter step count falls behind the transcript's single ``adam_step``, so honest segments
    after such a step do not replay. Filling missing gradients with zeros before clipping makes every
    trained parameter step every time. Used only to measure the model on a fixed verifier.
    """
    orig = torch.nn.utils.clip_grad_norm_

    def patched(params: Any, *args: Any, **kwargs: Any) -> Any:
        ps = list(params)
        for p in ps:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        return orig(ps, *args, **kwargs)

    torch.nn.utils.clip_grad_norm_ = patched  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.nn.utils.clip_grad_norm_ = orig  # type: ignore[assignment]


def measure(
    fraction: float,
    steps: int,
    interval: int,
    trials: int,
    validators: int = 2,
    checked: int = 2,
    fixed_inner: bool = False,
) -> DetectionResult:
    """Verify one lazy update under ``trials`` seeds with ``validators`` validators.

    ``fixed_inner`` runs miner and validator under :func:`zero_missing_grads`.
    """
    if fixed_inner:
        with zero_missing_grads():
            return measure(fraction, steps, interval, trials, validators, checked)
    lazy = _LazyUpdate.build(fraction, steps, interval)
    vals = ["0x" + f"{i + 1:040x}" for i in range(validators)]
    policy = VerifyPolicy(segments_per_miner=checked)
    one = zeroed = every = 0
    for t in range(trials):
        seed = hashlib.sha256(b"trial" + t.to_bytes(4, "big")).digest()
        scores = []
        for v in vals:
            caught = lazy.caught_by(v, vals, seed, policy)
            one += caught
            scores.append(0 if caught else 5000)
        zeroed += weighted_median(scores, [1] * validators) == 0
        every += all(s == 0 for s in scores)
    n_segments = lazy.n_segments
    p1 = ec.p_one_validator(fraction, n_segments, checked)
    return DetectionResult(
        fraction, n_segments, checked, validators, trials,
        round(one / (trials * validators), 4), round(p1, 4),
        round(zeroed / trials, 4), round(ec.p_reward_zeroed(fraction, n_segments, checked, [1] * validators), 4),
        round(every / trials, 4),
        round(ec.p_reward_zeroed(fraction, n_segments, checked, [1] * validators, quorum=1.0), 4),
    )  # fmt: skip


@dataclass
class _LazyUpdate:
    """One lazy miner's update of round 1 on the tiny spec, with what a validator needs to verify it."""

    spec: Any
    dataset: Any
    theta: dict[str, Any]
    digest: bytes
    miner: str
    registry: list[str]
    assign_seed: bytes
    n_segments: int
    built: Any
    """``miner.work.build_update``'s result (update, transcript, snapshots)."""

    @classmethod
    def build(cls, fraction: float, steps: int, interval: int) -> _LazyUpdate:
        """Build it with the miner's own code and :class:`LazyMiner` faking ``fraction`` of the steps."""
        torch.manual_seed(0)
        spec = tiny_spec(steps=steps, interval=interval)
        ds = prepare(spec.load_corpus(), spec.model)
        theta = spec.genesis_params()
        digest = bytes.fromhex(tensors_digest({f"param/{k}": v for k, v in theta.items()})[2:])
        miner = "0x" + "ab" * 20
        registry = [miner, "0x" + "cd" * 20]
        assign_seed = hashlib.sha256(b"detection").digest()
        n_segments = len(sorted({*range(0, steps, interval), steps})) - 1
        built = build_update(
            spec,
            ds,
            RoundInputs(
                round=1,
                miner=miner,
                checkpoint=theta,
                checkpoint_digest=digest,
                assign_seed=assign_seed,
                registry=registry,
                ef_state={},
            ),
            LazyMiner(fraction, n_segments),
            snapshot_every=1,
        )
        return cls(spec, ds, theta, digest, miner, registry, assign_seed, n_segments, built)

    @functools.cached_property
    def steps_by_digest(self) -> dict[str, int]:
        """The inner step of each transcript state, by its digest."""
        built = self.built
        return dict(
            zip(("0x" + t.hex() for t in built.transcript_digests), built.transcript_steps, strict=True)
        )

    def fetch_state(self, d: str) -> dict[str, Any]:
        """The transcript state with digest ``d``, as the miner would serve it."""
        built = self.built
        if d in built.published():
            return built.published()[d]
        kept = KeptTranscript(1, self.theta, self.assign_seed, built.assignment, built.snapshots)
        return transcript_state(self.spec, self.dataset, kept, self.steps_by_digest[d])

    def caught_by(self, validator: str, validators: list[str], seed: bytes, policy: Any) -> bool:
        """Whether ``validator`` refuses the update at the recomputation stage under round seed ``seed``."""
        ctx = RoundContext(
            spec=self.spec, dataset=self.dataset, round=1, chain_id=31337, contract="0x" + "c0" * 20,
            validator=validator, checkpoint=self.theta, checkpoint_digest=self.digest,
            assign_seed=self.assign_seed, seed=seed, registry=self.registry, validators=validators,
        )  # fmt: skip
        commitment = update_commitment(31337, ctx.contract, 1, self.miner, self.built.digest)
        incoming = Incoming(self.miner, commitment, lambda: self.built.update, self.fetch_state)
        verdict = VerificationPipeline(policy).verify(incoming, ctx)
        return bool(verdict.stage == Stage.RECOMPUTE)


def main(argv: list[str] | None = None) -> DetectionResult:
    """``python -m tessera.attack.detection``: print one measurement as JSON."""
    p = argparse.ArgumentParser(
        prog="python -m tessera.attack.detection", description=__doc__.splitlines()[0]
    )
    p.add_argument("--fraction", type=float, default=1 / 3, help="share of inner steps faked (default 1/3)")
    p.add_argument("--steps", type=int, default=6, help="inner steps H (default 6)")
    p.add_argument("--interval", type=int, default=2, help="transcript interval k (default 2: S = H / k)")
    p.add_argument("--trials", type=int, default=60, help="round seeds (default 60)")
    p.add_argument("--validators", type=int, default=2, help="equal-stake validators (default 2)")
    p.add_argument("--checked", type=int, default=2, help="segments each validator replays (default 2)")
    a = p.parse_args(argv)
    res = measure(a.fraction, a.steps, a.interval, a.trials, a.validators, a.checked)
    print(json.dumps(res.to_json(), indent=1))
    return res


if __name__ == "__main__":
    main()
