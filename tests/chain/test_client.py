"""Chain client plumbing: retries, missing anvil, persisted state, ECDSA certificates, event queries."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
from eth_account import Account
from web3 import Web3
from web3._utils.http_session_manager import HTTPSessionManager

from protocol.chain import Chain, ChainConnectionError, CheckpointCertified, Registered, deploy_network
from protocol.chain.coordinator import ChainCoordinator
from protocol.rounds import anvil as anvil_mod
from protocol.rounds.anvil import Anvil, AnvilError, free_port
from protocol.rounds.deployment import Deployment, NetworkParams
from tests.chain.chain_support import Net, make_net, new_account

pytestmark = pytest.mark.chain


def test_connection_errors_are_retried_then_typed(monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps: list[float] = []
    monkeypatch.setattr(time, "sleep", sleeps.append)  # transport backs off with time.sleep
    dep = Deployment(1, "0x" + "11" * 20, "0x" + "22" * 20, 0, "0x" + "33" * 20, NetworkParams())
    with pytest.raises(ChainConnectionError, match="unreachable after 5 attempts"):
        Chain.connect(dep, rpc_url=f"http://127.0.0.1:{free_port()}", timeout=1)
    assert sleeps == [0.25, 0.5, 1.0, 2.0]  # exponential backoff


def test_missing_anvil_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(anvil_mod, "ANVIL_BIN", tmp_path / "nope" / "anvil")
    monkeypatch.delenv("TESSERA_ANVIL", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(AnvilError, match="npm ci"):
        Anvil().start()


def test_state_persists_across_restarts(tmp_path: Path) -> None:
    state = tmp_path / "anvil-state.json"
    with Anvil(state=state) as node:
        w3 = Web3(Web3.HTTPProvider(node.rpc_url))
        network, *_ = deploy_network(w3, new_account(w3), NetworkParams())
    assert state.exists()
    with Anvil(state=state) as node:
        w3 = Web3(Web3.HTTPProvider(node.rpc_url))
        assert len(w3.eth.get_code(Web3.to_checksum_address(network))) > 0


def test_ecdsa_certificate_and_events(w3: Web3, anvil: Anvil) -> None:
    n: Net = make_net(w3, anvil, n_miners=1, n_validators=3)
    r = n.fresh_round() - 1  # a finalized round
    digest = b"\x99" * 32
    sigs = {v.address: v.sign_checkpoint_ecdsa(v.account, r, digest) for v in n.validators}  # type: ignore[arg-type]
    res = n.validators[0].certify_checkpoint_ecdsa(r, digest, sigs)
    cert = [e for e in res.events if isinstance(e, CheckpointCertified)]
    assert cert and cert[0].bls is False and cert[0].digest == digest
    assert n.reader().checkpoint(r + 1) == digest
    regs = n.reader().events("Registered")
    assert {e.account for e in regs if isinstance(e, Registered)} >= {v.address for v in n.validators}


def test_bls_key_of_reads_the_registered_key_back(net: Net) -> None:
    """The node checks each peer's certificate signature against the key the contract holds."""
    from protocol.wire import bls

    r = net.reader()
    digest = b"\x42" * 32
    msg = r.checkpoint_message(3, digest)
    for v, k in zip(net.validators, net.bls_keys, strict=True):
        key = r.bls_key_of(v.address)
        assert key == k.public_key
        assert bls.verify(key, msg, k.sign(msg))
        assert not bls.verify(key, msg, k.sign(r.checkpoint_message(3, b"\x43" * 32)))
    with pytest.raises(bls.BlsError):
        bls.g1_from_eip2537(bytes(128))  # the zero words a non-validator maps to are not a key


@pytest.fixture
def rpc_methods(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The JSON-RPC methods every HTTP provider of this test posts, in order."""
    sent: list[str] = []
    post = HTTPSessionManager.make_post_request

    def counting(self: HTTPSessionManager, uri: str, data: bytes, **kwargs: object) -> bytes:
        sent.append(json.loads(data)["method"])
        return post(self, uri, data, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(HTTPSessionManager, "make_post_request", counting)
    return sent


def test_the_chain_id_is_asked_once_per_connection(net: Net, rpc_methods: list[str]) -> None:
    """web3's validation middleware asks ``eth_chainId`` before every call; a connected client must not
    (it was 43% of a devnet's RPC bytes, issue 13)."""
    chain = Chain.connect(net.deployment)
    for _ in range(3):
        chain.round_state()
    assert rpc_methods.count("eth_chainId") == 1, rpc_methods
    assert rpc_methods.count("eth_call") == 3


def test_a_poll_is_one_request(net: Net, rpc_methods: list[str]) -> None:
    """A node's poll (``ChainCoordinator.current()``) reads round, phase, deadline, checkpoint, both
    seeds and the block number in one ``eth_call`` (six requests before issue 13's ``status()`` view),
    and agrees with the single views."""
    acct = Account.create()
    coord = ChainCoordinator(Chain.connect(net.deployment, acct), acct.key.hex())
    rpc_methods.clear()
    st = coord.current()
    assert rpc_methods == ["eth_call"]
    c = net.reader()
    assert (st.round, st.deadline) == (c.round_state().round, c.round_state().deadline)
    assert (st.checkpoint or bytes(32)) == c.checkpoint(st.round) and st.assign_seed == c.seed(st.round - 1)
    assert st.seed is None and c.seed(st.round) == b"\0" * 32
    assert 0 <= c.block_number() - st.block <= 1
    # a past round's seed (an assignment epoch's, issue 28): one read, None until fixed
    rpc_methods.clear()
    assert coord.seed(st.round - 1) == st.assign_seed and coord.seed(st.round) is None
    assert rpc_methods == ["eth_call", "eth_call"]
    rpc_methods.clear()
    assert coord.current(max_age=60) == st, "a reading younger than max_age stands"
    assert rpc_methods == []
    coord.current()
    assert rpc_methods == ["eth_call"], "max_age 0 (the default) asks the chain"


def test_connect_names_a_missing_contract_and_a_bad_url(net: Net) -> None:
    from protocol.chain import ChainError, NotDeployedError

    dep = dataclasses.replace(net.deployment, network="0x" + "ab" * 20)
    with pytest.raises(NotDeployedError, match=r"no contract at 0x[aAbB]{40} on chain \d+"):
        Chain.connect(dep)
    for bad in ["127.0.0.1:8545", "ftp://h", "http://", "http:///x", "localhost"]:
        with pytest.raises(ChainError, match="must look like http://HOST:PORT"):
            Chain.connect(net.deployment, rpc_url=bad)


def test_anvil_bounds_its_disk_cache_and_still_reads_recent_blocks() -> None:
    # Unbounded, anvil kept about 1 MB of state a block on disk (``anvil_mod.PERSISTED_STATES``): the
    # bound must be one the pinned anvil accepts, and the recent history the nodes read must stay readable.
    node = Anvil()
    cmd = node.command()
    assert cmd[cmd.index("--max-persisted-states") + 1] == str(anvil_mod.PERSISTED_STATES)
    with node:
        w3 = Web3(Web3.HTTPProvider(node.rpc_url))
        rich = w3.eth.accounts[0]
        w3.provider.make_request("anvil_mine", ["0x12c"])  # type: ignore[arg-type]
        head = w3.eth.block_number
        assert head >= 300
        assert w3.eth.get_balance(rich, block_identifier=head - 100) == w3.eth.get_balance(rich)
