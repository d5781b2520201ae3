"""Fixtures for the chain tests: a real anvil (--hardfork prague) and a fresh deployment per test module.

The helpers they use, and that the tests import, are in ``tests.chain.chain_support``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from web3 import Web3

from protocol.rounds.anvil import Anvil, AnvilError, find_anvil
from tests.chain.chain_support import Net, make_net


@pytest.fixture(scope="session")
def anvil() -> Iterator[Anvil]:
    try:
        find_anvil()
    except AnvilError as exc:
        pytest.skip(str(exc))
    with Anvil() as node:
        yield node


@pytest.fixture(scope="session")
def w3(anvil: Anvil) -> Web3:
    return Web3(Web3.HTTPProvider(anvil.rpc_url))


@pytest.fixture(scope="module")
def net(w3: Web3, anvil: Anvil) -> Net:
    return make_net(w3, anvil)


@pytest.fixture
def tmp_out(tmp_path: Path) -> Path:
    return tmp_path / "deployment.json"
