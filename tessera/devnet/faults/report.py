"""The entry point of ``tessera faults`` and its report: run the named scenarios one after another and
print what happened as a table."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from protocol.errors import ProtocolError
from tessera.devnet.faults.base import FaultsError
from tessera.devnet.faults.harness import Harness
from tessera.devnet.faults.scenarios import SCENARIOS
from tessera.errors import TesseraError


def run_faults(
    names: list[str],
    *,
    seed: int,
    rounds: int,
    workdir: Path,
    timeout: float = 900,
    miners: int = 3,
    inner_steps: int = 8,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the named scenarios one after another (each on a fresh devnet under ``workdir/NAME``) and
    write ``workdir/faults-report.json`` (the devnet's files under ``workdir/NAME/devnet``). Raises :class:`FaultsError` for an unknown name."""
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise FaultsError(f"unknown fault scenario(s) {unknown}; choose from {sorted(SCENARIOS)}")
    if rounds < 2:
        raise FaultsError("--rounds must be at least 2: the fault round and the round that must recover")
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    results: list[dict[str, Any]] = []
    for name in names:
        h = Harness(SCENARIOS[name], seed, rounds, workdir / name, say, timeout, miners, inner_steps)
        try:
            results.append(h.execute())
        except (TesseraError, ProtocolError) as exc:
            h.note(f"scenario failed to run: {type(exc).__name__}: {exc}")
            results.append({"scenario": name, "seed": seed, "ok": False, "error": f"{type(exc).__name__}: {exc}",
                            "events": h.run.events, "checks": [], "point": h.run.point,
                            "wall_seconds": round(time.time() - t0, 1)})  # fmt: skip
        r = results[-1]
        say(f"== {name}: {'PASS' if r['ok'] else 'FAIL'} in {r['wall_seconds']:.0f}s")
    report = {
        "seed": seed,
        "rounds": rounds,
        "scenarios": results,
        "ok": all(r["ok"] for r in results),
        "wall_seconds": round(time.time() - t0, 1),
    }
    (workdir / "faults-report.json").write_text(json.dumps(report, indent=1, sort_keys=True, default=str))
    return report


def table(report: dict[str, Any]) -> str:
    """The report as a plain-text table (one row per scenario, failed checks spelled out)."""
    rows = [("scenario", "injected at", "down", "recovered", "checks", "wall")]
    notes: list[str] = []
    for r in report["scenarios"]:
        checks = r.get("checks", [])
        rec = next((c["ok"] for c in checks if c["name"] == "recovered_within_one_round"), None)
        inj = r.get("injected") or {}
        rows.append(
            (
                r["scenario"],
                f"r{inj.get('round', '?')} {inj.get('point', r.get('point', '?'))}",
                f"{(r.get('restored') or {})['down_s']}s" if "down_s" in (r.get("restored") or {}) else "-",
                "-" if rec is None else "yes" if rec else "NO",
                f"{sum(c['ok'] for c in checks)}/{len(checks)}" + ("" if r["ok"] else " FAIL"),
                f"{r['wall_seconds']:.0f}s",
            )
        )
        if r.get("poison"):
            notes.append(f"  {r['scenario']}: {json.dumps(r['poison'], sort_keys=True)}")
        fig = r.get("figures")
        if fig and "rounds_lost" in fig:  # issue 27's scenarios
            slow = fig.get("slowest_honest_verification") or {}
            notes.append(
                f"  {r['scenario']}: rounds lost {fig['rounds_lost'] or 'none'}; slowest honest verification "
                f"{slow.get('seconds', '-')}s of a {slow.get('budget_s', '-')}s budget "
                f"({slow.get('who', '-')} in round {slow.get('round', '-')}, {slow.get('stage', '-')})"
            )
            for rr, w in (fig.get("certificate_waits") or {}).items():  # slow-certificate
                notes.append(
                    f"  {r['scenario']}: round {rr} certified {w['finalized_to_certified_s']}s after it was "
                    f"finalized (its certify transaction held {w['held_s']}s)"
                )
        elif fig:
            notes.append(
                f"  {r['scenario']}: rounds certified {fig['rounds_certified']}/{fig['rounds_run']}, "
                f"honest miners refused {fig['honest_refused']}, slashed {fig['slashed']}; "
                f"{fig['replayed_verdicts']}/{fig['verdicts']} verdicts replayed segments"
            )
            for k, d in fig.get("largest_honest_differences", {}).items():
                notes.append(
                    f"  {r['scenario']}: largest honest {k} {d['value']:.3g} (tolerance {d['tolerance']:g}; {d['where']})"
                )
            for node, platform in fig.get("node_platforms", {}).items():
                notes.append(f"  {r['scenario']}: {node}: {platform}")
        for c in checks:
            if not c["ok"]:
                notes.append(f"  {r['scenario']}: {c['name']}: {c['detail']}")
        if r.get("error"):
            notes.append(f"  {r['scenario']}: {r['error']}")
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join([*lines, *notes])
