"""A transaction costs fewer JSON-RPC requests (issue 26 item 5): the nonce is counted locally after the
first, the fee fields are read in one batch and reused for a few seconds, a receipt is first looked for
about as long after the send as the last transaction took to be mined, the node is asked whether it still
knows the transaction only after a second and two looks, and a request carries only the headers it needs; a stale local nonce (another
sender with the key) is read from the node again and the transaction sent once more. Real anvil, counted by the traffic
ledger the nodes use."""

from __future__ import annotations

import threading
import time

import pytest
import requests
from eth_account import Account
from web3 import Web3

from protocol.chain import Chain
from protocol.chain.endpoint import RPC_HEADERS
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
    # the fee fields: one batch (the next block's base fee and the tip), not the latest block and the tip
    assert calls.get("batch", 0) <= 1 and "eth_getBlockByNumber" not in calls
    assert "eth_maxPriorityFeePerGas" not in calls
    assert calls.get("eth_getTransactionByHash", 0) == 0  # anvil mines at once: the first receipt poll has it
    assert calls["eth_getTransactionReceipt"] <= 6  # a look or two each (one at once where anvil keeps up)


def test_a_request_sends_only_the_headers_it_needs(net1: Net) -> None:
    """No ``Accept``, no ``Connection`` (HTTP/1.1 keeps the connection anyway) and a short agent: a block
    number read moves under 450 bytes both ways (it was 525 with requests' and web3's defaults), counted as
    the ledger did then; 27 more since the ledger counts the wire's Host header and blank lines (issue 26)."""
    ledger = TrafficLedger()
    chain = Chain.connect(net1.deployment, traffic=ledger)
    chain.block_number()
    assert ledger.call_bytes_json()[str(ledger.round)]["eth_blockNumber"] < 450 + 27
    sent = requests.Session().prepare_request(
        requests.Request("POST", "http://127.0.0.1/", headers=RPC_HEADERS, data=b"{}")
    )
    assert set(sent.headers) == {"Content-Type", "User-Agent", "Accept-Encoding", "Content-Length"}


def test_receipts_on_a_chain_of_slow_blocks_are_looked_for_about_once(net1: Net) -> None:
    """On a chain that mines a block a second, the first look for a receipt waits about as long as the
    last transaction took (it looked at once, then after 0.5 and 1.5 s: two or three looks a
    transaction), and the node is not asked whether it still knows a transaction mined within a block."""
    acct = net1.miners[0].account
    ledger = TrafficLedger()
    chain = Chain.connect(net1.deployment, acct, traffic=ledger)
    to = new_account(net1.w3).address
    provider = net1.w3.provider
    provider.make_request("evm_setAutomine", [False])  # type: ignore[arg-type]
    provider.make_request("evm_setIntervalMining", [1])  # type: ignore[arg-type]
    try:
        for _ in range(6):
            chain.transfer(to, 1)
    finally:
        provider.make_request("evm_setIntervalMining", [0])  # type: ignore[arg-type]
        provider.make_request("evm_setAutomine", [True])  # type: ignore[arg-type]
    assert chain.balance_of(to) == 6
    calls = ledger.calls_json()[str(ledger.round)]
    assert calls["eth_getTransactionReceipt"] <= 10  # at least 12 with a look at once (every block a second)
    assert calls.get("eth_getTransactionByHash", 0) == 0


def test_a_stale_local_nonce_is_read_again_and_the_transaction_sent(net1: Net) -> None:
    """An operator's CLI beside a running node signs with the same key: the node's next transaction finds
    its counted nonce taken ("nonce too low"), reads the node's count and sends once more, instead of
    failing (CI saw the CLI's claim refused this way)."""
    acct = net1.miners[0].account
    assert acct is not None
    ledger = TrafficLedger()
    chain = Chain.connect(net1.deployment, acct, traffic=ledger)
    to = new_account(net1.w3).address
    chain.transfer(to, 1)  # the nonce is now counted locally
    Chain.connect(net1.deployment, Account.from_key(acct.key)).transfer(to, 1)  # the same key elsewhere
    chain.transfer(to, 1)  # the local count is one behind: refused once, read from the node, sent
    assert chain.balance_of(to) == 3
    calls = ledger.calls_json()[str(ledger.round)]
    assert calls["eth_sendRawTransaction"] == 3 and calls["eth_getTransactionCount"] == 2


def test_a_nonce_pending_from_another_sender_is_skipped(net1: Net) -> None:
    """The other sender's transaction is still pending (not mined) when this client sends with the same
    nonce: the node answers "replacement transaction underpriced"; the client takes the next nonce."""
    acct = net1.miners[0].account
    assert acct is not None
    w3 = net1.w3
    chain = Chain.connect(net1.deployment, acct)
    to = new_account(w3).address
    chain.transfer(to, 1)
    nonce = w3.eth.get_transaction_count(acct.address, "pending")
    base = int(w3.eth.get_block("latest")["baseFeePerGas"])
    w3.provider.make_request("evm_setAutomine", [False])  # type: ignore[arg-type]
    try:
        other = Account.from_key(acct.key).sign_transaction(
            {
                "to": to,
                "value": 1,
                "gas": 21_000,
                "nonce": nonce,
                "chainId": w3.eth.chain_id,
                "maxFeePerGas": 100 * base + 10**10,  # above this client's fees: no replacement
                "maxPriorityFeePerGas": 10**10,
            }
        )
        w3.eth.send_raw_transaction(other.raw_transaction)
        done: list[object] = []
        sender = threading.Thread(target=lambda: done.append(chain.transfer(to, 1)), daemon=True)
        sender.start()
        time.sleep(2.0)  # the client sends nonce `nonce`, is refused, and sends `nonce + 1`
        w3.provider.make_request("evm_mine", [])  # type: ignore[arg-type]
        sender.join(timeout=30)
    finally:
        w3.provider.make_request("evm_setAutomine", [True])  # type: ignore[arg-type]
    assert done, "the transfer did not complete"
    assert chain.balance_of(to) == 2
    assert w3.eth.get_transaction_count(acct.address) == nonce + 2
