"""Issue 26's reverse attack closed, on anvil through the Python client: an unanswered-audit report is
decided by the committee plus witnesses drawn from the seed (``auditWitnesses``), so a lying committee of
one cannot slash an honest miner (the witness votes against, the report expires and releases the pay),
while a real withholder is still slashed by the committee and its witness; voters outside both are
refused, and the new errors and event decode to their classes."""

from __future__ import annotations

import dataclasses

import pytest
from web3 import Web3

from protocol.chain import Chain, UnansweredReport
from protocol.chain.errors import NotInCommittee, ReportStillOpen, VotingClosed
from protocol.chain.events import MinerRewarded, ReportExpired, Slashed
from protocol.rounds.anvil import Anvil
from tests.chain.chain_support import FAST, Net, make_net

RULES = dataclasses.replace(FAST, audit_rate_bps=10_000, committee_size=1, vesting_rounds=2)


@pytest.fixture(scope="module")
def witness_net(w3: Web3, anvil: Anvil) -> Net:
    return make_net(w3, anvil, n_miners=2, n_validators=3, params=RULES)


def _roles(net: Net, r: int, miner: str) -> tuple[Chain, Chain, Chain]:
    """(committee member, witness, neither) of ``miner``'s audit in ``r`` (c = 1 of 3 validators)."""
    reader = net.reader()
    committee = reader.audit_draw(r, miner).committee
    witnesses = net.validators[0].audit_witnesses(r, miner)
    assert committee & witnesses == 0 and bin(witnesses).count("1") == 1
    bit = {v.address: 1 << reader.account_info(v.address).validator_index for v in net.validators}
    member = next(v for v in net.validators if bit[v.address] & committee)
    witness = next(v for v in net.validators if bit[v.address] & witnesses)
    other = next(v for v in net.validators if v not in (member, witness))
    return member, witness, other


def _to_score_commit(net: Net, r: int) -> None:
    """Every miner commits; Commit -> Reveal -> ScoreCommit: the seed (and so the draw) is fixed."""
    for m in net.miners:
        m.commit_update(r, bytes([r]) * 32)
    for _ in range(2):
        net.mine_past_deadline()
        net.deployer.advance()


def _finish(net: Net, r: int) -> list[MinerRewarded]:
    """Every validator scores every miner 5000; the round is finalized (its MinerRewarded events)."""
    n = len(net.reader().committed_miners(r))
    for v in net.validators:
        v.commit_scores(r, [5_000] * n, b"\x05" * 32)
    net.mine_past_deadline()
    net.deployer.advance()
    for v in net.validators:
        v.reveal_scores(r, [5_000] * n, b"\x05" * 32)
    net.mine_past_deadline()
    return [e for e in net.deployer.finalize_round(r).events if isinstance(e, MinerRewarded)]


def test_lying_committee_of_one_cannot_slash_and_a_withholder_still_is(witness_net: Net) -> None:
    net, reader = witness_net, witness_net.reader()
    r = net.fresh_round()
    _to_score_commit(net, r)
    honest, withholder = sorted((m.address for m in net.miners), key=lambda a: int(a, 16))
    stake0 = reader.account_info(honest).stake
    # the liar reports the honest miner; the witness was served and votes against: contested
    liar, witness, other = _roles(net, r, honest)
    liar.report_unanswered(honest, r)
    report = witness.unanswered_report(honest, r)
    assert report == UnansweredReport(report.evidence, True, False)
    assert reader.unanswered_report(honest, r) == UnansweredReport(report.evidence, True, False)
    with pytest.raises(NotInCommittee):
        other.vote_slash(report.evidence, False)
    witness.vote_slash(report.evidence, False)
    assert witness.unanswered_report(honest, r).voted
    # the withholder's committee reports it and its witness was not served either: slashed
    member, w2, _ = _roles(net, r, withholder)
    member.report_unanswered(withholder, r)
    evidence = w2.unanswered_report(withholder, r).evidence
    slashed = [e for e in w2.vote_slash(evidence).events if isinstance(e, Slashed)]
    assert slashed and slashed[0].target == withholder
    pay = {e.miner: e.amount for e in _finish(net, r)}
    assert pay[honest] == 0 and pay[withholder] == 0  # held by the open report / kept by the confirmed one
    with pytest.raises(ReportStillOpen):
        net.deployer.expire_report(report.evidence)
    while reader.round_state().round <= r + 2:
        net.fresh_round()
    with pytest.raises(VotingClosed):
        witness.vote_slash(report.evidence, True)
    owed = reader.account_info(honest).owed
    expired = [e for e in net.deployer.expire_report(report.evidence).events if isinstance(e, ReportExpired)]
    assert expired and expired[0].target == honest and expired[0].round == r and expired[0].released > 0
    assert reader.account_info(honest).owed == owed + expired[0].released  # the pay is released
    assert reader.account_info(honest).stake == stake0  # never slashed
    assert not reader.unanswered_report(honest, r).open
