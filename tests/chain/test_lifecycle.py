"""The whole round life cycle against a real anvil: register, commit, seed, score, finalize, claim, slash,
certify, with the adversarial cases (copied commitment, wrong salt, late reveal, non-revealing validator)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from web3 import Web3

from protocol.chain import (
    AlreadyCommitted,
    ContractRevert,
    EvidenceUsed,
    MinerRewarded,
    PhaseClosed,
    QuorumNotReached,
    RevealMismatch,
    Role,
    RoundFinalized,
    UpdateCommitted,
    WrongPhase,
    WrongRound,
)
from protocol.rounds import consensus
from protocol.rounds.anvil import Anvil
from protocol.rounds.phases import Phase
from tests.chain.chain_support import Net, make_net, mine

pytestmark = pytest.mark.chain


def test_registration_and_views(net: Net) -> None:
    r = net.reader()
    p = net.deployment.params
    assert r.round_state().round == 1
    assert r.round_state().phase is Phase.COMMIT
    for m in net.miners:
        info = r.account_info(m.address)
        assert info.role is Role.MINER and info.stake == p.min_miner_stake
    assert r.validators() == [v.address for v in net.validators]
    assert r.total_validator_stake() == 3 * p.min_validator_stake
    assert r.pool() == p.pool_supply
    # local commitment equals the contract's
    d = b"\x11" * 32
    assert r.commitment_for(1, net.miners[0].address, d) == bytes(
        r.network.functions.commitmentFor(1, net.miners[0].address, d).call()
    )


def test_full_round(net: Net) -> None:
    r = net.reader()
    m0, m1, m2 = net.miners
    v0, v1, v2 = net.validators
    digest = b"\x42" * 32
    R = net.fresh_round()

    # --- commit phase: updates and seed shares
    res = m0.commit_update(R, digest)
    ev = [e for e in res.events if isinstance(e, UpdateCommitted)]
    assert ev and ev[0].commitment == r.commitment_for(R, m0.address, digest)
    with pytest.raises(AlreadyCommitted) as exc:
        m0.commit_update(R, digest)
    assert exc.value.args_dict == {"miner": m0.address, "round": R}
    assert "commitUpdate reverted with AlreadyCommitted" in str(exc.value)
    # m1 copies m0's commitment: accepted on chain, but it binds m0's address -> worthless to m1
    m1.commit_raw(R, ev[0].commitment)
    assert r.commitment_for(R, m1.address, digest) != ev[0].commitment
    m2.commit_update(R, b"\x43" * 32)
    secrets = [bytes([9, i]) * 16 for i in range(3)]
    for v, s in zip(net.validators, secrets, strict=True):
        v.commit_seed(R, s)
    assert r.seed(R) == b"\x00" * 32

    # --- reveal phase
    net.mine_past_deadline()
    v0.advance()
    for v, s in zip(net.validators, secrets, strict=True):
        v.reveal_seed(R, s)
    net.mine_past_deadline()
    v0.advance()
    seed = r.seed(R)
    assert seed != b"\x00" * 32
    assert r.round_state().phase is Phase.SCORE_COMMIT

    # --- scores: validators see the commitments and score; m1's copied commitment fails verification
    committed = [e.miner for e in r.committed_miners(R)]
    assert committed == sorted(committed, key=lambda a: int(a, 16))

    def score(v_i: int) -> list[int]:
        return [0 if m == m1.address else 6000 + 100 * v_i for m in committed]

    salts = [bytes([7, i]) * 16 for i in range(3)]
    for i, v in enumerate(net.validators):
        v.commit_scores(R, score(i), salts[i])
    net.mine_past_deadline()
    v0.advance()
    # a reveal with a wrong salt is a typed revert
    with pytest.raises(RevealMismatch) as bad:
        v0.reveal_scores(R, score(0), b"\x00" * 32)
    assert bad.value.args_dict["validator"] == v0.address
    v0.reveal_scores(R, score(0), salts[0])
    v1.reveal_scores(R, score(1), salts[1])
    # v2 does not reveal in time: a late reveal is refused with the deadline in the error
    net.mine_past_deadline()
    with pytest.raises(PhaseClosed) as late:
        v2.reveal_scores(R, score(2), salts[2])
    assert late.value.args_dict["phase"] is Phase.SCORE_REVEAL

    # --- finalize (anyone); never twice
    res = m2.finalize_round(R)
    fin = [e for e in res.events if isinstance(e, RoundFinalized)][0]
    rewards = {e.miner: e for e in res.events if isinstance(e, MinerRewarded)}
    assert rewards[m1.address].amount == 0  # the copier earns nothing
    p = net.deployment.params
    revealers = sorted([(v0.address, 0), (v1.address, 1)], key=lambda t: int(t[0], 16))
    weights = [p.min_validator_stake] * 2
    st = consensus.settle(
        [score(i) for _, i in revealers], weights, p.emission_per_round, p.validator_share_bps
    )
    assert [rewards[m].amount for m in committed] == st.miner_pay
    assert fin.miners_paid == sum(st.miner_pay) and fin.validators_paid == sum(st.validator_pay)
    assert r.account_info(v2.address).owed == 0  # non-revealer loses its share
    for (addr, _), pay in zip(revealers, st.validator_pay, strict=True):
        assert r.account_info(addr).owed == pay  # to the wei
    with pytest.raises(WrongRound):
        m2.finalize_round(R)
    assert r.round_state().round == R + 1

    # --- claim (pull) and commitAndClaim
    owed = r.account_info(m0.address).owed
    before = r.balance_of(m0.address)
    m0.claim()
    assert r.balance_of(m0.address) == before + owed
    with pytest.raises(ContractRevert) as none:
        m0.claim()
    assert none.value.name == "NothingToWithdraw"
    owed2 = r.account_info(m2.address).owed
    before2 = r.balance_of(m2.address)
    m2.commit_and_claim(R + 1, digest)
    assert r.balance_of(m2.address) == before2 + owed2

    # --- BLS checkpoint certificate for round 1 (2 of 3 validators = 2/3 of stake)
    new_digest = b"\x77" * 32
    sigs = {
        v.address: v.sign_checkpoint_bls(k, R, new_digest)
        for v, k in zip(net.validators[:2], net.bls_keys[:2], strict=True)
    }
    with pytest.raises(QuorumNotReached):
        v0.certify_checkpoint(R, new_digest, {v0.address: sigs[v0.address]})
    res = v0.certify_checkpoint(R, new_digest, sigs)
    assert r.checkpoint(R + 1) == new_digest
    assert res.gas_used < 400_000


def test_slash_quorum(net: Net) -> None:
    r = net.reader()
    target = net.miners[1]
    p = net.deployment.params
    total_before = r.account_info(target.address).stake + r.unbonding(target.address).amount
    other_before = r.account_info(net.miners[0].address).stake
    evidence = b"\xee" * 32
    net.validators[0].propose_slash(target.address, r.round_state().round, evidence)
    assert r.slash_proposal(evidence)[2] is False
    net.validators[1].vote_slash(evidence)
    assert r.slash_proposal(evidence)[2] is True
    after = r.account_info(target.address).stake + r.unbonding(target.address).amount
    assert after == total_before - total_before * p.slash_bps // 10_000
    assert r.account_info(net.miners[0].address).stake == other_before
    with pytest.raises(EvidenceUsed):
        net.validators[2].propose_slash(net.miners[0].address, r.round_state().round, evidence)


def test_slash_proposals_in_the_same_block_all_count(net: Net) -> None:
    """Two validators that saw the same cheat propose in one block: both count, the slash executes.

    Before the fix the second transaction reverted ``EvidenceUsed`` and the proposal stayed at 1/3 of the
    stake (issue 10: 6 proposals, 2 slashes).
    """
    r = net.reader()
    target = net.miners[2]
    before = r.account_info(target.address).stake + r.unbonding(target.address).amount
    evidence = b"\xab" * 32
    w3 = net.w3
    start = w3.eth.block_number
    w3.provider.make_request("evm_setAutomine", [False])  # type: ignore[arg-type]
    try:
        with ThreadPoolExecutor(2) as pool:
            at = r.round_state().round
            futures = [pool.submit(v.propose_slash, target.address, at, evidence) for v in net.validators[:2]]
            deadline = time.monotonic() + 30
            while w3.provider.make_request("txpool_status", [])["result"]["pending"] != "0x2":  # type: ignore[arg-type]
                assert time.monotonic() < deadline, "both proposals should reach the pool"
                time.sleep(0.05)
            mine(w3, 1)
            results = [f.result(timeout=60) for f in futures]
    finally:
        w3.provider.make_request("evm_setAutomine", [True])  # type: ignore[arg-type]
    assert {res.block_number for res in results} == {start + 1}, "one block"
    assert r.slash_proposal(evidence)[2] is True
    after = r.account_info(target.address).stake + r.unbonding(target.address).amount
    assert after == before - before * net.deployment.params.slash_bps // 10_000


def test_typed_reverts_and_empty_round(w3: Web3, anvil: Anvil) -> None:
    n = make_net(w3, anvil, n_miners=1, n_validators=1)
    m = n.miners[0]
    R = n.fresh_round()
    with pytest.raises(WrongRound) as wr:
        m.commit_update(R + 5, b"\x01" * 32)
    assert wr.value.args_dict == {"expected": R, "current": R + 5}
    with pytest.raises(ContractRevert) as nr:
        n.validators[0].commit_update(R, b"\x01" * 32)
    assert nr.value.name == "NotRole"
    with pytest.raises(ContractRevert) as early:
        m.advance()
    assert early.value.name == "PhaseNotOver"
    for _ in range(4):
        n.mine_past_deadline()
        m.advance()
    assert n.reader().round_state().phase is Phase.FINALIZE
    with pytest.raises(WrongPhase):
        m.advance()
    pool = n.reader().pool()
    m.finalize_round(R)  # nobody committed or revealed: still finalizable, nothing paid
    assert n.reader().pool() == pool
    assert n.reader().round_state().round == R + 1
    mine(w3, 1)
