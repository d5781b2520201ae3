"""``tessera attest verify`` and ``tessera attest simulate``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from tessera.commands import attest
from tests.attestation.attest_support import VECTORS


def main(argv: list[str]) -> int:
    """Run only ``tessera attest`` (independent of the other commands being importable)."""
    parser = argparse.ArgumentParser(prog="tessera")
    attest.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return int(args.handler(args))


def test_verify_real_tdx_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    d = VECTORS / "intel-dcap"
    rc = main(
        ["attest", "verify", str(d / "tdx_quote"), "--collateral", str(d / "tdx_quote_collateral.json")]
        + ["--at", "2025-06-20T00:00:00Z", "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["accepted"] and out["verdict"]["tcb_status"] == "UpToDate"


def test_verify_refused_prints_reason_and_fields(capsys: pytest.CaptureFixture[str]) -> None:
    d = VECTORS / "intel-dcap"
    rc = main(
        ["attest", "verify", str(d / "tdx_quote"), "--collateral", str(d / "tdx_quote_collateral.json")]
        + ["--at", "2025-09-01T00:00:00Z"]
    )
    out = capsys.readouterr().out
    assert rc == 1
    assert "REFUSED" in out and "CollateralExpiredError" in out and "mrtd:" in out


def test_verify_nvidia_hex_text(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    d = VECTORS / "nvidia-h100"
    coll = tmp_path / "gpu.json"
    coll.write_text(
        json.dumps({"format": "nvidia-h100", "cert_chain": (d / "hopperCertChain.txt").read_text()})
    )
    rc = main(["attest", "verify", str(d / "hopperAttestationReport.txt"), "--collateral", str(coll)])
    assert rc == 0, capsys.readouterr().out


def test_simulate_then_verify(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    digest = "cd" * 32
    miner = "0x" + "12" * 20
    rc = main(
        ["attest", "simulate", "--digest", digest, "--round", "4", "--miner", miner, "--out", str(tmp_path)]
        + ["--at", "2026-01-01T00:00:00Z"]
    )
    assert rc == 0
    capsys.readouterr()
    args = [
        "attest",
        "verify",
        str(tmp_path / "evidence.bin"),
        "--collateral",
        str(tmp_path / "collateral.json"),
    ]
    args += ["--at", "2026-01-02T00:00:00Z"]
    binding = ["--chain-id", "31337", "--round", "4", "--miner", miner, "--digest", digest]
    assert main([*args, "--policy", str(tmp_path / "policy.json"), *binding]) == 0
    assert main(args + binding) == 1  # production policy: refused
    assert "BadChainError" in capsys.readouterr().out
    replay = ["--chain-id", "31337", "--round", "5", "--miner", miner, "--digest", digest]
    assert main([*args, "--policy", str(tmp_path / "policy.json"), *replay]) == 1
    assert "ReplayError" in capsys.readouterr().out


def test_bench_entry_point(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import attestation as bench

    ns = argparse.Namespace(out=str(tmp_path), extra=["--parse-runs", "5", "--verify-runs", "3"])
    assert bench.main(ns) == 0
    fig = json.loads((tmp_path / "bench-attestation.json").read_text())
    assert len(fig["formats"]) == 5 and fig["simulated_enclave"]["quote"]["median_us"] > 0
    assert "intel-tdx" in capsys.readouterr().out


def test_bad_arguments_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["attest", "verify", str(tmp_path / "missing.bin")]) == 2
    assert main(["attest", "simulate", "--digest", "zz", "--out", str(tmp_path)]) == 2
    d = VECTORS / "intel-dcap"
    assert main(["attest", "verify", str(d / "tdx_quote"), "--at", "not a time"]) == 2
    assert "error" in capsys.readouterr().err
