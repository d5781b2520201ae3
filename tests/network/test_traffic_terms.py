"""Issue 26's traffic figures from a devnet report (benchmarks/traffic_terms.py) and each node's fixed terms
(protocol.node.traffic.fixed_bytes_by_node): a hand-built report whose answers are worked out below."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.traffic_terms import main, terms
from protocol.node.trafficsums import fixed_bytes_by_node

P, H = (
    1_000,
    10,
)  # trained parameters summed over the round's miners, inner steps: 8 bits = 0.0008 per param-step


def _entry(n: int) -> dict[str, int]:
    return {"sent": n, "received": 0, "sent_overhead": 0, "received_overhead": 0}


def test_fixed_terms_are_each_nodes_rpc_dht_and_records() -> None:
    ledgers = {
        "miner0": {"2": {"rpc": _entry(100), "dht": _entry(20), "update": _entry(5_000)}},
        "validator0": {"2": {"record": _entry(7), "state": _entry(9_000)}, "3": {"rpc": _entry(1)}},
    }
    assert fixed_bytes_by_node(ledgers) == {
        2: {"miner0": {"dht": 20, "rpc": 100}, "validator0": {"record": 7}},
        3: {"validator0": {"rpc": 1}},
    }


def _round(r: int, kinds: dict[str, int], fixed: dict[str, Any], *, join: bool = False) -> dict[str, Any]:
    return {
        "round": r,
        "join_round": join,
        "trained_params": 0 if join else P,
        "inner_steps": 0 if join else H,
        "traffic_bytes": kinds,
        "fixed_bytes_by_node": fixed,
        "update_bytes": 100,  # the round's updates together: 0.08 bits per trained param-step each
        "miner_train_seconds": [1.0, 1.0],
        "verification_cost_pct": 4.0 if r > 2 else 12.0,
        "wall_seconds": 60.0,
        "recomputed_miners": 1 if kinds.get("state") else 0,
    }


REPORT = {
    "config": {"validators": 2, "miners": 2, "inner_steps": H},
    "per_round": [
        _round(1, {"rpc": 10_000}, {"m": 10_000}, join=True),
        _round(2, {"update": 250, "transcript": 125}, {"m": 150_000, "v": 90_000}),
        _round(
            3,
            {"update": 250, "transcript": 125, "state": 1_250},
            {"m": 100_000, "v": {"rpc": 2e5, "dht": 1e5}},
        ),
    ],
}


def test_the_figures_of_a_report() -> None:
    out = terms(REPORT, audit_rate_bps=300, committee_size=1)
    s = out["summary"]
    assert [r["round"] for r in out["rounds"]] == [2, 3]  # the join round trained nothing
    assert s["verification_bits"] == {"mean": 0.5, "min": 0.0, "max": 1.0}  # 1,250 bytes x 8 / 10,000
    assert s["expected_verification_bits"]["audits"] == pytest.approx(0.03 * 160 / H)
    assert s["expected_verification_bits"]["digests"] == pytest.approx(0.1)
    assert s["per_param_bits"]["max"] == pytest.approx(1.3)  # updates 0.2 + digests 0.1 + states 1.0
    assert s["per_param_bound"]["mean"] == pytest.approx(3 * 0.08 + 0.02)  # (V + M - 1) x update + 0.02
    assert s["per_param_expected"] == pytest.approx(0.3 + 0.48)
    assert s["fixed_kB_per_node_round"] == {"mean": 160.0, "min": 90.0, "max": 300.0}
    assert s["rounds_with_a_node_over_200_kB"] == 1
    assert s["fixed_kB_by_role_kind"] == {
        "v": {"dht": 100.0, "rpc": 200.0}
    }  # kinds known where the report has them
    assert s["verify_pct"]["mean"] == 8.0 and s["verify_pct_after_first_round"]["mean"] == 4.0
    assert s["audited_pairs_validator0"] == 1 and s["rounds_with_audit_traffic"] == [3]


def test_the_command_reads_the_deployed_audit_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "report.json").write_text(json.dumps(REPORT))
    (tmp_path / "deployment.json").write_text(
        json.dumps({"params": {"audit_rate_bps": 40, "committee_size": 1}})
    )
    assert main([str(tmp_path), "--out", str(tmp_path / "terms.json")]) == 0
    assert "q 40 bps, c 1, audit traffic in rounds [3]" in capsys.readouterr().out
    assert json.loads((tmp_path / "terms.json").read_text())["summary"]["audit_rate_bps"] == 40


@pytest.mark.parametrize(
    "files", [{}, {"report.json": "{", "deployment.json": "{}"}, {"deployment.json": "[]"}]
)
def test_a_directory_without_a_finished_devnet_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], files: dict[str, str]
) -> None:
    (tmp_path / "report.json").write_text(json.dumps(REPORT))
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    if not files:
        (tmp_path / "report.json").unlink()
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path)])
    assert exc.value.code == 2
    assert "is not a finished devnet's directory" in capsys.readouterr().err
