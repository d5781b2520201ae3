"""Traffic figures from a devnet run: ``python -m benchmarks.traffic_terms DIR [--out J]``.

Reads ``DIR/report.json`` (the devnet's report: every node's ledger per round) and ``DIR/deployment.json``
(the deployed audit rate q and committee size c), and prints, over the training rounds (the join round
left out), against the issue's targets:

- verification traffic: transcript states, residuals and checkpoint re-fetches (everything but the
  update fetches, the transcript digests and the fixed terms), measured and expected (``q c 160 / H``:
  an audit moves about 20 bytes per trained parameter, docs/decisions/traffic-budget.md), <= 0.02 bits
  per trained parameter per inner step;
- the whole network's per-parameter terms (updates, digests, verification) against
  ``(V + M - 1) x`` the update's wire bits ``+ 0.02``, and <= 0.05;
- each node's fixed terms (JSON-RPC, DHT, records), <= 200 kB per node and round;
- validator0's verification CPU over the miners' training CPU, <= 5%.

What it does not do: count bytes outside the processes (``benchmarks.traffic_outside`` does).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from protocol.rounds.auditspec import AUDIT_BYTES_PER_PARAM

VERIFICATION_KINDS = ("state", "residual", "checkpoint")
"""What only a check moves (a checkpoint re-fetch: a miner whose rebuilt theta differs)."""
PER_PARAM_KINDS = ("update", "transcript", *VERIFICATION_KINDS)
"""The terms that grow with the trained parameters."""
TARGETS = {"verification_bits": 0.02, "per_param_bits": 0.05, "fixed_kB_per_node": 200.0, "verify_pct": 5.0}


def _stats(xs: Sequence[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(xs), "min": min(xs), "max": max(xs)} if xs else {}


def _round_row(pr: dict[str, Any], v: int, m: int) -> dict[str, Any] | None:
    """One training round's figures (``None`` for the join round, which trains nothing)."""
    trained, steps = int(pr.get("trained_params", 0)), int(pr.get("inner_steps", 0))
    if pr.get("join_round") or not trained or not steps:
        return None
    kinds = pr.get("traffic_bytes", {})

    def bits(names: Sequence[str]) -> float:
        return 8.0 * sum(int(kinds.get(k, 0)) for k in names) / (trained * steps)

    miners = len(pr.get("miner_train_seconds", [])) or m
    # one miner's update on the wire over its own trained parameters (a round's updates are alike)
    update_wire = 8.0 * int(pr.get("update_bytes", 0)) / (trained * steps)
    by_node = pr.get("fixed_bytes_by_node") or {}
    fixed = {n: (sum(b.values()) if isinstance(b, dict) else b) / 1000 for n, b in by_node.items()}
    return {
        "round": pr["round"],
        "wall_seconds": pr.get("wall_seconds"),
        "verification_bits": bits(VERIFICATION_KINDS),
        "digest_bits": bits(("transcript",)),
        "update_fetch_bits": bits(("update",)),
        "per_param_bits": bits(PER_PARAM_KINDS),
        "update_wire_bits": update_wire,
        "per_param_bound": (v + miners - 1) * update_wire + TARGETS["verification_bits"],
        "fixed_kB_by_node": fixed,
        "fixed_bytes_by_node_kind": {n: b for n, b in by_node.items() if isinstance(b, dict)},
        "fixed_kB_max": max(fixed.values(), default=0.0),
        "verify_pct": pr.get("verification_cost_pct"),
        "recomputed_miners": pr.get("recomputed_miners", 0),
    }


def terms(report: dict[str, Any], audit_rate_bps: int, committee_size: int) -> dict[str, Any]:
    """The figures of one devnet report (pure: no I/O). ``audit_rate_bps`` and ``committee_size`` are the
    deployed q (basis points) and c."""
    cfg = report["config"]
    v, m = int(cfg["validators"]), int(cfg["miners"])
    rows = [row for pr in report["per_round"] if (row := _round_row(pr, v, m)) is not None]
    h = int(cfg.get("inner_steps", 60))
    q = audit_rate_bps / 10_000
    expected_audit = q * committee_size * AUDIT_BYTES_PER_PARAM * 8 / h
    digests = _stats([r["digest_bits"] for r in rows]).get("mean", 0.0)
    pct = [float(r["verify_pct"]) for r in rows if r["verify_pct"] is not None]
    fixed_all = [kb for r in rows for kb in r["fixed_kB_by_node"].values()]
    summary = {
        "training_rounds": len(rows),
        "audit_rate_bps": audit_rate_bps,
        "committee_size": committee_size,
        # validator0's verdicts only (a committee of one: the other validator's audits are not in them)
        "audited_pairs_validator0": sum(int(r["recomputed_miners"]) for r in rows),
        "rounds_with_audit_traffic": [r["round"] for r in rows if r["verification_bits"] > 0],
        "verification_bits": _stats([r["verification_bits"] for r in rows]),
        "expected_verification_bits": {
            "audits": expected_audit,
            "digests": digests,
            "total": expected_audit + digests,
        },
        "per_param_bits": _stats([r["per_param_bits"] for r in rows]),
        "per_param_bound": _stats([r["per_param_bound"] for r in rows]),
        # the rounds' non-verification terms plus the audits' expected bytes (a run of a few rounds at a
        # small q may see none)
        "per_param_expected": statistics.fmean([r["per_param_bits"] - r["verification_bits"] for r in rows])
        + expected_audit
        if rows
        else None,
        "fixed_kB_per_node_round": _stats(fixed_all),
        "fixed_kB_by_role_kind": _by_role_kind(rows),
        "rounds_with_a_node_over_200_kB": sum(
            1 for r in rows if r["fixed_kB_max"] > TARGETS["fixed_kB_per_node"]
        ),
        "verify_pct": _stats(pct),
        "verify_pct_after_first_round": _stats(pct[1:]),  # the first training round warms the caches
        "wall_seconds": _stats([float(r["wall_seconds"]) for r in rows if r["wall_seconds"] is not None]),
    }
    return {"rounds": rows, "summary": summary, "targets": TARGETS, "preset": cfg.get("preset"), "h": h}


def _by_role_kind(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Mean kB per node and round of each fixed kind, per role (a node's name less its number)."""
    sums: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        for node, kinds in r["fixed_bytes_by_node_kind"].items():
            role = node.rstrip("0123456789")
            for k, b in kinds.items():
                sums.setdefault(role, {}).setdefault(k, []).append(b / 1000)
    return {role: {k: statistics.fmean(v) for k, v in ks.items()} for role, ks in sorted(sums.items())}


def text(out: dict[str, Any]) -> str:
    """A line per training round, then the summary against the targets."""
    lines = [
        "round  wall s  verif bits  digests  updates  per-param (bound)  fixed kB/node (max)  verify %",
    ]
    for r in out["rounds"]:
        fixed = r["fixed_kB_by_node"]
        mean = statistics.fmean(fixed.values()) if fixed else 0.0
        lines.append(
            f"{r['round']:>5}  {r['wall_seconds'] or 0:6.0f}  {r['verification_bits']:10.4f}  {r['digest_bits']:7.4f}"
            f"  {r['update_fetch_bits']:7.4f}  {r['per_param_bits']:.4f} ({r['per_param_bound']:.4f})"
            f"  {mean:8.1f} ({r['fixed_kB_max']:6.1f})  {r['verify_pct']}"
        )
    s = out["summary"]
    exp = s["expected_verification_bits"]
    lines += [
        f"{s['training_rounds']} training rounds, q {s['audit_rate_bps']} bps, c {s['committee_size']},"
        f" audit traffic in rounds {s['rounds_with_audit_traffic'] or 'none'}"
        f" ({s['audited_pairs_validator0']} audits in validator0's verdicts)",
        f"verification bits: measured {_fmt(s['verification_bits'])}; expected q c 160 / H {exp['audits']:.4f}"
        f" + digests {exp['digests']:.4f} = {exp['total']:.4f} (target 0.02)",
        f"per-parameter terms: {_fmt(s['per_param_bits'])} against (V + M - 1) x update + 0.02 ="
        f" {_fmt(s['per_param_bound'])} (target 0.05); with the audits' expected bytes"
        f" {s['per_param_expected'] or 0:.4f}",
        f"fixed terms per node and round: {_fmt(s['fixed_kB_per_node_round'], 1)} kB (target 200);"
        f" rounds with a node over: {s['rounds_with_a_node_over_200_kB']}",
        *(
            f"  {role}: " + ", ".join(f"{k} {kb:.1f}" for k, kb in kinds.items()) + " kB per node and round"
            for role, kinds in s["fixed_kB_by_role_kind"].items()
        ),
        f"verification CPU / training CPU: {_fmt(s['verify_pct'], 2)} %, after the first training round"
        f" {_fmt(s['verify_pct_after_first_round'], 2)} % (target 5)",
    ]
    return "\n".join(lines)


def _fmt(st: dict[str, float], nd: int = 4) -> str:
    if not st:
        return "n/a"
    return f"mean {st['mean']:.{nd}f} ({st['min']:.{nd}f}-{st['max']:.{nd}f})"


def main(argv: Sequence[str] | None = None) -> int:
    """Print the figures of a devnet directory; with ``--out`` also write them as JSON."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("dir", type=Path, help="a devnet's work directory (report.json, deployment.json)")
    p.add_argument("--out", type=Path, help="write the figures here as JSON")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        report = json.loads((args.dir / "report.json").read_text())
        params = json.loads((args.dir / "deployment.json").read_text())["params"]
        rate, committee = int(params["audit_rate_bps"]), int(params["committee_size"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        p.error(f"{args.dir} is not a finished devnet's directory: {type(exc).__name__}: {exc}")
    out = terms(report, rate, committee)
    print(text(out))
    if args.out:
        args.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
