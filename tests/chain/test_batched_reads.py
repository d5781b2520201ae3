"""Reads that go together are one JSON-RPC batch (issue 26 item 5: fixed traffic): an account's four figures
at one block, the validator list, a round's audit draw inputs; and the checkpoint message is computed, not
asked. Each answer equals the one-read-at-a-time answer, at fewer requests."""

from __future__ import annotations

import pytest
from web3 import Web3

from protocol.chain import Chain
from protocol.chain.coordinator import ChainCoordinator
from protocol.node.account import read_account
from protocol.node.traffic import TrafficLedger
from protocol.rounds.anvil import Anvil
from protocol.rounds.phases import Phase
from tests.chain.chain_support import Net, make_net, mine

pytestmark = pytest.mark.chain


@pytest.fixture(scope="module")
def net2(w3: Web3, anvil: Anvil) -> Net:
    return make_net(w3, anvil, n_miners=1, n_validators=2)


def _counted(net: Net, chain: Chain) -> tuple[Chain, TrafficLedger]:
    ledger = TrafficLedger()
    assert chain.account is not None
    return Chain.connect(net.deployment, chain.account, traffic=ledger), ledger


def _calls(ledger: TrafficLedger, table: str = "calls") -> dict[str, int]:
    out: dict[str, int] = {}
    rows = ledger.calls_json() if table == "calls" else ledger.call_bytes_json()
    for row in rows.values():
        for label, n in row.items():
            out[label] = out.get(label, 0) + n
    return out


def _since(ledger: TrafficLedger, before: dict[str, int]) -> dict[str, int]:
    """The requests counted after ``before`` (what connecting asked is left out)."""
    now = _calls(ledger)
    return {k: n - before.get(k, 0) for k, n in now.items() if n != before.get(k, 0)}


def test_an_account_is_read_in_one_batch_at_one_block(net2: Net) -> None:
    miner = net2.miners[0]
    chain, ledger = _counted(net2, miner)
    before = _calls(ledger)
    got = read_account(chain, miner.address)
    assert _since(ledger, before) == {"eth_blockNumber": 1, "batch": 1}  # was 2 block reads and 4 calls
    info = miner.account_info(miner.address)
    assert got["stake_wei"] == info.stake and got["role"] == "miner"
    assert got["balance_wei"] == miner.balance_of(miner.address)
    assert got["unvested_wei"] == miner.unvested_of(miner.address)
    k = miner.params().vesting_rounds
    assert f"round r + {k}" in got["vesting"] or k == 0  # when that pay vests, in the words /status shows
    assert got["unbonding_wei"] == miner.unbonding(miner.address).amount
    assert _calls(ledger, "bytes")["batch"] > 0  # the ledger counts each label's bytes as well


def test_the_validator_list_is_two_requests_whatever_its_length(net2: Net) -> None:
    chain, ledger = _counted(net2, net2.validators[0])
    before = _calls(ledger)
    assert chain.validators() == [v.address for v in net2.validators]
    assert _since(ledger, before) == {"eth_call:validatorCount": 1, "batch": 1}


def test_the_checkpoint_message_is_the_contracts_without_a_request(net2: Net) -> None:
    v = net2.validators[0]
    chain, ledger = _counted(net2, v)
    assert chain.account is not None
    coord = ChainCoordinator(chain, "0x" + bytes(chain.account.key).hex())
    before, digest = _calls(ledger), b"\x5a" * 32
    assert coord.checkpoint_message(7, digest) == v.checkpoint_message(7, digest)
    assert _since(ledger, before) == {}


def test_a_certified_phase_is_polled_by_its_block_number(net2: Net) -> None:
    """Before its deadline only the block of a certified, non-final phase can change: the round view reads
    ``eth_blockNumber`` (a third of a status read's bytes); past the deadline it reads the status in full."""
    r = net2.fresh_round()
    digest = b"\x66" * 32
    sigs = {v.address: v.sign_checkpoint_ecdsa(v.account, r - 1, digest) for v in net2.validators}  # type: ignore[arg-type]
    net2.validators[0].certify_checkpoint_ecdsa(r - 1, digest, sigs)
    chain, ledger = _counted(net2, net2.validators[1])
    assert chain.account is not None
    coord = ChainCoordinator(chain, "0x" + bytes(chain.account.key).hex())
    first = coord.current()
    assert first.checkpoint == digest and first.phase == Phase.COMMIT and first.round == r
    before = _calls(ledger)
    mine(net2.w3, 1)
    st = coord.current()
    assert _since(ledger, before) == {"eth_blockNumber": 1}
    assert st.block == first.block + 1 and (st.round, st.phase, st.checkpoint) == (r, Phase.COMMIT, digest)
    net2.mine_past_deadline()
    before = _calls(ledger)
    st = coord.current()  # past the deadline someone may have advanced: read in full
    assert _since(ledger, before) == {"eth_blockNumber": 1, "eth_call:status": 1} and st.block > st.deadline
