"""A validator's key started twice (issue 27 item 3): the second validator stops with one clear error at its
first step that sees a seed share of its key it did not make, before it fetches or verifies anything; the
original keeps running and shows the conflict in its log and ``/status``; a restart on the same data dir is
no conflict. Real anvil, real validator nodes (``ValidatorNode``) over ``ChainCoordinator``."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from web3 import Web3

from protocol.chain.coordinator import ChainCoordinator
from protocol.node.account import KeyInUseError
from protocol.p2p.discovery import Discovery
from protocol.rounds.anvil import Anvil
from protocol.runspec import RunSpec
from tests.chain.chain_support import Net, make_net
from validator.config import ValidatorConfig
from validator.node import ValidatorNode

pytestmark = pytest.mark.chain


@pytest.fixture(scope="module")
def net1(w3: Web3, anvil: Anvil) -> Net:
    return make_net(w3, anvil, n_miners=1, n_validators=1)


def _node(net: Net, data_dir: Path) -> ValidatorNode:
    chain = net.validators[0]
    key = "0x" + bytes(chain.account.key).hex()  # type: ignore[union-attr]
    coord = ChainCoordinator(chain, key)
    return ValidatorNode(
        ValidatorConfig(data_dir=data_dir), RunSpec(), coord, Discovery(coord.chain_id, key), key
    )


def _commit_as_original(net: Net, original: ValidatorNode, r: int, secret: bytes) -> None:
    """The original keeps its secret, then commits its share, as its ``_seed_commit`` does."""
    with original.state.edit(r) as rec:
        rec.seed_secret = secret.hex()
    net.validators[0].commit_seed(r, secret)


def test_a_second_validator_stops_at_its_first_step(net1: Net, tmp_path: Path) -> None:
    r = net1.fresh_round()
    net1.validators[0].commit_seed(r, b"\x31" * 32)  # the original, elsewhere, committed its share
    second = _node(net1, tmp_path / "second")
    with pytest.raises(KeyInUseError, match=f"^round {r}: key {second.address} committed a seed share"):
        second.run(threading.Event())  # the first step: no retry loop, the run ends with the error
    assert second.state.rounds().get(r) is None  # it kept no secret and verified nothing
    assert second.checkpoints.theta is None  # nor fetched theta
    assert f"start it again after round {r}" in second.status()["key_in_use"]


def test_the_original_keeps_running_and_shows_the_conflict(
    net1: Net, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    r = net1.fresh_round()
    original = _node(net1, tmp_path / "original")
    original.api.key_use.check(r)  # started: nothing committed yet
    _commit_as_original(net1, original, r, b"\x41" * 32)
    original.api.key_use.check(r)  # its own share: it has committed here
    assert original.status()["key_in_use"] == ""
    r2 = net1.fresh_round()
    net1.validators[0].commit_seed(r2, b"\x42" * 32)  # a second node with the key got in first this time
    with caplog.at_level(logging.ERROR):
        original.api.key_use.check(r2)  # no exception: the original goes on
        original.api.key_use.check(r2)  # logged once a round
    assert original.status()["key_in_use"].startswith(f"round {r2}: key {original.address} committed")
    assert sum("key in use" in m for m in caplog.messages) == 1


def test_a_restarted_validator_with_its_records_is_not_a_conflict(net1: Net, tmp_path: Path) -> None:
    r = net1.fresh_round()
    first = _node(net1, tmp_path / "same")
    first.api.key_use.check(r)
    _commit_as_original(net1, first, r, b"\x51" * 32)
    again = _node(net1, tmp_path / "same")  # the same data dir after a restart
    again.api.key_use.check(r)
    assert again.status()["key_in_use"] == ""
