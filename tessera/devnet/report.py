"""The devnet's report: per round, the held-out loss before and after the merge, rewards per miner (from the
chain's events), every node's ledger by kind and in bits per trained parameter per inner step,
each node's fixed terms, verification cost against the miners' training compute and the wall
time; ``report.json`` and the plots in ``report.png``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt

from protocol.node.traffic import Kind
from protocol.node.trafficsums import bits_per_param_step, fixed_bytes_by_node, kind_totals, merge_ledgers
from protocol.runspec import RunSpec
from tessera.devnet.network import Devnet
from tessera.devnet.payouts import chain_payouts


def build_report(
    net: Devnet, rounds: int, t0: float, t_started: float, marks: dict[int, float]
) -> dict[str, Any]:
    """Collect the figures from the nodes' APIs and the chain (every ledger whole: what netns-bytes meets)."""
    vsum = {r["round"]: r for r in (net.get("validator0", "/rounds") or [])}
    miners = {n.address: name for name, n in net.nodes.items() if n.role == "miner"}
    mrec: dict[str, dict[str, Any]] = {name: net.get(name, "/rounds") or {} for name in miners.values()}
    verdicts = {r: net.get("validator0", f"/verdicts/{r}") or {} for r in range(1, rounds + 1)}
    # every validator's replays: with committees of one, an audit falls to one validator, often not validator0
    others = [n for n, node in net.nodes.items() if node.role == "validator" and n != "validator0"]
    every = {r: [verdicts[r], *(net.get(n, f"/verdicts/{r}") or {} for n in others)] for r in verdicts}
    ledgers = {name: net.get(name, "/traffic") or {} for name in net.nodes}
    traffic, fixed = merge_ledgers(ledgers.values()), fixed_bytes_by_node(ledgers)
    # each node's whole bandwidth (served, fetched and posted, RPC, DHT): what an operator's link carries
    whole = {name: net.get(name, "/traffic/node") or {} for name in net.nodes}
    per_round = []
    prev_mark = t_started
    for r in range(1, rounds + 1):
        wall = marks.get(r, time.time()) - prev_mark
        prev_mark = marks.get(r, time.time())
        v = vsum.get(r, {})
        present = [m[str(r)] for m in mrec.values() if str(r) in m]
        figures = _round_figures(v, verdicts.get(r, {}), present, miners, wall)
        figures |= chain_payouts(net.chain, r, miners)  # what the chain paid, not a node's view of it
        certified = net.chain.checkpoint(r + 1) != b"\0" * 32
        traffic_r = traffic_figures(traffic.get(r, {}), [m.get(str(r), {}) for m in mrec.values()])
        per_round.append(
            {"round": r, "join_round": r == 1 and not v.get("consensus")}
            | figures
            | {"certified": certified, "fixed_bytes_by_node": fixed.get(r, {}), **traffic_r}
            | {"node_bytes_by_node": {n: w[str(r)] for n, w in whole.items() if str(r) in w}}
            | round_replays(every.get(r, []))
        )
    totals: dict[str, int] = {}
    for pr in per_round:
        for m, w in pr["rewards_wei"].items():
            totals[m] = totals.get(m, 0) + w
    return {
        # the driver's flags, with H and the batch as the run file fixed them (None in the flags: the recipe's)
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(net.cfg).items()}
        | _run_shape(net.run_path),
        "phases": net.phases.to_json() if net.phases is not None else {},
        "streams": net.streams,
        "rounds": rounds,
        "wall_seconds_total": round(time.time() - t0, 2),
        "wall_seconds_startup": round(t_started - t0, 2),
        "per_round": per_round,
        "rewards_total_wei": totals,
        "traffic_ledger_bytes_all_rounds": sum(sum(k.values()) for k in traffic.values()),
        "traffic_ledger_bytes_by_kind": kind_totals(traffic),
        "node_bytes_total": {
            n: {d: sum(int(row.get(d, 0)) for row in w.values()) for d in ("sent", "received")}
            for n, w in whole.items()
        },
        "driver_rpc_bytes": _driver_bytes(net).get(Kind.RPC.value, 0),
        "driver_dht_bytes": _driver_bytes(net).get(Kind.DHT.value, 0),
    } | _refusals(net)


def round_replays(by_validator: list[dict[str, Any]]) -> dict[str, int]:
    """A round's replays by every validator: steps replayed and (validator, miner) pairs replayed."""
    steps = [int(x.get("metrics", {}).get("replayed_steps", 0)) for ver in by_validator for x in ver.values()]
    return {
        "replayed_steps_all_validators": sum(steps),
        "replayed_pairs_all_validators": sum(map(bool, steps)),
    }


def _run_shape(run_path: Path) -> dict[str, int]:
    """H and the batch of the run file the nodes ran."""
    spec = RunSpec.load(run_path)
    return {"inner_steps": spec.inner.steps, "batch_size": spec.inner.batch_size}


def _refusals(net: Devnet) -> dict[str, dict[str, Any]]:
    """Each node's refused DHT records: what its lookups threw out, and what its DHT refused (stores too)."""
    statuses = {name: net.get(name, "/status") or {} for name in net.nodes}
    return {
        k: {n: s.get(k) for n, s in statuses.items()} for k in ("dht_refused_records", "dht_refused_at_node")
    }


def _driver_bytes(net: Devnet) -> dict[str, int]:
    return kind_totals(merge_ledgers([net.driver_traffic.to_json()] if net.driver_traffic else []))


def _round_figures(
    v: dict[str, Any],
    ver: dict[str, Any],
    present: list[dict[str, Any]],
    miners: dict[str, str],
    wall: float,
) -> dict[str, Any]:
    """A round's figures in the report from validator0's round summary ``v`` and verdicts ``ver`` and the
    round records of the miners that have one (``present``; ``miners``: address -> node name), ``wall``
    seconds long; :func:`build_report` adds the round, whether it was certified and its traffic."""
    upd_bytes = sum(int(m.get("update_bytes", 0)) for m in present)
    train_s = [float(m.get("train_seconds", 0.0)) for m in present]
    replay_s = sum(float(x.get("metrics", {}).get("replay_seconds", 0.0)) for x in ver.values())
    eval_s = sum(float(x.get("metrics", {}).get("eval_seconds", 0.0)) for x in ver.values())
    replayed = sum(int(x.get("metrics", {}).get("replayed_steps", 0)) for x in ver.values())
    total_train = sum(train_s)
    # the budget's figure: validator0's CPU seconds verifying these miners (every stage) over the miners'
    # CPU seconds training, both thread CPU time, so a loaded machine's waits count on neither side
    verify_cpu = sum(float(x.get("metrics", {}).get("verify_cpu_seconds", 0.0)) for x in ver.values())
    replay_cpu = sum(float(x.get("metrics", {}).get("replay_cpu_seconds", 0.0)) for x in ver.values())
    train_cpu = sum(float(m.get("train_cpu_seconds", 0.0)) for m in present)
    return {
        "heldout_before": v.get("heldout_before"),
        "heldout_after": v.get("heldout_after"),
        "consensus": {miners.get(a, a): s for a, s in v.get("consensus", {}).items()},
        "rewards_wei": {miners.get(a, a): int(x) for a, x in v.get("rewards", {}).items() if a in miners},
        "validator_rewards_wei": {a: int(x) for a, x in v.get("rewards", {}).items() if a not in miners},
        "stages": {miners.get(a, a): s for a, s in v.get("stages", {}).items()},
        "update_bytes": upd_bytes,
        "miner_train_seconds": train_s,
        "validator_replay_seconds": replay_s,
        "validator_eval_seconds": eval_s,
        "replayed_steps": replayed,
        "attested_miners": sum(1 for x in ver.values() if x.get("attested")),
        "recomputed_miners": sum(1 for x in ver.values() if x.get("metrics", {}).get("replayed_steps")),
        "verification_cost_pct": round(100 * verify_cpu / train_cpu, 3) if train_cpu else None,
        "validator_verify_cpu_seconds": round(verify_cpu, 4),
        "miner_train_cpu_seconds": round(train_cpu, 4),
        "verification_wall_pct": round(100 * (replay_s + eval_s) / total_train, 3) if total_train else None,
        "recompute_cost_pct": round(100 * replay_cpu / train_cpu, 3) if train_cpu else None,
        "wall_seconds": round(wall, 3),
        "outside_training_pct": round(100 * (1 - max(train_s) / wall), 2) if train_s and wall > 0 else None,
        "checkpoint": v.get("checkpoint"),
    }


def traffic_figures(kinds: dict[str, int], miner_records: list[dict[str, Any]]) -> dict[str, Any]:
    """A round's traffic (every node's ledger summed, :mod:`protocol.node.traffic`) by kind and in bits per
    trained parameter per inner step, over the miners that trained in the round (figure; the
    operators' reads of /status, /metrics and the live pages listed, not counted)."""
    known = {k.value for k in Kind}  # a kind a newer node's ledger has and this driver not: counted
    protocol = {k: b for k, b in kinds.items() if k not in known or Kind(k).protocol}
    trained = sum(int(m.get("trained_params", 0)) for m in miner_records)
    steps = max((int(m.get("inner_steps", 0)) for m in miner_records), default=0)
    out: dict[str, Any] = {
        "traffic_bytes": dict(sorted(kinds.items())),
        "traffic_protocol_bytes": sum(protocol.values()),
        "traffic_unknown_kinds": sorted(k for k in kinds if k not in known),
        "trained_params": trained,
        "inner_steps": steps,
    }
    if trained and steps:
        bits = {k: bits_per_param_step(b, trained, steps) for k, b in sorted(protocol.items())}
        out["traffic_bits_per_param_step"] = {k: round(b, 6) for k, b in bits.items()}
        total = bits_per_param_step(sum(protocol.values()), trained, steps)
        out["traffic_bits_per_param_step_total"] = round(total, 6)
    return out


def write_report(report: dict[str, Any], workdir: Path) -> None:
    """``report.json`` and ``report.png``."""
    (workdir / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True))
    matplotlib.use("Agg")
    pr = report["per_round"]
    rs = [p["round"] for p in pr]
    fig, ax = plt.subplots(2, 2, figsize=(11, 7))
    ax[0][0].plot(rs, [p["heldout_before"] for p in pr], "o-", label="theta_r")
    ax[0][0].plot(rs, [p["heldout_after"] for p in pr], "s-", label="theta_r+1 (merged)")
    ax[0][0].set_title("held-out loss per round")
    ax[0][0].set_xlabel("round")
    ax[0][0].legend()
    miners = sorted({m for p in pr for m in p["rewards_wei"]})
    bottom = [0.0] * len(rs)
    for m in miners:
        vals = [p["rewards_wei"].get(m, 0) / 1e18 for p in pr]
        ax[0][1].bar(rs, vals, bottom=bottom, label=m)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax[0][1].set_title("rewards per miner (tokens)")
    ax[0][1].legend(fontsize=7)
    kinds = sorted({k for p in pr for k in p.get("traffic_bits_per_param_step", {})})
    tr = [p for p in pr if "traffic_bits_per_param_step_total" in p]
    for k in kinds:
        got = [(p["round"], p["traffic_bits_per_param_step"].get(k)) for p in tr]
        got = [(r, v) for r, v in got if v]
        ax[1][0].plot([r for r, _ in got], [v for _, v in got], ".-", lw=0.8, label=k)
    ax[1][0].plot(
        [p["round"] for p in tr],
        [p["traffic_bits_per_param_step_total"] for p in tr],
        "ko-",
        lw=2,
        label="total",
    )
    ax[1][0].axhline(0.05, color="r", ls="--", lw=0.8, label="0.05 target")
    ax[1][0].set_yscale("log")
    ax[1][0].set_title("traffic, bits per trained param per inner step")
    ax[1][0].legend(fontsize=6, ncol=3)
    ax[1][1].plot(
        rs, [p["verification_cost_pct"] or 0 for p in pr], "o-", label="verification (CPU, all stages)"
    )
    ax[1][1].plot(rs, [p["recompute_cost_pct"] or 0 for p in pr], "s-", label="recompute only (CPU)")
    ax[1][1].axhline(5, color="r", ls="--", lw=0.8, label="5% target")
    ax[1][1].set_title("validator compute / miner training compute (%)")
    ax[1][1].legend(fontsize=7)
    for a in ax.flat:
        a.set_xticks(rs)
    fig.tight_layout()
    fig.savefig(workdir / "report.png", dpi=90)
    plt.close(fig)
