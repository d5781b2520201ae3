"""A chain that goes back forgets a node's last transaction while the node's counted nonce has moved past
it (anvil restarted from a dump two blocks old, in the kill-chain fault): the next transaction must still
be mined, not wait in the node's queue for a nonce nobody sends (it sat 120 s on its receipt)."""

from __future__ import annotations

import time

import pytest
from web3 import Web3

from protocol.chain.nonces import SentTransactions
from protocol.rounds.anvil import Anvil
from tests.chain.chain_support import FAST, Net, make_net

pytestmark = pytest.mark.chain


@pytest.fixture(scope="module")
def net1(w3: Web3, anvil: Anvil) -> Net:
    return make_net(w3, anvil, n_miners=1, n_validators=1, params=FAST)


def test_a_transaction_behind_a_nonce_the_chain_lost_is_mined(net1: Net) -> None:
    client = net1.miners[0]
    client.forget_nonce()
    assert client.account is not None
    address = client.account.address
    snapshot = net1.w3.provider.make_request("evm_snapshot", [])["result"]  # type: ignore[arg-type]
    client.approve(1)  # nonce n, mined; the count kept by the client moves to n + 1
    n = net1.w3.eth.get_transaction_count(address) - 1
    net1.w3.provider.make_request("evm_revert", [snapshot])  # type: ignore[arg-type]
    assert net1.w3.eth.get_transaction_count(address) == n  # the chain lost nonce n
    t0 = time.monotonic()
    res = client.approve(2)  # signed with n + 1
    assert time.monotonic() - t0 < 30  # not the receipt's 120-s timeout
    assert res.block_number > 0
    assert net1.w3.eth.get_transaction_count(address) == n + 2  # n was refilled with an empty transaction
    assert net1.w3.eth.get_transaction(res.tx_hash)["nonce"] == n + 1


def test_only_nonces_sent_here_and_gone_are_refilled() -> None:
    sent = SentTransactions()
    sent.remember(5, b"\x05" * 32)
    sent.remember(6, b"\x06" * 32)
    assert sent.lost_below(7, 5, known=lambda h: False) == [5, 6]
    assert sent.lost_below(7, 5, known=lambda h: h == b"\x06" * 32) == []  # 6 still pending: no gap
    assert sent.lost_below(7, 4, known=lambda h: False) == []  # 4 was another sender's
    assert sent.lost_below(5, 5, known=lambda h: False) == []
    for i in range(100):
        sent.remember(100 + i, bytes([i]) * 32)
    assert sent.lost_below(110, 100, known=lambda h: False) == []  # the oldest are forgotten
