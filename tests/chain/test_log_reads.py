"""An event query reads from a little below the newest block seen at its last run, not from the deployment
block (issue 26 item 5): a repeated query moves what is new, whatever the chain held before; a reorg within
the overlap it re-reads is caught, and a chain seen going back is read from the deployment again. Real
anvil; each answer is checked against the chain, the bytes counted by the nodes' traffic ledger."""

from __future__ import annotations

import pytest
from web3 import Web3

from protocol.chain import Chain
from protocol.chain.reads import LOG_OVERLAP_BLOCKS
from protocol.node.traffic import TrafficLedger
from protocol.rounds.anvil import Anvil
from tests.chain.chain_support import Net, make_net, mine

pytestmark = pytest.mark.chain

LABEL = "eth_getLogs:UpdateCommitted"


@pytest.fixture(scope="module")
def net1(w3: Web3, anvil: Anvil) -> Net:
    return make_net(w3, anvil, n_miners=1, n_validators=1)


def _reader(net: Net) -> tuple[Chain, TrafficLedger]:
    ledger = TrafficLedger()
    return Chain.connect(net.deployment, traffic=ledger), ledger


def _query_bytes(ledger: TrafficLedger, chain: Chain, round: int) -> tuple[list[str], int]:
    """The round's committed miners and the bytes that read moved."""
    before = ledger.call_bytes_json().get(str(ledger.round), {}).get(LABEL, 0)
    miners = [e.miner for e in chain.committed_miners(round)]
    return miners, ledger.call_bytes_json()[str(ledger.round)][LABEL] - before


def _revert(net: Net, snapshot: str) -> None:
    net.w3.provider.make_request("evm_revert", [snapshot])  # type: ignore[arg-type]
    net.miners[0].forget_nonce()  # its counted nonce is past the chain's now


def test_a_repeated_query_moves_only_what_is_new(net1: Net) -> None:
    r = net1.fresh_round()
    net1.miners[0].commit_update(r, b"\x61" * 32)
    chain, ledger = _reader(net1)
    chain.block_number()
    miners, first = _query_bytes(ledger, chain, r)
    assert miners == [net1.miners[0].address]
    mine(net1.w3, 3 * LOG_OVERLAP_BLOCKS)  # the commitment is now far below the overlap
    chain.block_number()
    assert _query_bytes(ledger, chain, r)[0] == miners  # read from the last run's block: the overlap
    mine(net1.w3, 3 * LOG_OVERLAP_BLOCKS)
    chain.block_number()
    again, later = _query_bytes(ledger, chain, r)
    assert again == miners  # kept from the earlier reads
    assert later < first - 300  # the log itself (about 600 bytes) did not travel again
    # a second reader from the deployment block agrees
    assert [e.miner for e in Chain.connect(net1.deployment).committed_miners(r)] == miners


def test_a_reorg_within_the_overlap_is_read_again(net1: Net) -> None:
    """The chain loses the block of a commitment and grows past it before this client reads a block number
    (so it never sees the chain go back): the overlap still re-reads that block."""
    r = net1.fresh_round()
    chain, _ledger = _reader(net1)
    chain.block_number()
    assert chain.committed_miners(r) == []
    snapshot = net1.w3.provider.make_request("evm_snapshot", [])["result"]  # type: ignore[arg-type]
    net1.miners[0].commit_update(r, b"\x62" * 32)
    chain.block_number()
    assert [e.miner for e in chain.committed_miners(r)] == [net1.miners[0].address]
    _revert(net1, snapshot)
    mine(net1.w3, 3)  # higher than the block this client saw: no going back visible
    chain.block_number()
    assert chain.committed_miners(r) == []


def test_a_chain_seen_going_back_is_read_from_the_deployment(net1: Net) -> None:
    r = net1.fresh_round()
    chain, _ledger = _reader(net1)
    snapshot = net1.w3.provider.make_request("evm_snapshot", [])["result"]  # type: ignore[arg-type]
    net1.miners[0].commit_update(r, b"\x63" * 32)
    mine(net1.w3, 3 * LOG_OVERLAP_BLOCKS)
    chain.block_number()
    assert [e.miner for e in chain.committed_miners(r)] == [net1.miners[0].address]
    _revert(net1, snapshot)
    chain.block_number()  # lower than the block seen: the kept logs are dropped
    mine(net1.w3, 4 * LOG_OVERLAP_BLOCKS)  # and the chain grows past where it was
    chain.block_number()
    assert chain.committed_miners(r) == []
