"""F4 (docs/security.md): malformed JSON-RPC results become ``MalformedResponseError``, not web3/eth-abi errors.

No anvil needed: a scripted provider answers each request.
"""

from __future__ import annotations

from typing import Any

import pytest
from eth_utils import keccak
from web3 import Web3
from web3.providers.base import BaseProvider

from protocol.chain import Chain, ChainError, ContractRevert, MalformedResponseError
from protocol.rounds.deployment import Deployment, NetworkParams
from protocol.rounds.phases import Phase

NETWORK = "0x" + "11" * 20


def _word(v: int) -> str:
    return f"{v:064x}"


class _Scripted(BaseProvider):
    def __init__(self) -> None:
        super().__init__()
        self.script: list[Any] = []

    def make_request(self, method: Any, params: Any) -> Any:
        if method == "eth_chainId":
            return {"jsonrpc": "2.0", "id": 1, "result": "0x7a69"}
        resp = self.script.pop(0) if self.script else {"result": "0x"}
        return {"jsonrpc": "2.0", "id": 1, **resp}


@pytest.fixture
def chain() -> tuple[Chain, _Scripted]:
    provider = _Scripted()
    dep = Deployment(31337, NETWORK, "0x" + "22" * 20, 1, "0x" + "33" * 20, NetworkParams())
    return Chain(Web3(provider), dep), provider


def _status(phase: int = 1) -> dict[str, Any]:
    """A ``status()`` answer: the round state (6 words), deadline, checkpoint, seed, assignment seed, block."""
    return {"result": "0x" + "".join(_word(v) for v in (3, phase, 100, 4, 2, 0, 110, 7, 8, 9, 105))}


def test_valid_reads_unchanged(chain: tuple[Chain, _Scripted]) -> None:
    c, p = chain
    p.script = [_status()]
    st = c.round_state()
    assert (st.round, st.phase, st.deadline) == (3, Phase(1), 110)
    p.script = [_status()]
    s = c.status()
    assert (s.block, s.checkpoint[-1], s.seed[-1], s.assign_seed[-1]) == (105, 7, 8, 9)
    p.script = [{"result": "0x10"}]
    assert c.block_number() == 16


@pytest.mark.parametrize(
    "script",
    [
        [{"result": "0x" + "ab" * 5}],  # too few ABI bytes (InsufficientDataBytes / BadFunctionCallOutput)
        [{"result": "0xzz"}],  # not hex
        [{"result": 5}],  # wrong JSON type
        [{"result": {"a": 1}}],
        [{"error": {"code": -32603, "message": "internal error"}}],  # Web3RPCError
        [_status(phase=99)],  # Phase(99)
    ],
)
def test_round_state_malformed(chain: tuple[Chain, _Scripted], script: list[Any]) -> None:
    c, p = chain
    p.script = list(script)
    with pytest.raises(MalformedResponseError):
        c.round_state()


@pytest.mark.parametrize("result", ["0xzz", "junk", None, [], {"x": 1}])
def test_block_number_malformed(chain: tuple[Chain, _Scripted], result: Any) -> None:
    c, p = chain
    p.script = [{"result": result}]
    with pytest.raises(ChainError):
        c.block_number()


def test_account_info_bad_role(chain: tuple[Chain, _Scripted]) -> None:
    c, p = chain
    p.script = [{"result": "0x" + "".join(_word(v) for v in (10**20, 5, 3, 77, 0))}]
    with pytest.raises(MalformedResponseError):
        c.account_info("0x" + "44" * 20)


@pytest.mark.parametrize(
    "logs",
    [
        [{"address": NETWORK, "topics": ["0x12"], "data": "0x"}],
        [{"address": NETWORK, "topics": [], "data": "0xzz", "blockNumber": "0x5"}],
        [5],
        "notalist",
    ],
)
def test_events_malformed(chain: tuple[Chain, _Scripted], logs: Any) -> None:
    c, p = chain
    p.script = [{"result": logs}]
    with pytest.raises(MalformedResponseError):
        c.committed_miners(1)


def test_valid_event_still_decodes(chain: tuple[Chain, _Scripted]) -> None:
    c, p = chain
    topic = "0x" + keccak(b"UpdateCommitted(uint256,address,bytes32)").hex()
    log = {
        "address": NETWORK,
        "topics": [topic, "0x" + _word(1), "0x" + "00" * 12 + "44" * 20],
        "data": "0x" + "cd" * 32,
        "blockNumber": "0x5",
        "blockHash": "0x" + "ee" * 32,
        "transactionHash": "0x" + "ff" * 32,
        "transactionIndex": "0x0",
        "logIndex": "0x0",
        "removed": False,
    }
    p.script = [{"result": [log]}]
    (ev,) = c.committed_miners(1)
    assert ev.round == 1 and ev.block_number == 5


def test_reverts_still_decode_as_contract_reverts(chain: tuple[Chain, _Scripted]) -> None:
    c, p = chain
    # a string revert ("Error(string)") the way anvil reports it: ContractLogicError -> decode_revert
    data = "0x08c379a0" + _word(32) + _word(3) + b"bad".hex().ljust(64, "0")
    p.script = [{"error": {"code": 3, "message": "execution reverted: bad", "data": data}}]
    with pytest.raises(ContractRevert):
        c.pool()
