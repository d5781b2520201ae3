"""Each adversarial miner mode, built with the miner's own code and checked with the validator's.

Fast (no network): one tiny round; the update each behaviour produces goes through
``validator.pipeline.VerificationPipeline.verify`` and must be refused (score 0) at the expected stage.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from miner.behaviour import Behaviour, available, make_behaviour
from miner.work import KeptTranscript, RoundInputs, build_update, transcript_state
from protocol.wire.commitments import update_commitment
from protocol.wire.tensorblob import tensors_digest
from tessera.attack.harness import tiny_spec
from tessera.attack.miners import (
    Board,
    Copier,
    FreeRiderRandom,
    FreeRiderZero,
    LazyOtherData,
    Poisoner,
    register_all,
)
from training.data import prepare
from validator.context import Incoming, RoundContext
from validator.pipeline import VerificationPipeline
from validator.policy import VerifyPolicy

MINER = "0x" + "ab" * 20
OTHER = "0x" + "cd" * 20
CONTRACT = "0x" + "c0" * 20


@pytest.fixture(scope="module")
def world() -> dict[str, Any]:
    spec = tiny_spec()
    ds = prepare(spec.load_corpus(), spec.model)
    theta = spec.genesis_params()
    digest = bytes.fromhex(tensors_digest({f"param/{k}": v for k, v in theta.items()})[2:])
    return {"spec": spec, "ds": ds, "theta": theta, "digest": digest, "seed": hashlib.sha256(b"a").digest()}


def _build(world: dict[str, Any], behaviour: Behaviour, miner: str = MINER, round: int = 1) -> Any:
    return build_update(
        world["spec"],
        world["ds"],
        RoundInputs(
            round=round,
            miner=miner,
            checkpoint=world["theta"],
            checkpoint_digest=world["digest"],
            assign_seed=world["seed"],
            registry=[MINER, OTHER],
            ef_state={},
        ),
        behaviour,
        snapshot_every=1,
    )


def _verify(world: dict[str, Any], built: Any, data: bytes | None = None, round: int = 1) -> Any:
    spec, ds = world["spec"], world["ds"]
    data = built.update if data is None else data
    steps = dict(zip(("0x" + d.hex() for d in built.transcript_digests), built.transcript_steps, strict=True))

    def fetch_state(d: str) -> Any:
        if d in built.published():
            return built.published()[d]
        kept = KeptTranscript(round, world["theta"], world["seed"], built.assignment, built.snapshots)
        return transcript_state(spec, ds, kept, steps[d])

    ctx = RoundContext(
        spec=spec, dataset=ds, round=round, chain_id=31337, contract=CONTRACT, validator="0x" + "01" * 20,
        checkpoint=world["theta"], checkpoint_digest=world["digest"], assign_seed=world["seed"],
        seed=hashlib.sha256(b"round-seed").digest(), registry=[MINER, OTHER],
    )  # fmt: skip
    from protocol.wire.update import update_digest

    commitment = update_commitment(31337, CONTRACT, round, MINER, update_digest(data))
    incoming = Incoming(MINER, commitment, lambda: data, fetch_state)
    return VerificationPipeline(VerifyPolicy(segments_per_miner=3)).verify(incoming, ctx)


def test_honest_is_accepted(world: dict[str, Any]) -> None:
    v = _verify(world, _build(world, Behaviour()))
    assert v.accepted and v.score > 0, v


@pytest.mark.parametrize(
    ("behaviour", "stages"),
    [
        (FreeRiderZero(), {"recompute"}),
        (FreeRiderRandom(), {"recompute", "bounds"}),
        (Poisoner("flip"), {"recompute"}),
        (Poisoner("huge"), {"bounds"}),
        (Poisoner("nan"), {"format"}),
        (LazyOtherData(), {"recompute"}),
    ],
    ids=lambda x: getattr(x, "name", "") + getattr(x, "mode", "") if not isinstance(x, set) else "",
)
def test_cheats_are_refused_with_evidence(
    world: dict[str, Any], behaviour: Behaviour, stages: set[str]
) -> None:
    v = _verify(world, _build(world, behaviour))
    assert not v.accepted and v.score == 0
    assert v.stage in stages, (v.stage, v.reason)
    assert v.provable, v


def test_copied_update_is_refused(world: dict[str, Any]) -> None:
    victim = _build(world, Behaviour(), miner=OTHER)
    board = Board(updates={(0, OTHER): victim.update})
    v = _verify(world, _build(world, Copier(board, OTHER)))
    assert not v.accepted and v.provable and v.stage in {"header", "recompute"}, (v.stage, v.reason)


def test_stale_update_is_refused(world: dict[str, Any]) -> None:
    old = _build(world, Behaviour(), round=1)
    v = _verify(world, old, round=2)
    assert not v.accepted and v.stage == "header" and v.provable


def test_modes_register() -> None:
    register_all()
    for name in ("free-rider-zero", "lazy", "poisoner-nan", "forger", "withholder"):
        assert name in available()
        assert isinstance(make_behaviour(name), Behaviour)
