"""``tessera contracts deploy``: resumable and idempotent; the deployment file, keys and artifacts."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

import pytest
from eth_account import Account
from web3 import Web3

from protocol.chain import Chain
from protocol.chain.abi import artifacts
from protocol.errors import ProtocolError
from protocol.rounds.anvil import Anvil
from protocol.rounds.deployment import Deployment, DeploymentError, NetworkParams
from protocol.wire.keys import (
    KeySourceError,
    account_from_env,
    account_from_keystore,
    load_account,
    write_keystore,
)
from tessera.commands import contracts as contracts_cmd
from tessera.errors import TesseraError
from tests.chain.chain_support import new_account

pytestmark = pytest.mark.chain

REPO = Path(__file__).resolve().parents[2]
GENESIS = "0x" + "11" * 32


def cli(argv: list[str]) -> int:
    """``tessera ARGV`` through the ``contracts`` subcommand's own parser and handler (what
    ``tessera.cli.main`` dispatches to), independent of the other subcommands' imports."""
    parser = argparse.ArgumentParser(prog="tessera")
    contracts_cmd.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except (ProtocolError, TesseraError) as exc:
        print(f"tessera: error: {type(exc).__name__}: {exc}")
        return 2


def test_deploy_is_idempotent_and_resumable(
    w3: Web3, anvil: Anvil, tmp_out: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployer = new_account(w3)
    ks = write_keystore(deployer, tmp_path / "deployer.keystore.json", "hunter2")
    monkeypatch.setenv("TESSERA_KEYSTORE_PASSWORD", "hunter2")
    base = ["contracts", "deploy", "--rpc-url", anvil.rpc_url, "--keystore", str(ks), "--out", str(tmp_out)]
    base += ["--genesis-checkpoint", GENESIS]
    # no run file: q = 1 with every validator on each committee, which takes a flag saying so
    assert cli([*base, "--commit-blocks", "6"]) == 2 and not tmp_out.exists()
    base += ["--audit-every-update"]
    assert cli([*base, "--commit-blocks", "6"]) == 0
    first = tmp_out.read_bytes()
    dep = Deployment.load(tmp_out)
    assert dep.params.commit_blocks == 6 and dep.deployer == deployer.address
    assert len(w3.eth.get_code(Web3.to_checksum_address(dep.network))) > 0
    n_before = w3.eth.get_transaction_count(deployer.address)
    # second full run: nothing sent, file intact
    assert cli([*base, "--commit-blocks", "6"]) == 0
    assert tmp_out.read_bytes() == first
    assert w3.eth.get_transaction_count(deployer.address) == n_before
    # a run with a new step (funding) after the network exists: resumes, does not redeploy
    who = Account.create().address
    monkeypatch.setenv("DEPLOYER_KEY", "0x" + bytes(deployer.key).hex())
    env_run = [
        "contracts",
        "deploy",
        "--rpc-url",
        anvil.rpc_url,
        "--key-env",
        "DEPLOYER_KEY",
        "--out",
        str(tmp_out),
        "--genesis-checkpoint",
        GENESIS,
        "--audit-rate-bps",  # q = 1 with every validator, said in the flags
        "10000",
        "--committee-size",
        "0",
    ]
    assert cli([*env_run, "--fund", f"{who}=5"]) == 0
    dep2 = Deployment.load(tmp_out)
    assert dep2.network == dep.network and f"fund:{who}" in dep2.tx
    after_fund = tmp_out.read_bytes()
    assert cli([*env_run, "--fund", f"{who}=5"]) == 0  # already funded: skipped
    assert tmp_out.read_bytes() == after_fund
    assert Chain(w3, dep2).balance_of(who) == 5


def test_deploy_refuses_file_for_missing_code(
    anvil: Anvil, tmp_out: Path, w3: Web3, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployer = new_account(w3)
    monkeypatch.setenv("K", "0x" + bytes(deployer.key).hex())
    data = {
        "chain_id": anvil.chain_id,
        "network": "0x" + "12" * 20,
        "token": "0x" + "34" * 20,
        "block": 1,
        "deployer": deployer.address,
        "params": asdict(NetworkParams()),
    }
    tmp_out.write_text(json.dumps(data))
    rc = cli(["contracts", "deploy", "--rpc-url", anvil.rpc_url, "--key-env", "K", "--out", str(tmp_out)])
    assert rc == 2  # DeploymentError -> one-line message, exit 2


def test_deployment_strict_loading(tmp_path: Path) -> None:
    p = tmp_path / "d.json"
    with pytest.raises(DeploymentError, match="not found"):
        Deployment.load(p)
    p.write_text("{}")
    with pytest.raises(DeploymentError, match="missing key"):
        Deployment.load(p)
    p.write_text(
        json.dumps(
            {"chain_id": 1, "network": "0x12", "token": "x", "block": 1, "deployer": "x", "params": {}}
        )
    )
    with pytest.raises(DeploymentError, match="network must be"):
        Deployment.load(p)
    p.write_text(json.dumps({"bogus": 1}))
    with pytest.raises(DeploymentError, match="unknown keys"):
        Deployment.load(p)


def test_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    acct = Account.create()
    ks = write_keystore(acct, tmp_path / "k.json", "pw")
    assert account_from_keystore(ks, password="pw").address == acct.address
    with pytest.raises(KeySourceError, match="wrong password"):
        account_from_keystore(ks, password="nope")
    plain = tmp_path / "plain.txt"
    plain.write_text(json.dumps({"key": "0x" + bytes(acct.key).hex()}))
    with pytest.raises(KeySourceError, match="not an encrypted keystore"):
        account_from_keystore(plain, password="pw")
    # no password anywhere and no terminal to ask (CI, a service, a pipe): one line, not an EOFError
    monkeypatch.delenv("TESSERA_KEYSTORE_PASSWORD", raising=False)
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    with pytest.raises(KeySourceError, match="no terminal to ask"):
        account_from_keystore(ks, password_env="TESSERA_KEYSTORE_PASSWORD")
    monkeypatch.delenv("TESSERA_TEST_KEY", raising=False)
    with pytest.raises(KeySourceError, match="not set"):
        account_from_env("TESSERA_TEST_KEY")
    monkeypatch.setenv("TESSERA_TEST_KEY", "0x" + bytes(acct.key).hex())
    assert load_account(key_env="TESSERA_TEST_KEY").address == acct.address
    with pytest.raises(KeySourceError, match="exactly one"):
        load_account()


def test_artifacts_match_forge_output() -> None:
    """protocol/contracts.json is what `npm run build` exports from the current sources."""
    out = REPO / "contracts" / "out" / "TesseraNetwork.sol" / "TesseraNetwork.json"
    if not out.exists():
        pytest.skip("contracts/out missing (run `cd contracts && npm run build`)")
    built = json.loads(out.read_text())
    assert artifacts()["TesseraNetwork"]["bytecode"] == built["bytecode"]["object"], (
        "protocol/contracts.json is stale: run `cd contracts && npm run build`"
    )


def test_deploy_takes_the_genesis_from_the_run_file_and_nodes_check_it(
    w3: Web3, anvil: Anvil, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eth_account import Account as Acct

    from protocol.chain import Chain
    from protocol.chain.coordinator import ChainCoordinator
    from protocol.runspec import RunSpec
    from tessera.nodes import check_genesis

    deployer = new_account(w3)
    monkeypatch.setenv("K", "0x" + bytes(deployer.key).hex())
    out = tmp_path / "deployment.json"
    base = ["contracts", "deploy", "--rpc-url", anvil.rpc_url, "--key-env", "K", "--out", str(out)]
    # without a genesis checkpoint: refused before anything is sent (nodes could never start round 1)
    nonce = w3.eth.get_transaction_count(deployer.address)
    assert cli(base) == 2 and not out.exists()
    assert w3.eth.get_transaction_count(deployer.address) == nonce
    run = tmp_path / "run.json"
    spec = RunSpec(genesis_seed=3)
    spec.save(run)
    # a --genesis-checkpoint that contradicts the run file is refused too
    assert cli([*base, "--run-file", str(run), "--genesis-checkpoint", GENESIS]) == 2 and not out.exists()
    assert cli([*base, "--run-file", str(run)]) == 0
    dep = Deployment.load(out)
    assert dep.params.genesis_checkpoint == spec.genesis_digest()
    chain = Chain.connect(dep, Acct.from_key(bytes(deployer.key)))
    assert "0x" + chain.checkpoint(1).hex() == spec.genesis_digest()
    coord = ChainCoordinator(chain, "0x" + bytes(deployer.key).hex())
    check_genesis(coord, spec, run)  # the published run file: accepted
    other = RunSpec(genesis_seed=4)
    with pytest.raises(TesseraError, match="does not match the deployment"):
        check_genesis(coord, other, run)


def test_deploy_refuses_a_score_commit_window_that_cannot_hold_an_audit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a chain with 1-s blocks, 16 score-commit blocks left 12 s to verify: a validator's budget for an
    audit ran out before the 20-s serving window, so a miner that hangs when audited was never reported
    (the guides' window until issue 38). The deploy measures the block time and refuses it."""
    import time

    with Anvil(block_time=1) as node:
        w3 = Web3(Web3.HTTPProvider(node.rpc_url))
        deployer = new_account(w3)
        ks = write_keystore(deployer, tmp_path / "deployer.keystore.json", "hunter2")
        monkeypatch.setenv("TESSERA_KEYSTORE_PASSWORD", "hunter2")
        out = tmp_path / "deployment.json"
        base = ["contracts", "deploy", "--rpc-url", node.rpc_url, "--keystore", str(ks), "--out", str(out)]
        base += ["--genesis-checkpoint", GENESIS, "--audit-every-update"]
        while w3.eth.block_number < 4:
            time.sleep(0.5)
        assert cli([*base, "--score-commit-blocks", "16"]) == 2 and not out.exists()
        assert cli([*base, "--score-commit-blocks", "32"]) == 0 and out.exists()
