"""A node's account figures (``/status`` ``account``, the ``account_tokens{figure}`` gauges) are what the
chain holds, checked with Foundry's own ``cast`` at the block they were read at (issue 16: the reward
metric was a float the node summed in-process and lost at a restart); a commitment of the node's key that
the node did not make is refused with :class:`KeyInUseError`; a second node on one data dir is refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from prometheus_client import generate_latest
from web3 import Web3

from protocol.node.account import ChainAccount, KeyInUseError, vesting_rule
from protocol.node.api import NodeMetrics, NodeServer, create_node_app
from protocol.p2p.blobs import BlobStore
from protocol.rounds.anvil import Anvil
from tessera.nodes import dht_listen_maddr, lock_data_dir
from tests.chain.chain_support import Net, make_net
from tests.chain.test_account_cli import _pay_the_miner

pytestmark = pytest.mark.chain

REPO = Path(__file__).resolve().parents[2]
CLAIMED = "Claimed(address indexed account, uint256 amount)"


@pytest.fixture(scope="module")
def net1(w3: Web3, anvil: Anvil) -> Net:
    return make_net(w3, anvil, n_miners=1, n_validators=1)


def _cast(*args: str) -> str:
    cast = shutil.which("cast", path=str(REPO / "contracts" / "node_modules" / ".bin")) or shutil.which(
        "cast"
    )
    if cast is None:
        pytest.skip("Foundry's cast is not installed (cd contracts && npm ci)")
    return subprocess.run([cast, *args], check=True, capture_output=True, text=True, timeout=60).stdout


def _gauges(text: str, name: str) -> dict[str, float]:
    """``{label value or '': sample}`` of one metric in Prometheus text."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, value = line.rsplit(" ", 1)
            out[key.split('"')[1] if '"' in key else ""] = float(value)
    return out


def test_status_and_metrics_equal_cast_at_the_block_read(net1: Net, tmp_path: Path) -> None:
    miner = net1.miners[0]
    _pay_the_miner(net1)
    miner.claim()  # something claimed (a Claimed event) ...
    _pay_the_miner(net1)  # ... and something owed
    metrics = NodeMetrics.create("miner")
    acc = ChainAccount.of(SimpleNamespace(chain=miner), miner.address, metrics)
    assert acc is not None and ChainAccount.of(SimpleNamespace(), miner.address, metrics) is None
    app = create_node_app(
        role="miner", status=lambda: {"account": acc.to_json()}, store=BlobStore(tmp_path), metrics=metrics
    )
    server = NodeServer(app).start()
    try:
        assert acc.refresh(7) and not acc.refresh(7)  # one read per key (a round)
        status = httpx.get(f"{server.url}/status", timeout=10).json()["account"]
        text = httpx.get(f"{server.url}/metrics", timeout=10).text
    finally:
        server.stop()

    rpc, block = net1.deployment.rpc_url, str(status["block"])
    net, token = net1.deployment.network, net1.deployment.token
    fields = _cast("call", net, "accountOf(address)((uint96,uint96,uint32,uint8,uint16))", miner.address,
                   "--rpc-url", rpc, "--block", block)  # fmt: skip
    stake, owed, _last, role, _index = (int(x.split()[0]) for x in fields.strip().strip("()").split(","))
    balance = int(_cast("call", token, "balanceOf(address)(uint256)", miner.address, "--rpc-url", rpc,
                        "--block", block).split()[0])  # fmt: skip
    logs = json.loads(_cast("logs", "--address", net, "--from-block", str(net1.deployment.block),
                            "--to-block", block, CLAIMED, miner.address, "--rpc-url", rpc, "--json"))  # fmt: skip
    claimed = sum(int(log["data"], 16) for log in logs)
    unvested = int(_cast("call", net, "unvestedOf(address)(uint256)", miner.address, "--rpc-url", rpc,
                         "--block", block).split()[0])  # fmt: skip
    assert owed > 0 and claimed > 0 and role == 1 and len(logs) == 1
    assert status.pop("vesting") == vesting_rule(net1.deployment.params.vesting_rounds)
    assert status == {
        "role": "miner",
        "stake_wei": str(stake),
        "owed_wei": str(owed),
        "unvested_wei": str(unvested),
        "claimed_wei": str(claimed),
        "balance_wei": str(balance),
        "unbonding_wei": "0",
        "block": int(block),
    }
    tokens = _gauges(text, "tessera_miner_account_tokens")
    assert tokens == {"stake": stake / 10**18, "owed": owed / 10**18, "claimed": claimed / 10**18}
    assert _gauges(text, "tessera_miner_account_block") == {"": float(block)}
    assert "rewards_wei" not in text

    # claimed grows by what a later claim moves, scanning only the new blocks; a scrape's hook (how a
    # validator refreshes) runs before the gauges are collected
    miner.claim()
    metrics.before_collect.append(lambda: acc.try_refresh(8))
    text = generate_latest(metrics.registry).decode()
    assert _gauges(text, "tessera_miner_account_tokens")["claimed"] == (claimed + owed) / 10**18
    assert acc.to_json()["claimed_wei"] == str(claimed + owed)  # type: ignore[index]
    assert acc.to_json()["owed_wei"] == "0" and acc.scanned > int(block)  # type: ignore[index]


def test_a_commitment_this_node_did_not_make_is_refused(net1: Net) -> None:
    miner = net1.miners[0]
    acc = ChainAccount(miner, miner.address, NodeMetrics.create("miner"))
    r = net1.fresh_round()
    acc.refresh(1)
    acc.check_commits(r, own=lambda _r: False)  # nothing committed since this node started
    miner.commit_update(r, b"\x11" * 32)  # another instance with this key commits
    acc.refresh(2)
    with pytest.raises(KeyInUseError, match=f"round {r}: key {miner.address} committed an update this node"):
        acc.check_commits(r, own=lambda _r: False)
    acc.check_commits(r, own=lambda _r: False)  # reported once per round
    assert acc.conflict.startswith(f"round {r}:")


def test_a_second_node_on_one_data_dir_is_refused(tmp_path: Path) -> None:
    import sys

    held = lock_data_dir(tmp_path / "miner")
    second = "from pathlib import Path; import sys; from tessera.nodes import lock_data_dir; lock_data_dir(Path(sys.argv[1]))"
    run = [sys.executable, "-c", second, str(tmp_path / "miner")]
    got = subprocess.run(run, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert got.returncode != 0 and f"is in use by another node (pid {os.getpid()})" in got.stderr, got.stderr
    held.close()
    assert subprocess.run(run, capture_output=True, text=True, timeout=60, cwd=REPO).returncode == 0


def test_dht_listens_on_the_http_host() -> None:
    assert dht_listen_maddr("0.0.0.0", 31337) == "/ip4/0.0.0.0/tcp/31337"
    assert dht_listen_maddr("::1", 5) == "/ip6/::1/tcp/5"
    assert dht_listen_maddr("my.host", 0) == "/ip4/127.0.0.1/tcp/0"


def test_a_miner_node_reports_a_commitment_of_its_key_it_did_not_make(net1: Net, tmp_path: Path) -> None:
    """The wiring in ``miner.rewards.Rewards.collect``: a round this node has no commit record of, committed on
    chain by its key (another instance), is a one-line KeyInUseError, once, kept in ``/status``."""
    from miner.config import MinerConfig
    from miner.node import MinerNode
    from protocol.chain.coordinator import ChainCoordinator
    from protocol.p2p.discovery import Discovery
    from protocol.runspec import RunSpec

    chain = net1.miners[0]
    key = "0x" + bytes(chain.account.key).hex()  # type: ignore[union-attr]
    coord = ChainCoordinator(chain, key)
    node = MinerNode(MinerConfig(data_dir=tmp_path / "m"), RunSpec(), coord, Discovery(coord.chain_id, key))
    net1.fresh_round()  # the key's last commitment two rounds back: not a sign at start
    r = net1.fresh_round()
    node.rewards.collect(r)  # the first read: nothing committed since it started
    assert node.status()["account"]["role"] == "miner" and node.status()["key_in_use"] == ""
    chain.commit_update(r, b"\x22" * 32)  # the same key, from elsewhere
    r2 = net1.fresh_round()
    with pytest.raises(
        KeyInUseError, match=f"^round {r}: key {chain.address} committed an update this node did"
    ):
        node.rewards.collect(r2)
    node.rewards.collect(r2)  # once
    assert node.status()["key_in_use"].startswith(f"round {r}: key {chain.address}")


def test_a_request_handler_reads_in_the_background_and_a_failure_waits(
    net1: Net, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from protocol.chain import ChainConnectionError
    from protocol.node.account import RETRY_AFTER_S

    miner = net1.miners[0]
    acc = ChainAccount(miner, miner.address, NodeMetrics.create("validator"))
    acc.refresh_soon(5)  # answered at once; the read runs in its own thread
    deadline = time.time() + 30
    while acc.key != 5 and time.time() < deadline:
        time.sleep(0.05)
    assert acc.key == 5 and acc.to_json() is not None

    calls = []

    class Down:
        def block_number(self) -> int:
            calls.append(1)
            raise ChainConnectionError("RPC unreachable")

    dead = ChainAccount(Down(), miner.address, NodeMetrics.create("validator"))
    dead.try_refresh(1)
    dead.try_refresh(1)  # not again at once
    assert len(calls) == 1 and dead.to_json() is None
    now = time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: now + RETRY_AFTER_S + 1)
    dead.try_refresh(1)
    assert len(calls) == 2


def test_claimed_is_summed_in_bounded_log_ranges(net1: Net, monkeypatch: pytest.MonkeyPatch) -> None:
    import protocol.node.account as na

    miner, start = net1.miners[0], net1.deployment.block
    if miner.account_info(miner.address).owed == 0:
        _pay_the_miner(net1)
    miner.claim()
    head = miner.block_number()
    whole = na.claimed_between(miner, miner.address, start, head)
    assert whole > 0
    monkeypatch.setattr(na, "LOG_CHUNK", 7)
    assert na.claimed_between(miner, miner.address, start, head) == whole
    assert na.claimed_between(miner, miner.address, head + 1, head) == 0
