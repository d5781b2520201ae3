"""A transaction costs fewer JSON-RPC requests (issue 26 item 5): the nonce is counted locally after the
first, the fee fields are reused for a few seconds, and a missing receipt is polled every half second with
the node asked whether it still knows the transaction only after a second; a stale local nonce (another
sender with the key) fails one send and is read from the node again. Real anvil, counted by the traffic
ledger the nodes use."""

from __future__ import annotations

import pytest
from eth_account import Account
from web3 import Web3

from protocol.chain import Chain, ChainError
from protocol.node.traffic import TrafficLedger
from protocol.rounds.anvil import Anvil
from tests.chain.chain_support import Net, make_net, new_account

pytestmark = pytest.mark.chain


@pytest.fixture(scope="module")
def net1(w3: Web3, anvil: Anvil) -> Net:
    return make_net(w3, anvil, n_miners=1, n_validators=1)


def test_three_transactions_read_the_nonce_and_fees_once(net1: Net) -> None:
    ledger = TrafficLedger()
    acct = net1.miners[0].account
    chain = Chain.connect(net1.deployment, acct, traffic=ledger)
    to = new_account(net1.w3).address
    before = chain.balance_of(to)
    for _ in range(3):
        chain.transfer(to, 1)
    assert chain.balance_of(to) == before + 3
    calls = ledger.calls_json()[str(ledger.round)]
    assert calls["eth_sendRawTransaction"] == 3
    assert calls["eth_getTransactionCount"] == 1
    assert calls.get("eth_maxPriorityFeePerGas", 0) <= 1 and calls.get("eth_getBlockByNumber", 0) <= 1
    assert calls.get("eth_getTransactionByHash", 0) == 0  # anvil mines at once: the first receipt poll has it


def test_a_stale_local_nonce_fails_one_send_then_is_read_again(net1: Net) -> None:
    acct = net1.miners[0].account
    assert acct is not None
    chain = Chain.connect(net1.deployment, acct)
    to = new_account(net1.w3).address
    chain.transfer(to, 1)  # the nonce is now counted locally
    Chain.connect(net1.deployment, Account.from_key(acct.key)).transfer(to, 1)  # the same key elsewhere
    with pytest.raises(ChainError):
        chain.transfer(to, 1)  # the local count is one behind: the node refuses the nonce
    chain.transfer(to, 1)  # read from the node again
    assert chain.balance_of(to) == 3
