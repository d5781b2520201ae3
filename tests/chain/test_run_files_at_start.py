"""A node checks every file the run file names before it registers or bonds (issue 27 item 4: a miner
registered and bonded without the run's corpus, read only at its first training): ``tessera miner run``
with a corpus that does not hash to the pinned digest, or a missing one, exits with one line and the key
stays unregistered on chain."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from web3 import Web3

from protocol.chain import Role
from protocol.rounds.anvil import Anvil
from protocol.runspec import RunSpec
from tessera.cli import main
from tests.chain.chain_support import Net, make_net, new_account

pytestmark = pytest.mark.chain


@pytest.fixture(scope="module")
def net1(w3: Web3, anvil: Anvil) -> Net:
    return make_net(w3, anvil, n_miners=1, n_validators=1)


@pytest.mark.parametrize(
    ("corpus", "digest", "says"),
    [
        ("bundled", "ab" * 32, "CorpusDigestError: corpus bundled hashes to "),
        ("no-such-corpus.txt", None, "no-such-corpus.txt does not exist"),
    ],
)
def test_a_wrong_or_missing_corpus_stops_the_miner_before_it_bonds(
    net1: Net,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    corpus: str,
    digest: str | None,
    says: str,
) -> None:
    acct = new_account(net1.w3)
    net1.deployer.transfer(acct.address, net1.deployment.params.min_miner_stake * 2)
    run_file = tmp_path / "run.json"
    replace(RunSpec(), corpus=corpus, corpus_digest=digest).save(run_file)
    deployment = tmp_path / "deployment.json"
    net1.deployment.save(deployment)
    monkeypatch.setenv("THE_MINER_KEY", "0x" + bytes(acct.key).hex())
    rc = main(
        ["miner", "run", "--run-file", str(run_file), "--deployment", str(deployment), "--key-env",
         "THE_MINER_KEY", "--data-dir", str(tmp_path / "m"), "--dht", "false", "--port", "0"]
    )  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and says in err[0], err
    info = net1.reader().account_info(acct.address)
    assert info.role == Role.NONE and info.stake == 0
