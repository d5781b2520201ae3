"""Assignment epochs on the chain (issue 28): ``epoch_rounds`` in the run file, and the epoch seed and
registry of a round read from the in-memory coordinator (``protocol.rounds.epochs``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from eth_account import Account

from protocol.rounds.coordinator import CoordinatorError
from protocol.rounds.epochs import epoch_first_round, round_epoch
from protocol.rounds.memcoordinator import MemoryCoordinator, MemoryLedger
from protocol.rounds.phases import Phase
from protocol.runspec import RunSpec, RunSpecError
from tests.training.training_fixtures import tiny_model
from training.assignment import assign, assign_in_epoch

KEYS = ["0x" + f"{i:064x}" for i in range(41, 46)]
DIPACO = RunSpec(model=tiny_model("dipaco"), epoch_rounds=1)


def test_epoch_rounds_round_trips_and_is_left_out_at_one() -> None:
    assert "epoch_rounds" not in DIPACO.to_json()  # run files written before the field keep their digest
    eight = replace(DIPACO, epoch_rounds=8)
    doc = eight.to_json()
    assert doc["epoch_rounds"] == 8
    assert RunSpec.from_json(doc) == eight and eight.digest() != DIPACO.digest()
    assert RunSpec.from_json({**DIPACO.to_json(), "epoch_rounds": 1}).digest() == DIPACO.digest()


@pytest.mark.parametrize("bad", [0, -3, True, "8", 2.0, None])
def test_a_bad_epoch_rounds_is_a_run_spec_error(bad: object) -> None:
    with pytest.raises(RunSpecError, match="epoch_rounds"):
        RunSpec.from_json({**DIPACO.to_json(), "epoch_rounds": bad})


@pytest.mark.parametrize("mode", ["moe", "dense"])
def test_epochs_are_refused_outside_dipaco(mode: str) -> None:
    spec = RunSpec(model=tiny_model(mode))
    with pytest.raises(RunSpecError, match="only in dipaco"):
        RunSpec.from_json({**spec.to_json(), "epoch_rounds": 8})
    with pytest.raises(RunSpecError, match="only in dipaco"):
        replace(spec, epoch_rounds=2)
    assert replace(spec, epoch_rounds=1) == spec


def _chain() -> tuple[MemoryLedger, MemoryCoordinator, list[MemoryCoordinator]]:
    ledger = MemoryLedger(b"\x01" * 32, phase_blocks=5)
    coord = MemoryCoordinator(ledger, Account.from_key(KEYS[0]).address)
    coord.ensure_registered("validator", 1000)
    miners = [MemoryCoordinator(ledger, Account.from_key(k).address) for k in KEYS[1:]]
    return ledger, coord, miners


def _next_round(ledger: MemoryLedger, coord: MemoryCoordinator) -> None:
    """Run the current round to its end with nothing committed (leaving REVEAL fixes its seed)."""
    r = ledger.round
    while ledger.phase != Phase.FINALIZE:
        ledger.mine(ledger.phase_blocks)
        assert coord.advance()
    coord.finalize(r)


def test_the_first_epoch_starts_at_round_one_with_the_genesis_seed() -> None:
    assert [epoch_first_round(r, 4) for r in range(1, 10)] == [1, 1, 1, 4, 4, 4, 4, 8, 8]
    assert [epoch_first_round(r, 1) for r in range(1, 5)] == [1, 2, 3, 4]
    ledger, coord, _ = _chain()
    for _ in range(2):
        _next_round(ledger, coord)
    st = coord.current()
    assert st.round == 3
    e = round_epoch(coord, 3, st.assign_seed, 4)
    # as round 1's assign_seed: seed(0), the genesis seed
    assert e.first_round == 1 and e.seed == ledger.seeds[0] != st.assign_seed


def test_epochs_of_one_round_read_nothing_more() -> None:
    ledger, coord, miners = _chain()
    for m in miners[:3]:
        m.ensure_registered("miner", 100)
    _next_round(ledger, coord)
    st = coord.current()
    e = round_epoch(coord, st.round, st.assign_seed, 1)
    assert (e.first_round, e.seed, e.registry) == (2, st.assign_seed, coord.miners(2))


def test_assignments_are_kept_through_the_epoch_and_redrawn_at_its_end() -> None:
    """Epochs of 4: rounds 1-3, 4-7, 8-11. Three miners register during round 1 (so they are late in the
    first epoch, as a devnet's miners are), a fourth during round 5 (late in the second epoch)."""
    ledger, coord, miners = _chain()
    for m in miners[:3]:
        m.ensure_registered("miner", 100)
    cfg, seen = DIPACO.model, {}
    for r in range(1, 10):
        st = coord.current()
        assert st.round == r
        registry = coord.miners(r)
        e = round_epoch(coord, r, st.assign_seed, 4)
        assert e.seed == ledger.seeds[e.first_round - 1]
        seen[r] = assign_in_epoch(e.seed, e.registry, registry, cfg) if registry else {}
        if r == 5:
            miners[3].ensure_registered("miner", 100)
        _next_round(ledger, coord)
    first3 = [m.address for m in miners[:3]]
    assert seen[1] == {} and seen[2] == seen[3] == assign(ledger.seeds[0], first3, cfg)
    # the second epoch is drawn from seed(3) among round 4's registry; the joiner of round 5 trains from
    # round 6 without moving anyone
    assert seen[4] == seen[5] == assign(ledger.seeds[3], first3, cfg)
    assert seen[6] == seen[7] and {m: seen[6][m] for m in first3} == seen[4]
    assert seen[6][miners[3].address].rank == 3
    # the third epoch: seed(7), everyone ranked afresh
    all4 = [m.address for m in miners[:4]]
    assert seen[8] == seen[9] == assign(ledger.seeds[7], all4, cfg) != seen[6]
    # the chosen paths did change at the boundaries (the seeds differ)
    assert ledger.seeds[0] != ledger.seeds[3] != ledger.seeds[7]


def test_an_unfixed_epoch_seed_is_a_coordinator_error() -> None:
    class NoSeeds(MemoryCoordinator):
        def seed(self, round: int) -> bytes | None:
            return None

    ledger, coord, _ = _chain()
    for _ in range(5):
        _next_round(ledger, coord)
    blind = NoSeeds(ledger, coord.address)
    with pytest.raises(CoordinatorError, match="not fixed"):
        round_epoch(blind, 6, blind.current().assign_seed, 4)
