"""The attack suite's report: a plain-text table, Markdown tables for docs/security.md, and the profit
model (``tessera.attack.economics``) set against the measured profit of each cheater."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from protocol.rounds import economics as ev
from protocol.rounds.audits import audit_draw
from tessera.attack import economics as ec
from tessera.attack import partial
from tessera.attack.results import HONEST_WORK, SLASH_FRACTION, ScenarioResult
from tessera.attack.scenarios import get


def table(results: Sequence[ScenarioResult]) -> str:
    """A plain-text table: one line per participant, then one per scenario's checks."""
    lines = [
        f"{'scenario':22} {'role':9} {'mode':20} {'stake':>6} {'reward':>9} {'cheating':>9} "
        f"{'slashed':>7} {'detected':>8}  stages"
    ]
    for res in results:
        for r in res.rows:
            lines.append(
                f"{res.name:22} {r.role:9} {r.label:20} {r.stake:6.0f} {r.reward:9.2f} {r.reward_cheating:9.2f} "
                f"{r.stake_slashed:7.1f} {r.detected_rounds:>4}/{r.rounds:<3}  {','.join(r.stages)}"
            )
        checks = " ".join(f"{k}={'PASS' if v else 'FAIL'}" for k, v in res.checks.items())
        lines.append(
            f"{'':22} -> honest share {res.honest_share:.4f}, held-out {res.heldout[-1] if res.heldout else 0:.4f}"
            f" ({res.heldout_rel_diff:+.2%} vs honest), {res.seconds:.0f}s  {checks}"
        )
    return "\n".join(lines)


#: Share of an honest round's compute each miner mode saves (the rest it spends; lazy modes are exact).
SAVED: dict[str, float] = {
    "free-rider": 1.0, "copier": 1.0, "commitment-copier": 1.0, "replayer": 1.0, "withholder": 1.0,
    "sybil": 1.0, "quote-replayer": 0.0, "poisoner": 0.0, "forger": 0.0, "lazy-other-data": 0.0,
    "lazy-33": 1 / 3, "lazy f=0.1": 0.1, "lazy f=0.5": 0.5, "hang-when-audited": 0.0, "drip-when-audited": 0.0,
    "withhold-when-audited": 0.0,
}  # fmt: skip


def _saved(label: str) -> float:
    return next((v for k, v in sorted(SAVED.items(), key=lambda kv: -len(kv[0])) if label.startswith(k)), 0.0)


def profit_rows(doc: dict[str, Any], segments: int = 3, checked: int = 1) -> list[dict[str, Any]]:
    """Expected (``tessera.attack.economics``) against measured profit per cheating round, per cheater of a
    report written by :func:`run_suite`: ``R`` = the honest miners' mean reward per round in that scenario,
    compute cost ``c = R / 2``, the cheater's stake, slash fraction :data:`SLASH_FRACTION`; measured profit
    = reward while cheating - compute spent - stake slashed. ``segments``/``checked``: the run's transcript
    segments per update and segments each auditor replays (the suite's tiny spec: 3; one per audit,
    ``VerifyPolicy.audit_segments``). One proof zeroes the round's pay whatever the median,
    so a lazy miner's reward is zeroed whenever any validator catches it; a miner withholding when audited
    is zeroed and slashed in the audited share ``q`` of its rounds."""
    out = []
    for res in doc["scenarios"]:
        if res["kind"] != "miner" or not res["rows"]:
            continue
        sc = get(res["name"])
        honest = [r for r in res["rows"] if r["role"] == "miner" and r["label"] == "honest"]
        weights = [int(r["stake"]) for r in res["rows"] if r["role"] == "validator"]
        reward = sum(r["reward"] for r in honest) / max(1, len(honest)) / max(1, res["rounds"])
        for r in res["rows"]:
            if r["role"] != "miner" or r["label"] in HONEST_WORK:
                continue
            n = max(1, r["rounds"] - sc.cheat_from + 1)
            saved = _saved(r["label"])
            if r["label"].startswith("lazy-33"):
                p = ec.p_detect_any(1 / 3, segments, checked, len(weights))
                st = ec.Strategy(r["label"], saved, p, p)
            elif sc.audit_checks in ("withhold-when-audited", "caught-when-audited"):
                q = sc.audit_params.get("audit_rate_bps", 10_000) / 10_000  # every audit catches it
                st = ec.Strategy(r["label"], saved, q, q)
            elif sc.audit_checks == "partial-faker":  # one replayed step lands on a fake with p = f
                p = sc.audit_params.get("audit_rate_bps", 10_000) / 10_000 * saved
                st = ec.Strategy(r["label"], saved, p, p)
            else:
                st = ec.deterministic_strategy(r["label"], saved, sc.provable)
            e = ec.Economy(reward, reward / 2, r["stake"], SLASH_FRACTION)
            measured = (r["reward_cheating"] - (1 - saved) * e.compute_cost * n - r["stake_slashed"]) / n
            out.append({
                "scenario": res["name"], "mode": r["label"], "rounds_cheating": n, "model_p_zero": st.p_zero,
                "refused": f"{min(r['detected_rounds'], n)}/{n}", "model_profit": st.expected_profit(e),
                "measured_profit": measured,
            })  # fmt: skip
    return out


def profit_markdown(doc: dict[str, Any]) -> str:
    """:func:`profit_rows` as a Markdown table."""
    lines = [
        "| scenario (mode) | rounds cheating | model P(reward zeroed) | measured (rounds refused) | "
        "model E[profit]/round | measured profit/round |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for p in profit_rows(doc):
        lines.append(
            f"| {p['scenario']} ({p['mode']}) | {p['rounds_cheating']} | {p['model_p_zero']:.3f} | {p['refused']} | "
            f"{p['model_profit']:.1f} | {p['measured_profit']:.1f} |"
        )
    return "\n".join(lines)


def ways_markdown(doc: dict[str, Any]) -> str:
    """Every way around an audit with its realized profit per round against an honest miner
    beside the model's expected profit (``tessera.attack.auditchecks.profit_vs_honest``), as Markdown;
    "" when the report has none."""
    rows = [(res["name"], r) for res in doc["scenarios"] for r in res.get("audit", {}).get("profit", [])]
    if not rows:
        return ""
    lines = [
        "| scenario | mode | rounds | q | honest pay/round | credited | forfeited | slashes | compute saved "
        "| realized profit/round vs honest | model E[profit]/round |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows:
        lines.append(
            f"| {name} | {r['label']} | {r['rounds']} | {r['q']:.2f} | {r['honest_pay_per_round']:.2f} | "
            f"{r['credited']:.2f} | {r['forfeited']:.2f} | {r['slashes']} | {r['saved']:.0%} | "
            f"{r['realized_profit_per_round']:.2f} | {r['model_expected_profit_per_round']:.2f} |"
        )
    return "\n".join(lines)


DEFAULT_DRAWS = 100_000
"""Random (seed, miner) pairs through the real audit draw for the default stake's measured q."""


def default_stake_rows(doc: dict[str, Any], draws: int = DEFAULT_DRAWS) -> dict[str, Any]:
    """Every way around an audit whose run says which audits caught it (``caught-when-audited``) at the
    default stake, from measured parts: ``q`` through the real ``audit_draw`` over ``draws`` random pairs
    at the deployed rate, the share of the run's audits that were confirmed (a proof or an unanswered
    report), and the model's gain, ``L`` and ``eta`` (``tessera.attack.partial.default_economics``):
    expected profit ``G - q eta catch L`` and its margin ``q eta catch L / G``."""
    e = partial.default_economics()
    bps = ev.audit_rate_bps(e)
    model = {row.name: row for row in ev.strategy_rows(e, bps / 10_000)}
    found = []
    for res in doc["scenarios"]:
        audit = res.get("audit", {})
        audited = [x for x in audit.get("rounds", {}).values() if x.get("audited")]
        profit = [p for p in audit.get("profit", []) if p.get("model_row") in model]
        if audited and "confirmed" in audited[0] and profit:
            found.append((res["name"], audited, profit))
    q = 0.0
    if found:  # the draws only when there is something to weigh
        q = sum(
            audit_draw(
                os.urandom(32), "0x" + os.urandom(20).hex(), e.validators, bps, e.committee_size
            ).audited
            for _ in range(draws)
        ) / max(1, draws)
    rows = []
    for name, audited, profit in found:
        catch = sum(bool(x["confirmed"]) for x in audited) / len(audited)
        for p in profit:
            gain = model[p["model_row"]].gain
            loss = q * e.committee_catch() * catch * e.loss_when_caught()
            rows.append({
                "scenario": name, "mode": p["label"], "audits": len(audited), "catch_per_audit": catch,
                "gain": gain, "expected_loss": loss, "expected_profit": gain - loss,
                "margin": loss / gain if gain else float("inf"), "model_margin": model[p["model_row"]].margin,
            })  # fmt: skip
    return {"stake": e.stake, "q_deployed": bps / 10_000, "q_measured": q, "draws": draws,
            "eta": e.committee_catch(), "loss_when_caught": e.loss_when_caught(), "rows": rows}  # fmt: skip


def default_stake_markdown(doc: dict[str, Any], draws: int = DEFAULT_DRAWS) -> str:
    """:func:`default_stake_rows` as Markdown ("" when no scenario of the report says which audits caught)."""
    d = default_stake_rows(doc, draws)
    if not d["rows"]:
        return ""
    lines = [
        f"default stake {d['stake']:g}: q deployed {d['q_deployed']:.4f}, measured {d['q_measured']:.5f} "
        f"({d['draws']} draws), eta {d['eta']:.3f}, L {d['loss_when_caught']:g}",
        "",
        "| scenario | mode | audits in the run | confirmed per audit | gain | expected loss | E[profit] | margin "
        "| model margin |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in d["rows"]:
        lines.append(
            f"| {r['scenario']} | {r['mode']} | {r['audits']} | {r['catch_per_audit']:.2f} | {r['gain']:.1f} | "
            f"{r['expected_loss']:.1f} | {r['expected_profit']:.1f} | {r['margin']:.2f} | {r['model_margin']:.2f} |"
        )
    return "\n".join(lines)


def markdown(doc: dict[str, Any]) -> str:
    """The report JSON (as written by :func:`run_suite`) as Markdown tables for docs/security.md."""
    out = [
        "| scenario | participant | stake | reward | reward while cheating | stake slashed | rounds detected | stages |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    summary = [
        "| scenario | honest miners' share | held-out loss (vs all-honest) | checks |",
        "|---|---:|---:|---|",
    ]
    for res in doc["scenarios"]:
        for r in res["rows"]:
            if res["name"] != "baseline" and r["label"] == "honest" and r["role"] == "miner":
                continue
            out.append(
                f"| {res['name']} | {r['role']} {r['label']} | {r['stake']:.0f} | {r['reward']:.2f} | "
                f"{r['reward_cheating']:.2f} | {r['stake_slashed']:.1f} | {r['detected_rounds']}/{r['rounds']} | "
                f"{', '.join(r['stages'])} |"
            )
        held = res["heldout"][-1] if res["heldout"] else float("nan")
        checks = ", ".join(f"{k} {'✓' if v else '✗'}" for k, v in res["checks"].items())
        summary.append(
            f"| {res['name']} | {res['honest_share']:.4f} | {held:.4f} ({res['heldout_rel_diff']:+.2%}) | {checks} |"
        )
    chain = doc.get("chain", "memory")
    head = [
        f"chain: **{chain}**" + (" (in-memory ledger, not a real chain)" if chain == "memory" else ""),
        "",
        "| scenario | cheater reward (while cheating) | cheater stake slashed | cheater rounds detected | "
        "honest miners' share | held-out loss vs honest |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for res in doc["scenarios"]:
        bad = [r for r in res["rows"] if r["label"] not in HONEST_WORK]
        det = f"{sum(r['detected_rounds'] for r in bad)}/{sum(r['rounds'] for r in bad)}" if bad else "-"
        held = res["heldout"][-1] if res["heldout"] else float("nan")
        live = "" if res["checks"].get("network_live", True) else " (stalled)"
        head.append(
            f"| {res['name']}{live} | {sum(r['reward_cheating'] for r in bad):.2f} | "
            f"{sum(r['stake_slashed'] for r in bad):.1f} | {det} | {res['honest_share']:.4f} | "
            f"{held:.4f} ({res['heldout_rel_diff']:+.2%}) |"
        )
    ways = "\n\n".join(x for x in (ways_markdown(doc), default_stake_markdown(doc)) if x)
    tail = "\n\n" + ways if ways else ""
    return "\n".join(head) + "\n\n" + "\n".join(summary) + "\n\n" + "\n".join(out) + tail
