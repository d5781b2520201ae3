"""Fixed traffic per node and round on a chain of slow blocks with long rounds.

Runs a devnet whose anvil mines a block every ``--block-time`` seconds (no fast-forward, no phase sizing:
the windows are ``--windows`` blocks as given; the default 60/10/30/10 blocks at 2 s are 220-s rounds),
for ``--rounds`` training rounds, and reads every node's traffic ledger (``GET /traffic``,
``/traffic/rpc`` and ``/traffic/rpc-bytes``, :mod:`protocol.node.traffic`) every ``--every`` seconds
while it runs (the last reading is up to that long before the nodes stop). Per node and training round it
reports the JSON-RPC bytes (bodies and headers both ways), the discovery records served, the DHT bytes
its ``p2pd`` received (:mod:`protocol.node.dhttraffic`), their sum (``fixed_kB``), the requests, and per
role the mean calls and bytes of every JSON-RPC method. Writes JSON (``--out``) and prints a summary.

    nice -n 5 timeout 1800 python -m benchmarks.traffic_long_rounds --dir /tmp/lr --out lr.json

Round 1 of a fresh chain is the join round, so the training rounds read are 2..R+1.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from protocol.node.trafficsums import total_bytes
from tessera.devnet.config import DevnetConfig
from tessera.devnet.run import run_devnet

#: The ledger's endpoints read from every node: bytes by kind, requests by method, bytes by method.
LEDGERS = {"kinds": "/traffic", "calls": "/traffic/rpc", "bytes": "/traffic/rpc-bytes"}


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--dir", type=Path, required=True, help="the devnet's work directory (emptied first)")
    p.add_argument("--out", type=Path, required=True, help="JSON output file")
    p.add_argument("--rounds", type=int, default=1, help="training rounds (after the join round)")
    p.add_argument("--block-time", type=float, default=2.0, help="seconds between anvil's blocks")
    p.add_argument(
        "--windows",
        default="60,10,30,10",
        help="blocks of the commit, reveal, score-commit and score-reveal phases",
    )
    p.add_argument("--every", type=float, default=10.0, help="seconds between readings of the ledgers")
    p.add_argument("--timeout", type=float, default=1700.0, help="seconds the devnet may take")
    p.add_argument("--label", default="", help="what was measured (a commit, a change), kept in the JSON")
    return p.parse_args(list(argv))


class LedgerReader:
    """Reads every node's ledgers every ``every`` seconds in a thread; keeps each node's last reading."""

    def __init__(self, workdir: Path, every: float) -> None:
        self.workdir = workdir
        self.every = every
        self.last: dict[str, dict[str, Any]] = {}
        self.readings = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ledger-reader", daemon=True)

    def start(self) -> None:
        """Start reading."""
        self._thread.start()

    def stop(self) -> None:
        """Stop reading (the last readings stay in :attr:`last`)."""
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            ports_file = self.workdir / "ports.json"
            if not ports_file.exists():
                continue
            ports = json.loads(ports_file.read_text())
            for name, port in ports.items():
                got = {}
                try:
                    for key, path in LEDGERS.items():
                        got[key] = httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5).json()
                except (httpx.HTTPError, ValueError):
                    continue  # not up yet, or stopping: keep the previous reading
                self.last[name] = got
            self.readings += 1


def node_round(reading: dict[str, Any], round: int) -> dict[str, Any]:
    """One node's figures for ``round`` from its last reading."""
    r = str(round)
    kinds = reading["kinds"].get(r, {})
    rpc = total_bytes(kinds.get("rpc", {}))
    records = total_bytes(kinds.get("record", {}))
    dht = total_bytes(kinds.get("dht", {}))
    calls = reading["calls"].get(r, {})
    nbytes = reading["bytes"].get(r, {})
    return {
        "rpc_kB": round_kb(rpc),
        "records_kB": round_kb(records),
        "dht_kB": round_kb(dht),
        "total_kB": round_kb(rpc + records + dht),
        "requests": sum(calls.values()),
        "calls": calls,
        "bytes": nbytes,
    }


def round_kb(n: float) -> float:
    """Bytes as kB (1000 bytes), one decimal."""
    return round(n / 1000, 1)


def per_role(nodes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Means and ranges per role over ``{"name/round": node_round(...)}``."""
    out: dict[str, Any] = {}
    for role in ("miner", "validator"):
        rows = [v for k, v in nodes.items() if k.startswith(role)]
        if not rows:
            continue
        methods = sorted({m for row in rows for m in row["bytes"]})

        def mean(field: str, rows: list[dict[str, Any]] = rows) -> float:
            return round(statistics.fmean(row[field] for row in rows), 1)

        calls = {m: round(statistics.fmean(row["calls"].get(m, 0) for row in rows), 1) for m in methods}
        kb = {m: round(statistics.fmean(row["bytes"].get(m, 0) for row in rows) / 1000, 2) for m in methods}
        out[role] = {
            "node_rounds": len(rows),
            "requests_mean": mean("requests"),
            "requests_range": [min(r["requests"] for r in rows), max(r["requests"] for r in rows)],
            "rpc_kB_mean": mean("rpc_kB"),
            "rpc_kB_range": [min(r["rpc_kB"] for r in rows), max(r["rpc_kB"] for r in rows)],
            "records_kB_mean": mean("records_kB"),
            "dht_kB_mean": mean("dht_kB"),
            "dht_kB_range": [min(r["dht_kB"] for r in rows), max(r["dht_kB"] for r in rows)],
            "total_kB_mean": mean("total_kB"),
            "total_kB_range": [min(r["total_kB"] for r in rows), max(r["total_kB"] for r in rows)],
            "calls_per_node_round": dict(sorted(calls.items(), key=lambda kv: -kv[1])),
            "kB_per_node_round_by_method": dict(sorted(kb.items(), key=lambda kv: -kv[1])),
        }
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Run the devnet and read its ledgers; the figures as JSON."""
    windows = [int(w) for w in args.windows.split(",")]
    if len(windows) != 4:
        raise SystemExit("--windows takes four block counts")
    cfg = DevnetConfig(
        workdir=args.dir,
        block_time=args.block_time,
        fast_forward=False,
        size_phases=False,
        commit_blocks=windows[0],
        reveal_blocks=windows[1],
        score_commit_blocks=windows[2],
        score_reveal_blocks=windows[3],
        samples=0,
    )
    reader = LedgerReader(args.dir, args.every)
    reader.start()
    t0 = time.time()
    load0 = os.getloadavg()
    try:
        report = run_devnet(cfg, args.rounds, live=False, timeout=args.timeout)
    finally:
        reader.stop()
    wall = time.time() - t0
    training = list(range(2, args.rounds + 2))
    nodes = {
        f"{name}/{r}": node_round(reading, r)
        for name, reading in sorted(reader.last.items())
        for r in training
    }
    totals = [v["total_kB"] for v in nodes.values()]
    rounds_wall = {pr["round"]: pr.get("wall_seconds") for pr in report.get("per_round", [])}
    return {
        "label": args.label,
        "command": "python -m benchmarks.traffic_long_rounds " + " ".join(sys.argv[1:]),
        "config": {
            "block_time_s": args.block_time,
            "windows_blocks": windows,
            "round_s": sum(windows) * args.block_time,
            "training_rounds": training,
        },
        "wall_s": round(wall),
        "round_wall_s": rounds_wall,
        "load_average_start_end": [round(load0[0], 1), round(os.getloadavg()[0], 1)],
        "ledger_readings": reader.readings,
        "per_role": per_role(nodes),
        "per_node_round_kB": {k: v["total_kB"] for k, v in nodes.items()},
        "fixed_kB": {
            "mean": round(statistics.fmean(totals), 1) if totals else None,
            "min": min(totals, default=None),
            "max": max(totals, default=None),
        },
        "nodes": nodes,
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Measure, write the JSON, print the summary per role."""
    args = parse(sys.argv[1:] if argv is None else argv)
    out = measure(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    for role, fig in out["per_role"].items():
        print(
            f"{role}: {fig['node_rounds']} node-rounds, requests {fig['requests_mean']}, "
            f"RPC {fig['rpc_kB_mean']} kB {fig['rpc_kB_range']}, records {fig['records_kB_mean']} kB, "
            f"DHT {fig['dht_kB_mean']} kB {fig['dht_kB_range']}, "
            f"total {fig['total_kB_mean']} kB {fig['total_kB_range']}"
        )
        for m, kb in list(fig["kB_per_node_round_by_method"].items())[:12]:
            print(f"   {m:40s} {fig['calls_per_node_round'][m]:7.1f} calls {kb:8.2f} kB")
    print("per node-round (kB):", out["per_node_round_kB"])


if __name__ == "__main__":
    main()
