"""F10: a validator that committed a seed share but did not reveal it cannot reveal scores.

The contract refuses it (``SeedNotRevealed`` in ``TesseraNetwork.revealScores``); the in-memory coordinator
must refuse it the same way and with the same typed error that ``protocol.chain.coordinator`` raises for the
contract's revert, so a node sees one behaviour whatever the backend.
"""

from __future__ import annotations

import pytest
from eth_abi import encode as abi_encode
from eth_account import Account
from eth_utils import keccak

from protocol.chain import SeedNotRevealed
from protocol.chain.abi import decode_revert
from protocol.chain.coordinator import translate
from protocol.rounds.coordinator import CoordinatorError, SeedNotRevealedError
from protocol.rounds.memcoordinator import MemoryCoordinator, MemoryLedger
from protocol.rounds.phases import Phase

KEYS = ["0x" + f"{i:064x}" for i in range(21, 25)]
SALT = b"\x07" * 32


def _to_phase(ledger: MemoryLedger, coord: MemoryCoordinator, phase: Phase) -> None:
    while ledger.phase != phase:
        ledger.mine(ledger.phase_blocks)
        assert coord.advance()


def _round_to_score_reveal(
    seed_committers: int, seed_revealers: int
) -> tuple[MemoryLedger, list[MemoryCoordinator], list[int]]:
    """Three validators and one committed miner; validators 0..seed_committers-1 commit a seed share and
    0..seed_revealers-1 reveal it; every validator commits scores. Returns at SCORE_REVEAL."""
    ledger = MemoryLedger(b"\x01" * 32, phase_blocks=10)
    vals = [MemoryCoordinator(ledger, Account.from_key(k).address) for k in KEYS[:3]]
    miner = MemoryCoordinator(ledger, Account.from_key(KEYS[3]).address)
    for v in vals:
        v.ensure_registered("validator", 1000)
    miner.ensure_registered("miner", 100)
    # Round 1 opened before the registrations; leave it so the commits below land in an open COMMIT.
    ledger.phase_start = ledger.block
    r = ledger.round
    miner.commit_update(r, b"\x02" * 32)
    secrets = [bytes([i + 1]) * 32 for i in range(len(vals))]
    for v, s in zip(vals[:seed_committers], secrets, strict=False):
        v.commit_seed(r, s)
    _to_phase(ledger, vals[0], Phase.REVEAL)
    for v, s in zip(vals[:seed_revealers], secrets, strict=False):
        v.reveal_seed(r, s)
    _to_phase(ledger, vals[0], Phase.SCORE_COMMIT)
    scores = [7_000]
    for v in vals:
        v.commit_scores(r, scores, SALT)
    _to_phase(ledger, vals[0], Phase.SCORE_REVEAL)
    return ledger, vals, scores


def test_unrevealed_seed_share_refuses_score_reveal() -> None:
    ledger, vals, scores = _round_to_score_reveal(seed_committers=3, seed_revealers=2)
    r = ledger.round
    vals[0].reveal_scores(r, scores, SALT)
    vals[1].reveal_scores(r, scores, SALT)
    with pytest.raises(SeedNotRevealedError):
        vals[2].reveal_scores(r, scores, SALT)
    assert vals[2].score_status(r) == (True, False)
    assert set(ledger.rounds[r].reveals) == {vals[0].address, vals[1].address}
    # and its (withheld) scores take no part in the settlement
    _to_phase(ledger, vals[0], Phase.FINALIZE)
    vals[0].finalize(r)
    settled = ledger.rounds[r].settlement
    assert settled is not None
    assert set(settled.validator_rewards) == {vals[0].address, vals[1].address}


def test_no_seed_share_committed_may_still_reveal_scores() -> None:
    # The contract only refuses a committed-but-unrevealed share; a validator that never committed one
    # (joined late, or skipped the seed) still reveals its scores.
    ledger, vals, scores = _round_to_score_reveal(seed_committers=2, seed_revealers=2)
    vals[2].reveal_scores(ledger.round, scores, SALT)
    assert vals[2].score_status(ledger.round) == (True, True)


def test_seed_not_revealed_is_a_typed_coordinator_error() -> None:
    assert issubclass(SeedNotRevealedError, CoordinatorError)


def test_chain_coordinator_maps_the_contract_revert_to_the_same_error() -> None:
    """The contract's revert data, decoded by ``protocol.chain`` and translated by ``protocol.chain.coordinator``."""
    who = Account.from_key(KEYS[2]).address
    data = keccak(text="SeedNotRevealed(address,uint256)")[:4] + abi_encode(["address", "uint256"], [who, 5])
    revert = decode_revert("revealScores", "0x" + data.hex())
    assert isinstance(revert, SeedNotRevealed)
    assert revert.args_dict == {"validator": who, "round": 5}

    def reveal() -> None:
        raise revert

    with pytest.raises(SeedNotRevealedError) as info:
        translate("reveal scores", reveal)
    assert info.value.__cause__ is revert
