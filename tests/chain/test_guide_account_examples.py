"""The operator guides' ``tessera account`` examples, run as written against anvil at the default stake
(issue 27 item 4: docs/operator-miner.md's ``unbond --amount 50`` failed with ``RemainingStakeTooLow`` at the
default stake). Each guide's commands run in order through the CLI, with only the deployment file and the
keystore path replaced: status, claim (after a paid round), unbond, and withdraw once the unbonding delay
has passed; every one exits 0 and the stake ends in the operator's wallet."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from web3 import Web3

from protocol.chain import Chain, Role
from protocol.rounds.anvil import Anvil
from protocol.wire.keys import write_keystore
from tessera.cli import main
from tests.chain.chain_support import Net, make_net, mine
from tests.chain.test_account_cli import _pay_the_miner

pytestmark = pytest.mark.chain

REPO = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```(?:sh|bash)[^\n]*\n(?P<body>.*?)^```", re.M | re.S)
PASSWORD = "guide-password"


@pytest.fixture
def net1(w3: Web3, anvil: Anvil) -> Net:
    """A fresh network per guide: each guide unbonds its operator's whole stake."""
    return make_net(w3, anvil, n_miners=1, n_validators=1)  # registered with the run's minimum stakes


def account_examples(doc: str) -> list[str]:
    """Every ``tessera account`` command in the fenced shell blocks of ``doc``, in order."""
    text = (REPO / doc).read_text()
    return [
        line.strip()
        for m in BLOCK.finditer(text)
        for line in m.group("body").splitlines()
        if line.strip().startswith("tessera account ")
    ]


def _argv(command: str, deployment: Path, keystore: Path, role: str) -> list[str]:
    words = shlex.split(command, comments=True)[1:]  # without "tessera"
    swap = {"deployment.json": str(deployment), f"~/.tessera/{role}.json": str(keystore)}
    return [swap.get(w, w) for w in words]


@pytest.mark.parametrize("role", ["miner", "validator"])
def test_the_guides_account_examples_run_at_the_default_stake(
    net1: Net,
    role: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    chain: Chain = (net1.miners if role == "miner" else net1.validators)[0]
    assert chain.account is not None
    minimum = (
        net1.deployment.params.min_miner_stake
        if role == "miner"
        else net1.deployment.params.min_validator_stake
    )
    assert chain.account_info(chain.address).stake == minimum  # the default stake is the minimum
    commands = account_examples(f"docs/operator-{role}.md")
    assert [c.split()[2] for c in commands] == ["status", "claim", "unbond", "withdraw"]
    deployment = tmp_path / "deployment.json"
    net1.deployment.save(deployment)
    keystore = write_keystore(chain.account, tmp_path / f"{role}.json", PASSWORD)
    monkeypatch.setenv("TESSERA_KEYSTORE_PASSWORD", PASSWORD)
    _pay_the_miner(net1)  # something to claim
    balance = chain.balance_of(chain.address)
    for command in commands:
        if " withdraw " in f"{command} ":
            mine(net1.w3, net1.deployment.params.unbonding_blocks + 1)  # "after the unbonding delay"
        rc = main(_argv(command, deployment, keystore, role))
        out = capsys.readouterr()
        assert rc == 0, (command, out.err)
    info = chain.account_info(chain.address)
    assert (
        info.stake == 0
        and chain.unbonding(chain.address).amount == 0
        and info.role in (Role.NONE, Role(int(role == "miner") or 2))
    )
    assert (
        chain.balance_of(chain.address) > balance + minimum - 1
    )  # the stake (and the claimed reward) came back
