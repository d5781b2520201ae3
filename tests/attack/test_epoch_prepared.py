"""Knowing its path ahead (issue 28, assignment epochs): what a DiPaCo miner can prepare an epoch early and
whether it pays. With epochs of E rounds a miner knows its path from the epoch's first round, so the
cheapest thing to prepare is the batches: it draws its path's batches once, with the first round's seed,
and trains every later round of the epoch on them (no new data reads, the optimizer state warm on the
same windows). Each round's batches come from that round's own seed, so the validator's replay of any
segment refuses the update, provably; the honest miner's update of the same round passes."""

from __future__ import annotations

from typing import Any

import torch
from eth_account import Account

from miner.behaviour import Behaviour, BehaviourContext
from miner.work import BuiltUpdate, RoundInputs, assignment_for, build_update, round_batches
from protocol.rounds.epochs import round_epoch
from protocol.rounds.memcoordinator import MemoryCoordinator, MemoryLedger
from protocol.rounds.phases import Phase
from protocol.runspec import RunSpec
from protocol.wire.tensorblob import tensors_digest
from tessera.attack.harness import tiny_spec
from tessera.attack.miners import EpochPrepared
from tessera.attack.runner import reference, reference_key
from tessera.attack.scenarios import get
from tests.training.training_fixtures import tiny_model
from training.config import InnerConfig
from validator.connections import Connections, Theta
from validator.context import Incoming
from validator.pipeline import VerificationPipeline
from validator.policy import VerifyPolicy

KEYS = ["0x" + f"{i:064x}" for i in range(61, 64)]
SPEC = RunSpec(model=tiny_model("dipaco"), inner=InnerConfig(steps=4, transcript_interval=1), epoch_rounds=4)


def _to_commit_phase_of(ledger: MemoryLedger, coord: MemoryCoordinator, round: int) -> None:
    while ledger.round < round:
        r = ledger.round
        while ledger.phase != Phase.FINALIZE:
            ledger.mine(ledger.phase_blocks)
            assert coord.advance()
        coord.finalize(r)


def test_batches_prepared_at_the_epochs_first_round_are_refused_provably() -> None:
    torch.set_num_threads(1)
    theta = SPEC.genesis_params()
    digest = tensors_digest({f"param/{k}": v for k, v in theta.items()})
    ledger = MemoryLedger(bytes.fromhex(digest[2:]), phase_blocks=5)
    val = MemoryCoordinator(ledger, Account.from_key(KEYS[0]).address)
    val.ensure_registered("validator", 1000)
    honest, cheat = (MemoryCoordinator(ledger, Account.from_key(k).address) for k in KEYS[1:])
    for m in (honest, cheat):
        m.ensure_registered("miner", 100)
    _to_commit_phase_of(ledger, val, 6)  # epochs of 4: round 6 is in the epoch of rounds 4-7
    none: Any = None
    conn = Connections(none, SPEC, val, none, none, none, none, none, none)
    st = val.current()
    epoch = round_epoch(val, 6, st.assign_seed, SPEC.epoch_rounds)
    first_assign_seed = ledger.seeds[epoch.first_round - 1]  # what the cheat knew at round 4
    assert epoch.first_round == 4 and first_assign_seed == epoch.seed != st.assign_seed
    built: dict[str, BuiltUpdate] = {}
    for m in (honest, cheat):
        inputs = RoundInputs(
            6, m.address, theta, bytes.fromhex(digest[2:]), st.assign_seed, m.miners(6),
            epoch_seed=epoch.seed, epoch_registry=epoch.registry,
        )  # fmt: skip
        behaviour = Behaviour()
        if m is cheat:
            a = assignment_for(SPEC, epoch.seed, m.miners(6), m.address, epoch.registry)
            prepared = round_batches(SPEC, conn.dataset, first_assign_seed, a)
            assert not torch.equal(prepared, round_batches(SPEC, conn.dataset, st.assign_seed, a))
            behaviour = EpochPrepared()  # the attack suite's mode, primed as at round 4
            behaviour.batches(BehaviourContext(4, m.address, a.module_ids, 4, epoch_rounds=4), prepared)
        built[m.address] = build_update(SPEC, conn.dataset, inputs, behaviour)
        m.commit_update(6, built[m.address].digest)
    while ledger.phase != Phase.SCORE_COMMIT:  # leaving REVEAL fixes seed(6), which picks the segments
        ledger.mine(ledger.phase_blocks)
        assert val.advance()
    ctx = conn.round_context(val.current(), Theta(6, digest, theta, {}))
    commitments = val.update_commitments(6)
    verdicts = {}
    for miner, up in built.items():
        served = dict(up.published())
        incoming = Incoming(
            miner, commitments[miner], lambda up=up: up.update, lambda d, s=served: dict(s[d].items())
        )
        verdicts[miner] = VerificationPipeline(VerifyPolicy()).verify(incoming, ctx)
    assert verdicts[honest.address].accepted, verdicts[honest.address].reason
    caught = verdicts[cheat.address]
    assert not caught.accepted and caught.stage == "recompute" and caught.provable, caught


def test_the_mode_trains_an_epochs_later_rounds_on_its_first_batches() -> None:
    mode, path = EpochPrepared(), ("block0.1",)
    first, later, next_epoch = (torch.full((2, 3), float(i)) for i in range(3))
    ctx = [BehaviourContext(r, "0xm", path, 2, epoch_rounds=4) for r in (1, 3, 4)]
    assert torch.equal(mode.batches(ctx[0], first), first)  # epoch of rounds 1-3: drawn at round 1
    assert torch.equal(mode.batches(ctx[1], later), first)  # round 3: round 1's batches again
    assert torch.equal(mode.batches(ctx[2], next_epoch), next_epoch)  # round 4 opens the next epoch
    assert torch.equal(mode.batches(ctx[1], torch.zeros(3, 3)), torch.zeros(3, 3))  # another shape: its own


def test_the_scenario_runs_dipaco_epochs_and_its_reference_too() -> None:
    sc = get("epoch-prepared")
    assert sc.adapt_spec is not None
    spec = sc.adapt_spec(tiny_spec())
    assert spec.model.mode == "dipaco" and spec.epoch_rounds == 8 and sc.cheat_from == 2
    assert reference(sc).adapt_spec is sc.adapt_spec
    assert reference_key(sc) != reference_key(get("baseline"))  # not compared with the MoE baseline
