"""``mixed-hardware``: no fault is injected; the devnet's node processes run under different CPU
instruction sets for torch's kernels (:func:`mixed_hardware_env`), and they must agree on every
checkpoint, refuse no honest miner and name the instruction set they ran under
(:func:`check_mixed_hardware`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from tessera.devnet.faults.base import FaultContext, Scenario
from tessera.devnet.faults.checks import Check, check_run, make_check
from tessera.devnet.network import Devnet
from validator.policy import VerifyPolicy
from validator.stages import Stage

#: Verdict metrics of the largest honest differences a validator measured (``validator.pipeline``).
REPLAY_METRICS = ("replay_param_rel_diff", "replay_moment_rel_diff", "ef_rel_err", "ef_after_rel_err")
AVX512_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq")
"""The CPU flags ATen's ``avx512`` kernels need (without them torch dies of an illegal instruction)."""


@dataclass
class MixedHardware(Scenario):
    """Nodes on different CPU instruction sets (ATen default/avx2/avx512, MKL/oneDNN caps) and no TEE
    evidence: every validator replays every update, so every honest replay crosses instruction sets."""

    name: str = "mixed-hardware"
    summary: str = (
        "nodes on different CPU instruction sets (ATen default/avx2/avx512, MKL/oneDNN caps); no fault"
    )
    target: str = "none"

    injects: ClassVar[bool] = False

    def set_up(self, net: Devnet, seed: int) -> None:
        """Each node's instruction set (:func:`mixed_hardware_env`); no TEE evidence (an attested update is
        replayed only in a share of rounds)."""
        net.cfg.node_env = mixed_hardware_env(net.cfg.validators, net.cfg.miners, cpu_flags())
        net.cfg.tee = "none"

    def checks(self, ctx: FaultContext) -> tuple[list[Check], dict[str, Any]]:
        """:func:`check_mixed_hardware` and its figures."""
        return check_mixed_hardware(ctx.net, self, ctx.fault_round, ctx.last_round)


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU's feature flags (empty if ``/proc/cpuinfo`` cannot be read)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def mixed_hardware_env(validators: int, miners: int, flags: set[str]) -> dict[str, dict[str, str]]:
    """Each node's instruction-set environment for ``mixed-hardware``.

    validator0 runs the oldest x86-64 setting (ATen ``default``: no SIMD kernels; MKL capped at SSE4.2,
    oneDNN at SSE4.1), validator1 the best this CPU has (no caps), further validators alternate; miners
    cycle through ATen ``default``, ``avx2`` with MKL and oneDNN capped at AVX2, and ``avx512`` with MKL
    at AVX-512 where ``flags`` has :data:`AVX512_FLAGS` (else ATen ``default`` with MKL and oneDNN capped
    at AVX)."""
    avx512 = all(f in flags for f in AVX512_FLAGS)
    best = "avx512" if avx512 else "avx2" if "avx2" in flags else "default"
    oldest = {
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
    }
    vsettings = [oldest, {"ATEN_CPU_CAPABILITY": best}]
    msettings: list[dict[str, str]] = [{"ATEN_CPU_CAPABILITY": "default"}]
    if "avx2" in flags:
        msettings.append(
            {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
        )
    if avx512:
        msettings.append(
            {
                "ATEN_CPU_CAPABILITY": "avx512",
                "MKL_ENABLE_INSTRUCTIONS": "AVX512",
                "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
            }
        )
    else:
        msettings.append(
            {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "AVX", "ONEDNN_MAX_CPU_ISA": "AVX"}
        )
    env = {f"validator{i}": dict(vsettings[i % len(vsettings)]) for i in range(validators)}
    env.update({f"miner{i}": dict(msettings[i % len(msettings)]) for i in range(miners)})
    return env


def setting_text(env: dict[str, str]) -> str:
    """``ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ...`` (or ``machine default``)."""
    return " ".join(f"{k}={v}" for k, v in sorted(env.items())) or "machine default"


def validator_names(net: Devnet) -> list[str]:
    """The devnet's validators' node names, sorted."""
    return sorted(n for n, node in net.nodes.items() if node.role == "validator")


def merged_digests(net: Devnet, round: int, node_env: dict[str, dict[str, str]]) -> list[str]:
    """Each validator's merged theta_{r+1} digest and whether it signed it, for a report line; the first
    line says whether they differ."""
    got: dict[str, str | None] = {}
    lines = []
    for v in validator_names(net):
        summary = {int(x.get("round", -1)): x for x in (net.get(v, "/rounds") or []) if isinstance(x, dict)}
        digest = (summary.get(round) or {}).get("checkpoint")
        got[v] = digest
        signed = net.get(v, f"/signatures/{round}") is not None
        what = f"merged {digest}" if digest else "has not merged"
        lines.append(f"{v} ({setting_text(node_env.get(v, {}))}) {what}{', signed' if signed else ''}")
    digests = {d for d in got.values() if d}
    head = (
        "validators' checkpoint digests differ"
        if len(digests) > 1
        else "validators' checkpoint digests agree"
        if len(digests) == 1 and all(got.values())
        else "not every validator merged"
    )
    return [head + ": " + "; ".join(lines)]


def check_mixed_hardware(
    net: Devnet, sc: Scenario, first: int, last: int
) -> tuple[list[Check], dict[str, Any]]:
    """The checks of ``mixed-hardware`` and its figures: the money checks of :func:`check_run` (nothing
    paid twice, payouts as settled, every miner and validator paid every round, nobody slashed), then
    every round certified, the validators' merged digests equal, no honest verdict other than ``ok``, and
    every node's log naming the instruction set it ran under."""
    rounds = list(range(first, last + 1))
    checks = [
        c
        for c in check_run(net, sc, first, last)
        if c["name"] not in ("recovered_within_one_round", "logs_say_what_happened")
    ]
    certified = [r for r in rounds if net.chain.checkpoint(r + 1) != b"\0" * 32]
    checks.append(every_round_certified(net, rounds, certified))
    checks.append(validators_merged_the_same_digest(net, rounds))
    tally = tally_verdicts(net, rounds)
    checks.append(honest_miners_refused_0(tally))
    platforms, wrong = node_platforms(net)
    checks.append(
        make_check(
            "nodes_ran_under_their_setting",
            not wrong,
            "; ".join(wrong) or "; ".join(f"{k}: {v}" for k, v in platforms.items()),
        )
    )
    return checks, _figures(net, rounds, certified, tally, platforms)


def every_round_certified(net: Devnet, rounds: list[int], certified: list[int]) -> Check:
    """Every round's checkpoint certified; for each one that is not, each validator's merged digest."""
    missing = [r for r in rounds if r not in certified]
    detail = f"rounds certified / rounds run: {len(certified)}/{len(rounds)}"
    for r in missing:
        detail += f"; round {r} not certified: " + "; ".join(merged_digests(net, r, net.cfg.node_env))
    return make_check("every_round_certified", not missing, detail)


def validators_merged_the_same_digest(net: Devnet, rounds: list[int]) -> Check:
    """Every validator merged the same checkpoint in every round."""
    differ = []
    agreed = []
    for r in rounds:
        line = merged_digests(net, r, net.cfg.node_env)[0]
        if not line.startswith("validators' checkpoint digests agree"):
            differ.append(f"round {r}: {line}")
        else:
            summary = net.get(validator_names(net)[0], "/rounds") or []
            agreed.append(next((str(x.get("checkpoint"))[:18] for x in summary if x.get("round") == r), "?"))
    return make_check(
        "validators_merged_the_same_digest",
        not differ,
        "; ".join(differ) or f"rounds {rounds}: every validator merged the same digest ({', '.join(agreed)})",
    )


@dataclass
class VerdictTally:
    """What the validators' verdicts on the committed (all honest) updates say."""

    refused: list[str] = field(default_factory=list)
    """One line per missing verdict or verdict other than ``ok``."""
    judged: int = 0
    replayed: int = 0
    """Verdicts with a segment replay."""
    worst: dict[str, tuple[float, str]] = field(default_factory=dict)
    """Per :data:`REPLAY_METRICS` name: the largest value seen and where."""


def tally_verdicts(net: Devnet, rounds: list[int]) -> VerdictTally:
    """Every validator's verdict on every committed update of ``rounds``."""
    names = {n.address.lower(): name for name, n in net.nodes.items()}
    env = net.cfg.node_env
    tally = VerdictTally()
    for r in rounds:
        committed = [e.miner for e in net.chain.committed_miners(r)]
        for v in validator_names(net):
            verdicts = {k.lower(): x for k, x in (net.get(v, f"/verdicts/{r}") or {}).items()}
            for m in committed:
                who = names.get(m.lower(), m)
                vd = verdicts.get(m.lower())
                if vd is None:
                    tally.refused.append(f"{who} has no verdict of {v} in round {r}")
                    continue
                _count_verdict(tally, vd, f"{who} by {v} in round {r}")
                if vd.get("stage") != Stage.OK:
                    tally.refused.append(
                        f"{who} ({setting_text(env.get(who, {}))}) refused at stage {vd.get('stage')} by {v} "
                        f"({setting_text(env.get(v, {}))}) in round {r}: {str(vd.get('reason'))[:200]}"
                    )
    return tally


def _count_verdict(tally: VerdictTally, vd: dict[str, Any], where: str) -> None:
    """Count one verdict and keep its replay differences where they are the largest so far."""
    tally.judged += 1
    metrics = vd.get("metrics") or {}
    tally.replayed += bool(metrics.get("replayed_steps"))
    for k in REPLAY_METRICS:
        x = metrics.get(k)
        if isinstance(x, int | float) and x >= tally.worst.get(k, (-1.0, ""))[0]:
            tally.worst[k] = (float(x), where)


def honest_miners_refused_0(tally: VerdictTally) -> Check:
    """No honest miner without a verdict or refused."""
    return make_check(
        "honest_miners_refused_0",
        not tally.refused,
        "; ".join(tally.refused)
        or f"honest miners refused: 0 ({tally.judged} verdicts, all ok, {tally.replayed} with a segment replay)",
    )


def node_platforms(net: Devnet) -> tuple[dict[str, str], list[str]]:
    """Each node's platform as its log names it (torch version, CPU capability, caps), and where that
    differs from the setting it was given."""
    env = net.cfg.node_env
    platforms: dict[str, str] = {}
    wrong = []
    for name, n in sorted(net.nodes.items()):
        text = n.log_path.read_text(errors="replace") if n.log_path.exists() else ""
        m = re.search(r"\((torch [^)]*CPU capability (\w+)[^)]*)\)", text)
        platforms[name] = m.group(1) if m else "not logged"
        want = env.get(name, {})
        if m is None:
            wrong.append(f"{name}: no CPU capability line in its log")
            continue
        if "ATEN_CPU_CAPABILITY" in want and m.group(2).lower() != want["ATEN_CPU_CAPABILITY"].lower():
            wrong.append(f"{name}: ran under {m.group(2)}, set {want['ATEN_CPU_CAPABILITY']}")
        for k in ("MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA"):
            if k in want and f"{k}={want[k]}" not in m.group(1):
                wrong.append(f"{name}: {k} not {want[k]}")
    return platforms, wrong


def _figures(
    net: Devnet, rounds: list[int], certified: list[int], tally: VerdictTally, platforms: dict[str, str]
) -> dict[str, Any]:
    """The scenario's figures for the report, the largest honest differences beside their tolerances."""
    tolerances = {
        "replay_param_rel_diff": VerifyPolicy.param_rel_tol,
        "replay_moment_rel_diff": VerifyPolicy.replay_rel_tol,
        "ef_rel_err": VerifyPolicy.ef_rel_tol,
        "ef_after_rel_err": VerifyPolicy.ef_rel_tol,
    }
    return {
        "rounds_run": len(rounds),
        "rounds_certified": len(certified),
        "honest_refused": len(tally.refused),
        "slashed": len(net.chain.events("Slashed")),
        "verdicts": tally.judged,
        "replayed_verdicts": tally.replayed,
        "largest_honest_differences": {
            k: {"value": x, "where": where, "tolerance": tolerances[k]}
            for k, (x, where) in sorted(tally.worst.items())
        },
        "node_platforms": platforms,
    }
