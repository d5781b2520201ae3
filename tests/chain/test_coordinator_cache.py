"""The round view caches what the chain never changes once written (issue 26 item 5: reads that survive a
reorg): a certified checkpoint, a closed commit phase's commitments, a round's registry, a seed share
committed and revealed; asked again, they cost no request. A chain that goes back (anvil reverted to a
snapshot, as a restarted chain or a reorg does) is seen at the next round reading and the caches are
dropped, so a commitment the chain lost is not reported as still there."""

from __future__ import annotations

from dataclasses import replace

import pytest
from web3 import Web3

from protocol.chain import Chain
from protocol.chain.coordinator import ChainCoordinator
from protocol.node.traffic import TrafficLedger
from protocol.rounds.anvil import Anvil
from tests.chain.chain_support import FAST, Net, make_net

GENESIS = "0x" + "ab" * 32

pytestmark = pytest.mark.chain


@pytest.fixture(scope="module")
def net1(w3: Web3, anvil: Anvil) -> Net:
    return make_net(w3, anvil, n_miners=1, n_validators=1, params=replace(FAST, genesis_checkpoint=GENESIS))


def _coord(net: Net, chain: Chain) -> tuple[ChainCoordinator, TrafficLedger]:
    ledger = TrafficLedger()
    assert chain.account is not None
    counted = Chain.connect(net.deployment, chain.account, traffic=ledger)
    return ChainCoordinator(counted, "0x" + bytes(chain.account.key).hex()), ledger


def _requests(ledger: TrafficLedger) -> int:
    return sum(sum(row.values()) for row in ledger.calls_json().values())


def test_final_reads_are_asked_once(net1: Net) -> None:
    r = net1.fresh_round()
    miner, validator = net1.miners[0], net1.validators[0]
    coord, ledger = _coord(net1, validator)
    miner.commit_update(r, b"\x71" * 32)
    validator.commit_seed(r, b"\x05" * 32)
    net1.mine_past_deadline()
    validator.advance()
    validator.reveal_seed(r, b"\x05" * 32)
    coord.current()  # this node has seen the round past its commit phase
    first = (coord.checkpoint(1), coord.update_commitments(r), coord.miners(r), coord.seed_share_status(r))
    before = _requests(ledger)
    again = (coord.checkpoint(1), coord.update_commitments(r), coord.miners(r), coord.seed_share_status(r))
    assert again == first and _requests(ledger) == before
    assert (
        first[0] == bytes.fromhex(GENESIS[2:])
        and first[2] == [miner.address]
        and first[3] == (True, True)
        and miner.address in first[1]
    )


def test_a_chain_that_goes_back_drops_the_cache(net1: Net) -> None:
    r = net1.fresh_round()
    miner = net1.miners[0]
    coord, _ledger = _coord(net1, miner)
    snapshot = net1.w3.provider.make_request("evm_snapshot", [])["result"]  # type: ignore[arg-type]
    miner.commit_update(r, b"\x72" * 32)
    net1.mine_past_deadline()
    net1.deployer.advance()
    coord.current()
    assert miner.address in coord.update_commitments(r)  # cached: the commit phase is closed
    net1.w3.provider.make_request("evm_revert", [snapshot])  # type: ignore[arg-type]
    st = coord.current()  # the chain is behind what this node saw
    assert st.round == r and int(st.phase) == 0
    assert coord.update_commitments(r) == {}  # read again: the commitment is gone


def test_a_committed_seed_share_is_not_asked_about_again_in_the_commit_phase(net1: Net) -> None:
    """No reveal can land before the reveal phase: a share seen committed costs no request until then
    (it was a log query at every step of the commit phase); from the reveal phase on the reveal is read."""
    for client in (net1.deployer, *net1.validators, *net1.miners):
        client.forget_nonce()  # a test before may have sent the chain back past their counted nonces
    r = net1.fresh_round()
    validator = net1.validators[0]
    coord, ledger = _coord(net1, validator)
    assert int(coord.current().phase) == 0 and coord.seed_share_status(r) == (False, False)
    validator.commit_seed(r, b"\x06" * 32)
    assert coord.seed_share_status(r) == (True, False)
    before = _requests(ledger)
    assert coord.seed_share_status(r) == (True, False) and _requests(ledger) == before
    net1.mine_past_deadline()
    validator.advance()
    coord.current()
    assert coord.seed_share_status(r) == (True, False) and _requests(ledger) > before + 1  # asked again
    validator.reveal_seed(r, b"\x06" * 32)
    assert coord.seed_share_status(r) == (True, True)
