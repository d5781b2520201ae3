"""The report of ``tessera attack --campaign`` (:mod:`tessera.attack.campaign`): its Markdown table and its
plot (PNG) of realized, measured-expected and model profit per strategy."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt


def markdown(doc: dict[str, Any]) -> str:
    """The campaign's figures as a Markdown table."""
    p = doc["params"]
    lines = [
        f"chain: **{doc['chain']}** (the contract's rules mirrored), {doc['rounds']} rounds, {doc['miners']} "
        f"miners ({doc['honest_miners']} honest), {doc['validators']} validators; q = {doc['q_run']:.4f} "
        f"(deployed for this network: {doc['q_deployed']:.4f}), c = {p['committee_size']}, K = "
        f"{p['vesting_rounds']}, stake {doc['economics_deployed']['stake']:g}, slash "
        f"{doc['economics_deployed']['slash_fraction']:.0%}; "
        f"honest pay R = {doc['honest_pay_per_round']:.2f}/round; {doc['audits']} audits, {doc['confirmed']} "
        "confirmed",
        "",
        "| strategy | identity-rounds | audits | confirmed | P(no audit) | realized/round | measured E at run q "
        "| measured E at deployed q | margin | model E at deployed q | model margin |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def f(x: Any, fmt: str = ".2f") -> str:
        return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)

    def margin(r: dict[str, Any]) -> str:
        # a dodger that trains honestly saves nothing: any expected loss is an infinite margin
        m, exp = r.get("measured_margin_deployed_q"), r.get("measured_profit_per_round_deployed_q")
        return "no gain" if m is None and exp is not None and exp < 0 else f(m)

    for r in doc["strategies"]:
        lines.append(
            f"| {r['strategy']} | {r['identity_rounds']} | {r['audits']} | {r['confirmed']} | {f(r['p_no_audit'], '.3f')} "
            f"| {r['realized_profit_per_round']:+.2f} | {f(r.get('measured_profit_per_round_run_q'), '+.2f')} "
            f"| {f(r.get('measured_profit_per_round_deployed_q'), '+.2f')} | {margin(r)} "
            f"| {r['model_profit_per_round_deployed_q']:+.2f} | {f(r['model_margin_deployed_q'])} |"
        )
    return "\n".join(lines)


def plot(doc: dict[str, Any], path: Path) -> Path:
    """A bar chart of each strategy's realized and expected profit per round against honest work (PNG)."""
    matplotlib.use("Agg")  # headless: a campaign runs on a server
    rows = doc["strategies"]
    names = [r["strategy"] for r in rows]
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(10, 4.5))
    w = 0.27
    ax.bar(
        [i - w for i in x],
        [r["realized_profit_per_round"] for r in rows],
        w,
        label=f"realized (q = {doc['q_run']:.4f})",
    )
    ax.bar(
        list(x), [r.get("measured_profit_per_round_deployed_q") or 0.0 for r in rows], w,
        label=f"measured E at deployed q = {doc['q_deployed']:.4f}",
    )  # fmt: skip
    ax.bar(
        [i + w for i in x],
        [r["model_profit_per_round_deployed_q"] for r in rows],
        w,
        label="model E at deployed q",
    )
    ax.axhline(0, color="black", lw=0.8)
    ax.set_yscale("symlog", linthresh=10)
    ax.set_xticks(list(x), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("tokens per round against an honest miner")
    ax.set_title(f"ways around an audit, {doc['rounds']} rounds, default stake (memory ledger)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
