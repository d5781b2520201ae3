"""``tessera faults mixed-hardware``: who runs under which instruction set, and what its checks report.

The scenario itself runs real processes (``tessera faults mixed-hardware``, minutes); here its node
settings and its checks are exercised on a stub devnet, so that a failure names its cause: the
validators' differing digests, the miner refused and the stage, the node that ran under another setting.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tessera.devnet.faults import (
    AVX512_FLAGS,
    SCENARIOS,
    check_mixed_hardware,
    mixed_hardware_env,
    setting_text,
)

AVX2 = {"sse4_2", "avx", "avx2", "fma"}


def test_avx512_only_where_the_cpu_has_all_four_flags() -> None:
    for flags in (AVX2, AVX2 | {"avx512f"}, AVX2 | set(AVX512_FLAGS[:3])):
        env = mixed_hardware_env(2, 4, flags)
        assert all(e.get("ATEN_CPU_CAPABILITY") != "avx512" for e in env.values()), flags
        assert all("AVX512" not in e.get("MKL_ENABLE_INSTRUCTIONS", "") for e in env.values())
    env = mixed_hardware_env(2, 3, AVX2 | set(AVX512_FLAGS))
    assert env["validator1"] == {"ATEN_CPU_CAPABILITY": "avx512"}
    assert env["miner2"]["ATEN_CPU_CAPABILITY"] == "avx512"


def test_settings_differ_between_validators_and_cover_the_caps() -> None:
    env = mixed_hardware_env(2, 3, AVX2)
    assert set(env) == {"validator0", "validator1", "miner0", "miner1", "miner2"}
    assert env["validator0"]["ATEN_CPU_CAPABILITY"] == "default"
    assert env["validator1"]["ATEN_CPU_CAPABILITY"] == "avx2"
    assert {e["ATEN_CPU_CAPABILITY"] for n, e in env.items() if n.startswith("miner")} == {"default", "avx2"}
    assert any("MKL_ENABLE_INSTRUCTIONS" in e for e in env.values())
    assert any("ONEDNN_MAX_CPU_ISA" in e for e in env.values())
    assert setting_text({}) == "machine default"


class _Chain:
    def __init__(self, miners: list[str]) -> None:
        self.miners = miners

    def params(self) -> Any:
        return SimpleNamespace(validator_share_bps=1000)

    def events(self, name: str, **_: Any) -> list[Any]:
        return []

    def committed_miners(self, r: int) -> list[Any]:
        return [SimpleNamespace(miner=m) for m in self.miners]

    def revealed_scores(self, r: int) -> list[Any]:
        return []

    def checkpoint(self, r: int) -> bytes:
        return b"\x01" * 32 if r <= 2 else b"\0" * 32  # theta_3 (after round 2) never certified


def _net(tmp: Path) -> Any:
    env = mixed_hardware_env(2, 3, AVX2)
    nodes = {}
    for i, name in enumerate(["validator0", "validator1", "miner0", "miner1", "miner2"]):
        log = tmp / f"{name}.log"
        cap = "AVX2" if name in ("validator1", "miner1", "miner2") else "DEFAULT"  # miner2 was set to default
        caps = " ".join(f"{k}={v}" for k, v in env[name].items() if k != "ATEN_CPU_CAPABILITY")
        log.write_text(f"torch warm-up took 1.00s (torch 2.13.0+cpu, CPU capability {cap}, {caps})\n")
        role = "validator" if name.startswith("validator") else "miner"
        nodes[name] = SimpleNamespace(address="0x" + f"{i + 1:040x}", role=role, log_path=log)
    miners = [nodes[f"miner{i}"].address for i in range(3)]
    ok = {
        "stage": "ok",
        "reason": "accepted",
        "metrics": {"replayed_steps": 2, "replay_param_rel_diff": 1e-7},
    }
    refused = {
        "stage": "recompute",
        "reason": "segment 3: replayed params differ (rel 2.1e-03 > 1e-04)",
        "metrics": {"replayed_steps": 1, "replay_param_rel_diff": 2.1e-3},
    }
    answers = {
        ("validator0", "/rounds"): [{"round": 2, "checkpoint": "0x" + "aa" * 32}],
        ("validator1", "/rounds"): [{"round": 2, "checkpoint": "0x" + "bb" * 32}],
        ("validator0", "/signatures/2"): {"digest": "0x" + "aa" * 32},
        ("validator1", "/signatures/2"): {"digest": "0x" + "bb" * 32},
        ("validator0", "/verdicts/2"): {miners[0]: ok, miners[1]: ok, miners[2]: refused},
        ("validator1", "/verdicts/2"): {miners[0]: ok, miners[1]: ok, miners[2]: ok},
    }
    return SimpleNamespace(
        chain=_Chain(miners),
        nodes=nodes,
        cfg=SimpleNamespace(node_env=env),
        get=lambda name, path: answers.get((name, path)),
    )


def test_checks_name_what_broke(tmp_path: Path) -> None:
    checks, figures = check_mixed_hardware(_net(tmp_path), SCENARIOS["mixed-hardware"], 2, 2)
    by = {c["name"]: c for c in checks}
    assert not by["every_round_certified"]["ok"]
    assert "rounds certified / rounds run: 0/1" in by["every_round_certified"]["detail"]
    d = by["validators_merged_the_same_digest"]["detail"]
    assert not by["validators_merged_the_same_digest"]["ok"]
    assert "validators' checkpoint digests differ" in d and "0x" + "aa" * 32 in d and "0x" + "bb" * 32 in d
    assert "validator0 (ATEN_CPU_CAPABILITY=default" in d
    r = by["honest_miners_refused_0"]
    assert (
        not r["ok"] and "miner2" in r["detail"] and "refused at stage recompute by validator0" in r["detail"]
    )
    assert "rel 2.1e-03" in r["detail"]
    s = by["nodes_ran_under_their_setting"]
    assert not s["ok"] and "miner2: ran under AVX2, set default" in s["detail"]
    assert by["nobody_slashed"]["ok"]
    assert figures["rounds_certified"] == 0 and figures["rounds_run"] == 1 and figures["honest_refused"] == 1
    worst = figures["largest_honest_differences"]["replay_param_rel_diff"]
    assert worst["value"] == 2.1e-3 and "miner2 by validator0 in round 2" in worst["where"]
