"""The figures of ``tessera bench crossplatform``: the largest differences against each tolerance and
their margins, how the run was made (command, commit, CPU), and the printed table."""

from __future__ import annotations

import argparse
import platform
import subprocess
from pathlib import Path
from typing import Any

from benchmarks.crossplatform_settings import AVX512, METRICS, ROOT
from validator.stages import Stage


def fmt(x: float | None) -> str:
    """A difference as printed: ``n/a``, ``0`` or ``1.23e-07``."""
    if x is None:
        return "n/a"
    return "0" if x == 0 else f"{x:.2e}"


def margin(tol: float, diff: float | None) -> float | str | None:
    """tolerance / largest difference; ``"inf"`` when the difference is 0 (JSON has no infinity)."""
    if diff is None:
        return None
    return "inf" if diff == 0 else tol / diff


def command_line(args: argparse.Namespace) -> str:
    """The command that reproduces the run (defaults left out where they are)."""
    parts = ["tessera bench crossplatform", f"--settings {args.settings}", f"--specs {args.specs}"]
    parts.append(f"--modes {args.modes}")
    if args.steps:
        parts.append(f"--steps {args.steps}")
    parts += [f"--segments {args.segments}", f"--jobs {args.jobs}"]
    if args.device != "cpu":
        parts.append(f"--device {args.device}")
    if args.all_pairs:
        parts.append("--all-pairs")
    return " ".join(parts)


def largest(pairs: list[dict[str, Any]], tolerances: dict[str, float]) -> dict[str, Any]:
    """Per metric: its tolerance, the largest difference measured and where, the margin, and how many
    pairs measured it (and a nonzero difference)."""
    out: dict[str, Any] = {}
    for key, tol in tolerances.items():
        vals = [(p[key], p) for p in pairs if p.get(key) is not None]
        worst = max(vals, key=lambda t: t[0]) if vals else None
        out[key] = {
            "tolerance": tol,
            "largest": worst[0] if worst else None,
            "where": f"{worst[1]['trained']} -> {worst[1]['replayed']} ({worst[1]['case']})"
            if worst
            else None,
            "margin": margin(tol, worst[0] if worst else None),
            "nonzero": sum(1 for v, _ in vals if v > 0),
            "measured": len(vals),
        }
    return out


def commit() -> str | None:
    """The git commit the code ran at (``+dirty`` with uncommitted changes); None outside a checkout."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``, else what ``platform`` says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def default_tolerances() -> dict[str, float]:
    """Each metric's tolerance in the validator's default policy."""
    from validator.policy import VerifyPolicy

    policy = VerifyPolicy()
    return {
        "replay_param_rel_diff": policy.param_rel_tol,
        "replay_moment_rel_diff": policy.replay_rel_tol,
        "ef_rel_err": policy.ef_rel_tol,
        "ef_after_rel_err": policy.ef_rel_tol,
    }


def machine(flags: set[str]) -> dict[str, Any]:
    """The CPU, its vector flags, Python, torch and CUDA."""
    import torch

    return {
        "cpu": cpu_model(),
        "avx512": all(f in flags for f in AVX512),
        "flags": sorted(f for f in flags if f.startswith(("avx", "sse4", "fma"))),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.cuda.is_available(),
    }


def render(res: dict[str, Any]) -> str:
    """The printed figures: one row per (trained, replayed) pair (worst over the cases), then the margins."""
    lines = []
    groups = [g for g in res["groups"] if len(g) > 1]
    if groups:
        lines.append("bit-identical settings: " + "; ".join(" = ".join(g) for g in groups))
    lines.append(
        f"{'trained on':<14}{'replayed on':<14}{'params':>10}{'moments':>10}{'update':>10}{'residual':>10}"
    )
    by_pair: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for p in res["pairs"]:
        by_pair.setdefault((p["trained"], p["replayed"]), []).append(p)
    for (x, y), rows in by_pair.items():
        worst = [max((r[k] for r in rows if r.get(k) is not None), default=None) for k in METRICS]
        flag = "" if all(r["stage"] != Stage.RECOMPUTE for r in rows) else "  REFUSED"
        lines.append(f"{x:<14}{y:<14}" + "".join(f"{fmt(w):>10}" for w in worst) + flag)
    names = ("param_rel_tol", "replay_rel_tol", "ef_rel_tol (update)", "ef_rel_tol (residual)")
    for title, largest in [("all cases", res["largest"]), *sorted(res["largest_by_spec"].items())]:
        lines.append(f"\n{title}:")
        for k, name in zip(METRICS, names, strict=True):
            g = largest[k]
            mg = g["margin"]
            m = "n/a" if mg is None else ("inf (bit-identical)" if mg == "inf" else f"{mg:,.0f}x")
            where = f"  ({g['where']})" if g["largest"] else ""
            lines.append(
                f"  {name:<22} tolerance {g['tolerance']:.0e}  largest {fmt(g['largest']):>8}  margin {m}{where}"
            )
    if res["skipped"]:
        lines.append("\nnot measured: " + "; ".join(f"{n} ({why})" for n, why in res["skipped"].items()))
    for what, err in res["errors"].items():
        lines.append(f"FAILED {what}: {err[-200:]}")
    lines.append(f"honest updates refused: {res['refused_honest']} of {len(res['pairs'])}")
    return "\n".join(lines)
