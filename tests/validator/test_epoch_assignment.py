"""A round in the middle of a DiPaCo assignment epoch (issue 28): the miner draws its path from the epoch
seed (``protocol.rounds.epochs`` + ``miner.work.build_update``), rebuilds it from its stored record after a
restart (``MinerRoundRecord.assignment_inputs``), and the validator's round context
(``validator.connections.Connections.round_context``) draws the same, so its updates pass the pipeline, a
miner registered in the middle of the epoch included. The batches still come from the round's own seed."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from eth_account import Account
from torch import Tensor

from miner.behaviour import Behaviour
from miner.state import MinerRoundRecord
from miner.work import BuiltUpdate, RoundInputs, assignment_for, build_update
from protocol.rounds.epochs import round_epoch
from protocol.rounds.memcoordinator import MemoryCoordinator, MemoryLedger
from protocol.rounds.phases import Phase
from protocol.runspec import RunSpec
from protocol.wire.tensorblob import tensors_digest
from tests.training.training_fixtures import tiny_model
from training.assignment import assign
from training.config import InnerConfig
from validator.connections import Connections, Theta
from validator.context import Incoming, RoundContext, Verdict
from validator.pipeline import VerificationPipeline
from validator.policy import VerifyPolicy

KEYS = ["0x" + f"{i:064x}" for i in range(51, 55)]
SPEC = RunSpec(model=tiny_model("dipaco"), inner=InnerConfig(steps=4, transcript_interval=1), epoch_rounds=4)


def _end_round(ledger: MemoryLedger, coord: MemoryCoordinator) -> None:
    r = ledger.round
    while ledger.phase != Phase.FINALIZE:
        ledger.mine(ledger.phase_blocks)
        assert coord.advance()
    coord.finalize(r)


def _validator_conn(coord: MemoryCoordinator) -> Connections:
    """A validator's connections with what ``round_context`` reads: the run and the chain."""
    none: Any = None
    return Connections(none, SPEC, coord, none, none, none, none, none, none)


def test_miner_and_validator_draw_the_same_assignment_in_the_middle_of_an_epoch() -> None:
    torch.set_num_threads(1)
    theta = SPEC.genesis_params()
    digest = tensors_digest({f"param/{k}": v for k, v in theta.items()})
    ledger = MemoryLedger(bytes.fromhex(digest[2:]), phase_blocks=5)
    val = MemoryCoordinator(ledger, Account.from_key(KEYS[0]).address)
    val.ensure_registered("validator", 1000)
    a, b, late = (MemoryCoordinator(ledger, Account.from_key(k).address) for k in KEYS[1:])
    a.ensure_registered("miner", 100)
    b.ensure_registered("miner", 100)
    for r in range(1, 6):  # epochs of 4: rounds 4-7 share seed(3) and round 4's registry (a, b)
        if r == 4:
            late.ensure_registered("miner", 100)  # joins round 5, in the middle of the epoch
        _end_round(ledger, val)
    conn = _validator_conn(val)
    built: dict[str, BuiltUpdate] = {}
    for m in (a, late):
        st = m.current()
        assert st.round == 6 and st.phase == Phase.COMMIT
        registry = m.miners(6)
        epoch = round_epoch(m, 6, st.assign_seed, SPEC.epoch_rounds)
        assert epoch.seed == ledger.seeds[3] != st.assign_seed and epoch.registry == m.miners(4)
        inputs = RoundInputs(
            6, m.address, theta, bytes.fromhex(digest[2:]), st.assign_seed, registry,
            epoch_seed=epoch.seed, epoch_registry=epoch.registry,
        )  # fmt: skip
        built[m.address] = build_update(SPEC, conn.dataset, inputs, Behaviour())
        m.commit_update(6, built[m.address].digest)
        # the record the miner stores (JSON and back) rebuilds the assignment it trained
        rec = MinerRoundRecord.from_json(
            MinerRoundRecord(
                assign_seed=st.assign_seed.hex(),
                registry=registry,
                epoch_seed=epoch.seed.hex(),
                epoch_registry=list(epoch.registry),
            ).to_json()
        )
        drawn = rec.assignment_inputs()
        assert drawn is not None
        assert assignment_for(SPEC, drawn[0], drawn[1], m.address, drawn[2]) == built[m.address].assignment
    # the epoch's miners keep the paths of its first round; the late miner ranks after them
    kept = assign(ledger.seeds[3], [a.address, b.address], SPEC.model)
    assert built[a.address].assignment == kept[a.address] and built[late.address].assignment.rank == 2

    while ledger.phase != Phase.SCORE_COMMIT:  # leaving REVEAL fixes seed(6), which picks the segments
        ledger.mine(ledger.phase_blocks)
        assert val.advance()
    st = val.current()
    ctx = conn.round_context(st, Theta(6, digest, theta, {}))
    assert ctx.epoch_seed == ledger.seeds[3] and ctx.assign_seed == ledger.seeds[5]
    commitments = val.update_commitments(6)
    for miner, up in built.items():
        assert ctx.assignment(miner) == up.assignment
        verdict = _verify(ctx, miner, commitments[miner], up)
        assert verdict.accepted, (verdict.stage, verdict.reason)
    # a validator drawing the paths from the round's seed (no epoch) would refuse these updates
    plain = replace(ctx, epoch_seed=None, epoch_registry=None, assignments={})
    for miner, up in built.items():
        assert plain.assignment(miner).path != up.assignment.path
        verdict = _verify(plain, miner, commitments[miner], up)
        assert not verdict.accepted and verdict.stage == "header"


def _verify(ctx: RoundContext, miner: str, commitment: bytes, up: BuiltUpdate) -> Verdict:
    """The pipeline's verdict on ``up``, every blob served as the miner serves it."""
    served = dict(up.published())

    def fetch_state(d: str) -> dict[str, Tensor]:
        return {k: v.clone() for k, v in served[d].items()}

    incoming = Incoming(miner, commitment, lambda: up.update, fetch_state)
    return VerificationPipeline(VerifyPolicy()).verify(incoming, ctx)
