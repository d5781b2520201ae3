"""One-line errors where the nodes already had them (issue 27 item 4): ``tessera contracts deploy`` with an
RPC URL without a scheme (it printed a 65-line traceback), and a node's keystore opened with the wrong
password ("MAC mismatch" became "wrong password?", the deploy command's words)."""

from __future__ import annotations

from pathlib import Path

import pytest
from eth_account import Account

from protocol.node.settings import SettingsError, resolve_private_key
from protocol.wire.keys import write_keystore
from tessera.cli import main


def test_deploy_with_an_rpc_url_without_a_scheme_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("DEPLOYER_KEY", "0x" + "11" * 32)
    rc = main(
        ["contracts", "deploy", "--rpc-url", "127.0.0.1:8545", "--key-env", "DEPLOYER_KEY",
         "--genesis-checkpoint", "0x" + "22" * 32, "--out", str(tmp_path / "d.json")]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2
    assert err.strip().splitlines() == [
        "tessera: error: ChainError: RPC URL '127.0.0.1:8545' must look like http://HOST:PORT or https://HOST/PATH"
    ]
    # checked before anything slow: the run file (torch, theta_0) is not even read
    rc = main(
        ["contracts", "deploy", "--rpc-url", "127.0.0.1:8545", "--key-env", "DEPLOYER_KEY",
         "--run-file", str(tmp_path / "missing-run.json"), "--out", str(tmp_path / "d.json")]
    )  # fmt: skip
    assert rc == 2 and "ChainError: RPC URL" in capsys.readouterr().err


def test_a_keystore_with_the_wrong_password_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ks = write_keystore(Account.create(), tmp_path / "miner.keystore.json", "right")
    with pytest.raises(
        SettingsError, match=r"^cannot decrypt keystore .*miner.keystore.json: wrong password\?$"
    ):
        resolve_private_key(key_env="K", keystore=ks, password_env="PW", env={"PW": "wrong"})
    with pytest.raises(SettingsError, match="cannot read keystore"):
        resolve_private_key(key_env="K", keystore=tmp_path / "none.json", password_env="PW", env={"PW": "x"})
    monkeypatch.setenv("TESSERA_KEYSTORE_PASSWORD", "wrong")
    rc = main(["miner", "run", "--keystore", str(ks), "--data-dir", str(tmp_path / "m")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].endswith("wrong password?"), err
