"""``tessera faults kill-chain`` end to end: kill -9 of anvil in a training round, restart from its last dump.

Real anvil, contracts, DHT and node processes (``tessera.devnet``). The chain process is SIGKILLed at a
phase drawn from the named seed, stays down for a few seconds and comes back from its last periodic state
dump, so the blocks mined since are gone (a reorg to the nodes). The nodes ride out the dead RPC, re-send
what the chain lost, and the checks hold: nothing paid twice, payouts equal the settlement of the revealed
scores, every participant paid in both rounds, the round after the fault finalized and certified, nobody
slashed, and the node logs name the outage.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.devnet.faults import run_faults, table

pytestmark = [pytest.mark.e2e, pytest.mark.chain, pytest.mark.timeout(600)]

SEED = 6
"""The fault's seed (phase, offset in the phase, downtime); printed by the harness."""


def test_kill_chain_recovers_and_pays_everyone_once(tmp_path: Path) -> None:
    report = run_faults(["kill-chain"], seed=SEED, rounds=2, workdir=tmp_path, miners=2, inner_steps=4)
    print(table(report))
    (sc,) = report["scenarios"]
    assert "error" not in sc, sc.get("error")
    assert sc["injected"]["round"] == 2 and sc["restored"]["down_s"] > 0
    checks = {c["name"]: c for c in sc["checks"]}
    assert set(checks) == {
        "nothing_paid_twice",
        "payouts_match_consensus",
        "honest_paid_every_round",
        "recovered_within_one_round",
        "nobody_slashed",
        "logs_say_what_happened",
    }
    failed = {n: c["detail"] for n, c in checks.items() if not c["ok"]}
    assert not failed, failed
    assert (tmp_path / "faults-report.json").exists()
