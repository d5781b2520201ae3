"""The same key started twice (issue 27 item 3): the second node stops with one clear error at the first
sign that another node holds its key, before it trains; the original keeps running and shows the conflict
in its log and ``/status``. Real anvil, real miner nodes (``MinerNode``) over ``ChainCoordinator``."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from web3 import Web3

from miner.config import MinerConfig
from miner.node import MinerNode
from miner.state import COMMITTED, MinerRoundRecord
from protocol.chain.coordinator import ChainCoordinator
from protocol.node.account import KeyInUseError
from protocol.node.loop import StepLoop
from protocol.p2p.discovery import Discovery
from protocol.rounds.anvil import Anvil
from protocol.runspec import RunSpec
from tests.chain.chain_support import Net, make_net

pytestmark = pytest.mark.chain


@pytest.fixture(scope="module")
def net1(w3: Web3, anvil: Anvil) -> Net:
    return make_net(w3, anvil, n_miners=1, n_validators=1)


def _node(net: Net, data_dir: Path) -> MinerNode:
    chain = net.miners[0]
    key = "0x" + bytes(chain.account.key).hex()  # type: ignore[union-attr]
    coord = ChainCoordinator(chain, key)
    return MinerNode(MinerConfig(data_dir=data_dir), RunSpec(), coord, Discovery(coord.chain_id, key))


def _commit_as_original(net: Net, original: MinerNode, r: int, digest: bytes) -> None:
    """The original commits ``r`` and records it, as its ``_commit`` does."""
    net.miners[0].commit_update(r, digest)
    original.state.prepare(r, MinerRoundRecord(round=r, update_digest=digest.hex()), {})
    with original.state.edit(r) as rec:
        rec.status = COMMITTED


def test_a_second_node_stops_at_start_and_run_ends_with_the_error(net1: Net, tmp_path: Path) -> None:
    r = net1.fresh_round()
    net1.miners[0].commit_update(r, b"\x31" * 32)  # the original, elsewhere, committed this round
    second = _node(net1, tmp_path / "second")
    with pytest.raises(
        KeyInUseError, match=f"^round {r}: key {second.address} committed an update this node"
    ):
        second.run(threading.Event())  # the first step: no retry loop, the run ends with the error
    assert second.state.record(r) is None  # it never trained nor prepared the round
    assert "start it again after round" in second.status()["key_in_use"]


def test_the_original_keeps_running_and_shows_the_conflict(
    net1: Net, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    net1.fresh_round()
    r = net1.fresh_round()
    original = _node(net1, tmp_path / "original")
    original.rewards.collect(r)  # started: nothing committed recently
    _commit_as_original(net1, original, r, b"\x41" * 32)
    original.rewards.collect(r)  # its own commitment: it has committed here
    assert original.status()["key_in_use"] == ""
    r2 = net1.fresh_round()
    net1.miners[0].commit_update(r2, b"\x42" * 32)  # a second node with the key got in first this time
    with caplog.at_level(logging.ERROR):
        original.rewards.collect(r2)  # no exception: the original goes on
    assert original.status()["key_in_use"].startswith(f"round {r2}: key {original.address} committed")
    assert any("key in use" in m for m in caplog.messages)


def test_a_restarted_node_with_its_records_is_not_a_conflict(net1: Net, tmp_path: Path) -> None:
    net1.fresh_round()
    r = net1.fresh_round()
    first = _node(net1, tmp_path / "same")
    first.rewards.collect(r)
    _commit_as_original(net1, first, r, b"\x51" * 32)
    again = _node(net1, tmp_path / "same")  # the same data dir after a restart
    again.rewards.collect(r)
    assert again.status()["key_in_use"] == ""


def test_a_fatal_error_ends_the_loop_unreported() -> None:
    reported: list[BaseException] = []

    def step() -> None:
        raise KeyInUseError("held elsewhere")

    with pytest.raises(KeyInUseError):
        StepLoop(
            interval=0.01,
            retry_on=(KeyInUseError,),
            on_error=lambda exc, _b: reported.append(exc),
            fatal=(KeyInUseError,),
        ).run(step, threading.Event())
    assert reported == []
