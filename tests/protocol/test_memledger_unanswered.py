"""The in-memory ledger's unanswered-audit path and holds mirror ``NetworkSlashing`` (issue 38): a committee
member opens the report, the committee and the seed-drawn witnesses decide it by stake, a confirmation takes
``slash_bps`` of the miner's stake and forfeits every unvested round -- pay that would have vested while the
vote was open included, since opening puts all of it on hold -- an expiry releases the hold, a rejection
releases it and slashes the proposer."""

from __future__ import annotations

import pytest
from eth_account import Account

from protocol.rounds.audits import REPORT_WINDOW_ROUNDS, audit_draw, witness_draw
from protocol.rounds.coordinator import AlreadyDoneError, CoordinatorError, NotRegisteredError
from protocol.rounds.memcoordinator import MemoryCoordinator, MemoryLedger
from protocol.rounds.phases import Phase

KEYS = ["0x" + f"{i:064x}" for i in range(41, 46)]
SALT = b"\x07" * 32
MINER_STAKE = 100
VALIDATOR_STAKE = 1000


def _net(**kw: int) -> tuple[MemoryLedger, list[MemoryCoordinator], list[MemoryCoordinator]]:
    """Three validators, two miners, committees of one (q = 1), pay vesting over K = 2 rounds."""
    params = {"committee_size": 1, "vesting_rounds": 2, **kw}
    ledger = MemoryLedger(b"\x02" * 32, phase_blocks=10, validator_share_bps=0, **params)
    vals = [MemoryCoordinator(ledger, Account.from_key(k).address) for k in KEYS[:3]]
    miners = [MemoryCoordinator(ledger, Account.from_key(k).address) for k in KEYS[3:]]
    for v in vals:
        v.ensure_registered("validator", VALIDATOR_STAKE)
    for m in miners:
        m.ensure_registered("miner", MINER_STAKE)
    ledger.phase_start = ledger.block
    return ledger, vals, sorted(miners, key=lambda c: int(c.address, 16))


def _to(ledger: MemoryLedger, coord: MemoryCoordinator, phase: Phase) -> None:
    while ledger.phase != phase:
        ledger.mine(ledger.phase_blocks)
        assert coord.advance()


def _round(ledger: MemoryLedger, vals: list[MemoryCoordinator], miners: list[MemoryCoordinator]) -> int:
    """Both miners commit, every validator scores both 5000: each is paid half the emission. Returns the
    pay of one miner."""
    r = ledger.round
    for i, m in enumerate(miners):
        m.commit_update(r, bytes([r, i]) * 16)
    _to(ledger, vals[0], Phase.SCORE_COMMIT)
    for v in vals:
        v.commit_scores(r, [5_000, 5_000], SALT)
    _to(ledger, vals[0], Phase.SCORE_REVEAL)
    for v in vals:
        v.reveal_scores(r, [5_000, 5_000], SALT)
    _to(ledger, vals[0], Phase.FINALIZE)
    vals[0].finalize(r)
    s = vals[0].settlement(r)
    assert s is not None
    return s.miner_rewards[miners[0].address]


def _roles(
    ledger: MemoryLedger, vals: list[MemoryCoordinator], miner: str, round: int
) -> tuple[MemoryCoordinator, MemoryCoordinator, MemoryCoordinator]:
    """The committee member, the witness and the third validator of ``miner``'s audit in ``round``."""
    n = ledger.draw_size[round]
    d = audit_draw(ledger.seeds[round], miner, n, ledger.audit_rate_bps, ledger.committee_size)
    w = witness_draw(ledger.seeds[round], miner, n, d.committee, ledger.committee_size)
    assert d.audited and bin(d.committee).count("1") == 1 and bin(w).count("1") == 1
    by_index = {ledger.validators.index(v.address): v for v in vals}
    member = next(v for i, v in by_index.items() if d.committee >> i & 1)
    witness = next(v for i, v in by_index.items() if w >> i & 1)
    other = next(v for v in vals if v not in (member, witness))
    return member, witness, other


def _reported(**kw: int):  # type: ignore[no-untyped-def]
    """Rounds 1 and 2 paid (both unvested in round 3); miner 0 hangs on its round-2 audit and its committee
    member reports it in round 3."""
    ledger, vals, miners = _net(**kw)
    pay = _round(ledger, vals, miners)
    assert _round(ledger, vals, miners) == pay
    hanger = miners[0]
    member, witness, other = _roles(ledger, vals, hanger.address, 2)
    member.report_unanswered(hanger.address, 2)
    report = member.unanswered_report(hanger.address, 2)
    return ledger, vals, miners, pay, hanger, member, witness, other, report


def _balance(ledger: MemoryLedger) -> int:
    """What the pool paid out that a miner still holds a claim on: owed + vesting + held."""
    return sum(ledger.owed.values()) + sum(ledger.vesting.values()) + sum(ledger.hold.values())


def test_a_committee_member_opens_the_report_and_it_holds_every_unvested_round() -> None:
    ledger, vals, miners = _net()
    pay = _round(ledger, vals, miners)
    _round(ledger, vals, miners)
    hanger = miners[0]
    member, witness, other = _roles(ledger, vals, hanger.address, 2)
    for outsider in (witness, other):  # a witness votes, it does not open
        with pytest.raises(CoordinatorError, match="NotInCommittee"):
            outsider.report_unanswered(hanger.address, 2)
    with pytest.raises(NotRegisteredError):
        miners[1].report_unanswered(hanger.address, 2)
    with pytest.raises(NotRegisteredError, match="NotRole"):
        member.report_unanswered(member.address, 2)
    assert ledger.slash_proposals == {}
    assert hanger.unvested() == 2 * pay
    member.report_unanswered(hanger.address, 2)
    report = member.unanswered_report(hanger.address, 2)
    assert report.open and report.voted and not witness.unanswered_report(hanger.address, 2).voted
    assert ledger.hold[hanger.address] == 2 * pay  # round 1 too, not only the audited round 2
    assert hanger.unvested() == 0
    with pytest.raises(CoordinatorError, match="AlreadyVoted"):
        member.report_unanswered(hanger.address, 2)
    with pytest.raises(NotRegisteredError):  # the miner is no validator: it has no vote on itself
        hanger.vote_unanswered(report.evidence, False)


def test_not_audited_cannot_be_reported() -> None:
    ledger, vals, miners = _net(audit_rate_bps=0)
    _round(ledger, vals, miners)
    with pytest.raises(CoordinatorError, match="NotAudited"):
        vals[0].report_unanswered(miners[0].address, 1)


def test_confirmation_slashes_and_forfeits_pay_that_would_have_vested_during_the_window() -> None:
    ledger, vals, miners, pay, hanger, _member, witness, other, report = _reported()
    before = _balance(ledger)
    _round(ledger, vals, miners)  # round 3 settles: round 1's pay would vest now
    assert ledger.owed.get(hanger.address, 0) == 0, "round 1 held, not vested"
    with pytest.raises(CoordinatorError, match="NotInCommittee"):
        other.vote_unanswered(report.evidence, True)
    witness.vote_unanswered(report.evidence, True)  # round 4: committee + witness, 2/3 of the electorate
    assert not witness.unanswered_report(hanger.address, 2).open
    assert ledger.slashed[hanger.address] == 1
    assert ledger.stake_taken[hanger.address] == MINER_STAKE * ledger.slash_bps // 10_000 == 50
    assert ledger.stakes[hanger.address] == MINER_STAKE - 50
    assert ledger.forfeited[hanger.address] == 3 * pay  # rounds 1 and 2 held, round 3 unvested
    assert ledger.owed.get(hanger.address, 0) == 0 and hanger.unvested() == 0
    assert _balance(ledger) == before + 2 * pay - 3 * pay  # round 3 paid both miners, the hanger's forfeited
    (prop,) = ledger.proposals
    assert prop["unanswered"] and prop["executed"] and prop["stake_taken"] == 50
    assert prop["forfeited"] == 3 * pay and prop["round"] == 2 and prop["proposer"] == _member.address
    with pytest.raises(AlreadyDoneError, match="EvidenceUsed"):
        other.vote_unanswered(report.evidence, True)
    _round(ledger, vals, miners)
    assert ledger.owed.get(hanger.address, 0) == 0, "nothing of rounds 1-3 ever vests"


def test_expiry_after_the_window_releases_every_held_round() -> None:
    ledger, vals, miners, pay, hanger, member, witness, _other, report = _reported()
    witness.vote_unanswered(report.evidence, False)  # served: contested, 1/2 for, 1/2 against
    assert witness.unanswered_report(hanger.address, 2).open
    with pytest.raises(CoordinatorError, match="ReportStillOpen"):
        hanger.expire_report(report.evidence)
    _round(ledger, vals, miners)  # round 3
    _round(ledger, vals, miners)  # round 4: the last of the window
    assert ledger.round == 2 + REPORT_WINDOW_ROUNDS + 1
    with pytest.raises(CoordinatorError, match="VotingClosed"):
        member.vote_unanswered(report.evidence, True)
    owed = ledger.owed.get(hanger.address, 0)
    hanger.expire_report(report.evidence)  # anyone may
    assert ledger.owed[hanger.address] == owed + 2 * pay
    assert ledger.stakes[hanger.address] == MINER_STAKE and ledger.stakes[member.address] == VALIDATOR_STAKE
    assert ledger.hold.get(hanger.address, 0) == 0 and not ledger.slashed
    (prop,) = ledger.proposals
    assert prop["expired"] and not prop["rejected"] and prop["released"] == 2 * pay
    with pytest.raises(AlreadyDoneError, match="EvidenceUsed"):
        hanger.expire_report(report.evidence)


def test_rejection_releases_the_hold_and_slashes_the_proposer() -> None:
    ledger, vals, miners = _net()
    pay = _round(ledger, vals, miners)
    _round(ledger, vals, miners)
    hanger = miners[0]
    liar, witness, _other = _roles(ledger, vals, hanger.address, 2)
    ledger.stakes[witness.address] = 2 * VALIDATOR_STAKE  # its "served" alone is 2/3 against
    liar.report_unanswered(hanger.address, 2)
    report = liar.unanswered_report(hanger.address, 2)
    witness.vote_unanswered(report.evidence, False)
    (prop,) = ledger.proposals
    assert prop["rejected"] and not prop["executed"] and prop["released"] == 2 * pay
    assert ledger.owed[hanger.address] == 2 * pay and ledger.stakes[hanger.address] == MINER_STAKE
    assert ledger.stakes[liar.address] == VALIDATOR_STAKE // 2
    assert ledger.stake_taken == {liar.address: VALIDATOR_STAKE // 2}


def test_a_fraud_proof_holds_every_unvested_round_and_a_confirmation_forfeits_another_proposals_hold() -> (
    None
):
    ledger, vals, miners, pay, hanger, member, witness, other, report = _reported()
    _round(ledger, vals, miners)  # round 3, vesting
    other.slash(hanger.address, b"\x42" * 32, 3)
    assert ledger.slash_proposals[b"\x42" * 32].held == pay  # what the report did not hold already
    assert ledger.hold[hanger.address] == 3 * pay
    witness.slash(hanger.address, b"\x42" * 32, 3)  # 2 of 3 validators: confirmed
    assert ledger.forfeited[hanger.address] == 3 * pay
    witness.vote_unanswered(report.evidence, False)  # the report, contested, expires
    _round(ledger, vals, miners)
    _round(ledger, vals, miners)
    owed = ledger.owed.get(hanger.address, 0)
    member.expire_report(report.evidence)
    assert ledger.owed.get(hanger.address, 0) == owed, "nothing released to a proven fake"


def test_a_rejected_second_proposal_releases_nothing_while_the_report_is_open() -> None:
    ledger, vals, miners, pay, hanger, member, witness, other, report = _reported()
    _round(ledger, vals, miners)  # round 3
    other.slash(hanger.address, b"\x43" * 32, 3)
    witness.vote_slash(b"\x43" * 32, False)
    member.vote_slash(b"\x43" * 32, False)
    assert ledger.slash_proposals[b"\x43" * 32].rejected and ledger.stakes[other.address] < VALIDATOR_STAKE
    assert ledger.owed.get(hanger.address, 0) == 0 and ledger.hold[hanger.address] == 3 * pay
    witness.vote_unanswered(report.evidence, False)
    _round(ledger, vals, miners)  # round 4
    member.expire_report(report.evidence)
    assert ledger.owed[hanger.address] == 3 * pay, "the last one to close releases the whole hold"
