"""Issue 26's settlement rules on anvil, through the Python client: the audit draw recomputed in Python
equals the contract's view, an audited miner is settled on its committee only (``finalize_round``
computes the committee medians the contract checks), a fraud proof freezes the pay whatever the median,
pay vests after K rounds, and the new events and errors decode to their classes."""

from __future__ import annotations

import dataclasses

import pytest
from web3 import Web3

from protocol.chain.errors import NotInCommittee, RoundNotReached
from protocol.chain.events import MinerRewarded, PayFrozen, Slashed
from protocol.rounds.anvil import Anvil
from protocol.rounds.audits import audit_draw
from tests.chain.chain_support import FAST, Net, make_net

RULES = dataclasses.replace(FAST, audit_rate_bps=10_000, committee_size=1, vesting_rounds=2)


@pytest.fixture(scope="module")
def rules_net(w3: Web3, anvil: Anvil) -> Net:
    return make_net(w3, anvil, n_miners=2, n_validators=3, params=RULES)


def _to_score_commit(net: Net, r: int) -> None:
    reader = net.reader()
    for m in net.miners:
        if reader.account_info(m.address).stake >= RULES.min_miner_stake:  # a slashed one cannot commit
            m.commit_update(r, bytes([r]) * 32)
    for _ in range(2):  # Commit -> Reveal -> ScoreCommit: the seed is fixed
        net.mine_past_deadline()
        net.deployer.advance()


def _score_and_finalize(net: Net, r: int, score: dict[str, list[int]]) -> list[MinerRewarded]:
    for v in net.validators:
        v.commit_scores(r, score[v.address], b"\x05" * 32)
    net.mine_past_deadline()
    net.deployer.advance()
    for v in net.validators:
        v.reveal_scores(r, score[v.address], b"\x05" * 32)
    net.mine_past_deadline()
    res = net.deployer.finalize_round(r)
    return [e for e in res.events if isinstance(e, MinerRewarded)]


def test_committee_median_fraud_freeze_and_vesting(rules_net: Net) -> None:
    net, reader = rules_net, rules_net.reader()
    r = net.fresh_round()  # a Commit phase that opens now
    _to_score_commit(net, r)
    miners = [m.address for m in sorted(net.miners, key=lambda c: int(c.address, 16))]
    validators = reader.validators()
    # the Python draw is the contract's view, miner by miner
    draws = reader.round_draws(r, miners)
    for m, d in zip(miners, draws, strict=True):
        assert reader.audit_draw(r, m) == d
        assert d == audit_draw(reader.seed(r), m, len(validators), 10_000, 1)
        assert d.audited and bin(d.committee).count("1") == 1
    # miner 0's committee member scores it 0, the two others 9000: settled on its committee's 0
    member0 = draws[0].members(validators)[0]
    score = {v: [0 if v == member0 else 9_000, 5_000] for v in validators}
    # an outsider cannot report miner 0's audit unanswered
    outsider = next(v for v in net.validators if v.address != member0)
    with pytest.raises(NotInCommittee):
        outsider.report_unanswered(miners[0], r)
    # a validator proves miner 1 faked: its pay is frozen whatever the median says
    prover = net.validators[0]
    res = prover.propose_slash(miners[1], r, b"\x42" * 32)
    assert any(isinstance(e, PayFrozen) and e.round == r for e in res.events)
    with pytest.raises(RoundNotReached):
        prover.propose_slash(miners[1], r + 1, b"\x43" * 32)
    rewards = {e.miner: e for e in _score_and_finalize(net, r, score)}
    assert rewards[miners[0]].consensus == 0 and rewards[miners[0]].amount == 0
    assert rewards[miners[1]].consensus == 5_000 and rewards[miners[1]].amount == 0  # frozen
    assert reader.account_info(miners[1]).owed == 0
    # two more validators confirm: slashed, and the held pay goes back to the pool
    pool = reader.pool()
    slashed = []
    for v in net.validators[1:]:
        if reader.slash_proposal(b"\x42" * 32)[2]:
            break
        slashed += [e for e in v.vote_slash(b"\x42" * 32).events if isinstance(e, Slashed)]
    assert slashed and slashed[0].amount == RULES.min_miner_stake * RULES.slash_bps // 10_000
    assert reader.pool() > pool


def test_pay_vests_after_k_rounds(rules_net: Net) -> None:
    net, reader = rules_net, rules_net.reader()
    r = net.fresh_round()  # a Commit phase that opens now
    _to_score_commit(net, r)
    n = len(reader.committed_miners(r))
    rewards = _score_and_finalize(net, r, {v: [5_000] * n for v in reader.validators()})
    paid = {e.miner: e.amount for e in rewards}
    honest = next(m for m in net.miners if paid.get(m.address, 0) > 0)
    assert reader.account_info(honest.address).owed == 0  # nothing owed at once
    assert reader.unvested_of(honest.address) == paid[honest.address]
    net.fresh_round()  # r + 1
    net.fresh_round()  # r + 2 = r + K finalized: round r's pay has vested
    before = reader.balance_of(honest.address)
    honest.claim()  # the claim sweeps what vested
    assert reader.balance_of(honest.address) == before + paid[honest.address]
    assert reader.unvested_of(honest.address) == 0
