"""The run file's audit section (issue 26 item 2): q, c, K and the slash come from ``run.json`` as the
economics compute them, and ``tessera contracts deploy --run-file`` deploys with them (a real anvil)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from web3 import Web3

from protocol.errors import ProtocolError
from protocol.rounds.anvil import Anvil
from protocol.rounds.auditspec import AuditSpec, AuditSpecError
from protocol.rounds.deployment import Deployment, NetworkParams
from protocol.rounds.economics import audit_rate
from protocol.runspec import RunSpec, RunSpecError
from tessera.commands import contracts as contracts_cmd
from tessera.errors import TesseraError
from tests.chain.chain_support import new_account

P = NetworkParams()


def derived(a: AuditSpec, stake: int = P.min_miner_stake) -> dict[str, int]:
    return a.network_params(stake, P.emission_per_round, P.validator_share_bps)


def test_the_audit_rate_follows_the_stake_and_the_committee() -> None:
    # the devnet's run (4 miners, 2 validators, committees of one) at a 100-token stake: eta = 2/3,
    # L = 50 + 2 x 200 = 450, q* = 2 x 200 / (2/3 x 450) = 1.33: no rate below 1 deters, every pair is audited
    devnet = AuditSpec(committee_size=1, miners=4, validators=2)
    small = 100 * 10**18
    assert audit_rate(devnet.economics(small, P.emission_per_round, P.validator_share_bps)) > 1
    assert derived(devnet, small) == {
        "audit_rate_bps": 10_000,
        "committee_size": 1,
        "vesting_rounds": 2,
        "slash_bps": 5_000,
    }
    # at the default stake (350,000): L = 175,000 + 400, q* = 400 / (2/3 x 175,400) = 0.342%, deployed at
    # 1.12 q* = 0.383%: 39 bps (margin 2.28), so the verification traffic 2.67 q c bits per trained
    # parameter per step is 0.0104 (issue 26's 0.02)
    assert P.min_miner_stake == 350_000 * 10**18 and derived(devnet)["audit_rate_bps"] == 39
    # every validator on the committee (eta = 1), 3 validators: docs/threat-model.md's q* = 0.889, x 1.12
    assert derived(AuditSpec(committee_size=0, validators=3), small)["audit_rate_bps"] == 9_956
    # a 100x stake audits about one pair in nine, and the rate falls with the stake
    rates = [derived(devnet, s * 10**18)["audit_rate_bps"] for s in (100, 1_000, 10_000, 100_000)]
    assert rates == sorted(rates, reverse=True) and rates[2] == 1_245


def test_the_section_round_trips_and_its_absence_keeps_the_digest() -> None:
    plain = RunSpec(audits=None)  # a run file written without the section
    assert "audits" not in plain.to_json() and RunSpec.from_json(plain.to_json()).audits is None
    assert RunSpec().audits == AuditSpec()  # the recipe's section is the default
    a = RunSpec(audits=AuditSpec(committee_size=2, compute_cost=12.5))
    assert RunSpec.from_json(a.to_json()) == a and a.digest() != plain.digest()
    assert "compute_cost" not in RunSpec(audits=AuditSpec()).to_json()["audits"]
    bad: object
    for bad in ({"committee": 1}, {"slash_bps": 20_000}, {"miners": 0}, {"compute_cost": -1}, []):
        with pytest.raises(RunSpecError, match="audits"):
            RunSpec.from_json(plain.to_json() | {"audits": bad})
    with pytest.raises(AuditSpecError):
        AuditSpec(vesting_rounds=True)  # type: ignore[arg-type]


def cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tessera")
    contracts_cmd.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except (ProtocolError, TesseraError) as exc:
        print(f"tessera: error: {type(exc).__name__}: {exc}")
        return 2


@pytest.mark.chain
def test_deploy_takes_the_audit_parameters_from_the_run_file(
    w3: Web3, anvil: Anvil, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployer = new_account(w3)
    monkeypatch.setenv("K", "0x" + bytes(deployer.key).hex())
    run = tmp_path / "run.json"
    RunSpec(audits=AuditSpec(committee_size=1, vesting_rounds=3, slash_bps=4_000)).save(run)
    out = tmp_path / "deployment.json"
    base = ["contracts", "deploy", "--rpc-url", anvil.rpc_url, "--key-env", "K", "--run-file", str(run)]
    # a 10,000-token minimum stake: the formula's q, not the contract's default q = 1
    assert cli([*base, "--out", str(out), "--min-miner-stake", str(10_000 * 10**18)]) == 0
    p = Deployment.load(out).params
    want = AuditSpec(committee_size=1, vesting_rounds=3, slash_bps=4_000).network_params(
        10_000 * 10**18, p.emission_per_round, p.validator_share_bps
    )
    assert 0 < want["audit_rate_bps"] < 10_000
    assert (p.audit_rate_bps, p.committee_size, p.vesting_rounds, p.slash_bps) == tuple(want.values())
    # a flag on the command line wins over the run file, and c, K or s given so enter the formula:
    # c = 2 of 2 validators (eta = 1) at stake 100, L = 40 + 3 x 200 = 640: q* = 400 / 640 = 0.625, x 1.12
    out2 = tmp_path / "deployment2.json"
    small = ["--min-miner-stake", str(100 * 10**18)]
    assert cli([*base, "--out", str(out2), "--committee-size", "2", *small]) == 0
    p2 = Deployment.load(out2).params
    assert (p2.committee_size, p2.vesting_rounds, p2.audit_rate_bps) == (2, 3, 7_000)
    out3 = tmp_path / "deployment3.json"
    assert cli([*base, "--out", str(out3), "--audit-rate-bps", "10000"]) == 0
    assert Deployment.load(out3).params.audit_rate_bps == 10_000
