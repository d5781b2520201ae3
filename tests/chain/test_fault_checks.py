"""The fault scenarios' money checks (``tessera.devnet.faults.checks``) settle a round as the contract does
since issue 26: an audited miner on its committee's median only, a miner's pay frozen by a slash proposal,
and a cheat slashed for its unanswered audit is no failure of ``nobody_slashed``. drip-sybils failed both
checks on a round the chain had settled correctly (seed 101: the sybils' committee scored them 0, and each
was reported for an unanswered audit and slashed). Real anvil, the devnet's default audit parameters."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import cast

import pytest
from web3 import Web3

from protocol.rounds.anvil import Anvil
from tessera.devnet.faults.checks import nobody_slashed, payouts_match_consensus, read_payouts
from tessera.devnet.network import Devnet
from tests.chain.chain_support import FAST, Net, make_net

pytestmark = pytest.mark.chain

AUDITED = dataclasses.replace(FAST, audit_rate_bps=10_000, committee_size=1, vesting_rounds=2)


@pytest.fixture(scope="module")
def audited_net(w3: Web3, anvil: Anvil) -> Net:
    return make_net(w3, anvil, n_miners=3, n_validators=3, params=AUDITED)


def _devnet(net: Net) -> Devnet:
    """What the checks read of a devnet: its chain and its nodes' names, addresses and roles."""
    nodes = {f"miner{i}": SimpleNamespace(address=c.address, role="miner") for i, c in enumerate(net.miners)}
    nodes |= {
        f"validator{i}": SimpleNamespace(address=c.address, role="validator")
        for i, c in enumerate(net.validators)
    }
    return cast(Devnet, SimpleNamespace(chain=net.reader(), nodes=nodes))


def _play_round(net: Net, score: dict[str, list[int]], unanswered: str) -> int:
    """A round: every miner commits, ``unanswered``'s committee member reports its audit unanswered and its
    witness (drawn from the seed, issue 26's reverse attack) confirms it, the validators commit and reveal
    ``score``, it is finalized."""
    r = net.fresh_round()
    for m in net.miners:
        m.commit_update(r, bytes([r]) * 32)
    for _ in range(2):  # Commit -> Reveal -> ScoreCommit: the seed is fixed
        net.mine_past_deadline()
        net.deployer.advance()
    reader = net.reader()
    member = reader.round_draws(r, [unanswered])[0].members(reader.validators())[0]
    next(v for v in net.validators if v.address == member).report_unanswered(unanswered, r)
    bits = net.validators[0].audit_witnesses(r, unanswered)
    witness = next(v for v in net.validators if bits >> reader.account_info(v.address).validator_index & 1)
    witness.vote_slash(witness.unanswered_report(unanswered, r).evidence)
    for v in net.validators:
        v.commit_scores(r, score[v.address], b"\x05" * 32)
    net.mine_past_deadline()
    net.deployer.advance()
    for v in net.validators:
        v.reveal_scores(r, score[v.address], b"\x05" * 32)
    net.mine_past_deadline()
    net.deployer.finalize_round(r)
    return r


def test_committee_medians_frozen_pay_and_a_slashed_cheat_pass(audited_net: Net) -> None:
    net = audited_net
    reader = net.reader()
    miners = sorted((m.address for m in net.miners), key=lambda a: int(a, 16))
    cheat = miners[0]
    # validators disagree per miner, so the committee's median differs from everyone's
    validators = reader.validators()
    score = {v: [9_000 - 1_000 * i, 5_000 + 1_000 * i, 7_000] for i, v in enumerate(validators)}
    _play_round(net, score, cheat)
    dev = _devnet(net)
    paid = read_payouts(dev)
    check = payouts_match_consensus(dev, paid)
    assert check["ok"], check["detail"]
    name = next(n for n, x in dev.nodes.items() if x.address == cheat)
    assert [c for rr, a, c, amt in paid.miner_paid if a == cheat.lower() and amt] == []  # frozen, then kept
    assert nobody_slashed(dev, paid, [name])["ok"]
    refused = nobody_slashed(dev, paid)
    assert not refused["ok"] and refused["detail"].startswith(name)
