"""The traffic ledger against a byte count taken outside the processes (within 10%).

Runs ``tessera devnet`` in a network namespace of its own (``unshare -n``: root; only a loopback, nothing
else shares it) and watches it from outside every node: the loopback's counters (``/proc/net/dev``:
bytes and packets, TCP/IP headers included), and every TCP socket's own counters from the kernel
(:mod:`protocol.node.sockstats`: sampled every ``--every`` seconds with the process holding each socket,
and read once more as each socket is destroyed, from ``sock_diag``'s destroy events). Each connection is
put under the process that listens on its server port: anvil (JSON-RPC), a node's HTTP API, a DHT daemon
(``p2pd``), other; the JSON-RPC under the process that sent it (a node, the devnet driver, the
contracts' deployment). Then it sets the devnet's report beside it: the nodes' ledgers (every round,
operators' reads included) and the driver's own RPC. Prints the figures and writes JSON (``--out``).

    sudo nice -n 5 timeout 1500 .venv/bin/python -m benchmarks.traffic_outside --rounds 3 \\
        --dir /tmp/to --out docs/benchmarks/traffic-outside.json

What is compared: payload with payload. The loopback's bytes less ``packets x 52`` (IP and TCP headers
with timestamps; ``lo`` counts no link header) is what the processes wrote to their sockets; the sockets'
``bytes_received`` summed over both ends is the same thing counted per connection (a check of the
split); the ledgers count HTTP bodies and headers, which is payload too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.traffic_watch import SocketWatch, loopback_up
from protocol.node.sockstats import TCP_IP_HEADER

#: Set in the re-executed process that runs inside the new network namespace.
NETNS_ENV = "TESSERA_TRAFFIC_OUTSIDE_NETNS"


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--dir", type=Path, required=True, help="the devnet's work directory (emptied first)")
    p.add_argument("--out", type=Path, required=True, help="JSON output file")
    p.add_argument("--rounds", type=int, default=3, help="rounds the devnet runs")
    p.add_argument("--every", type=float, default=1.0, help="seconds between samples of the sockets")
    p.add_argument("--timeout", type=float, default=1400.0, help="seconds the devnet may take")
    p.add_argument("--label", default="", help="what was measured (a commit, a change), kept in the JSON")
    p.add_argument("--preset", default="tiny", help="the devnet's model preset (tessera devnet --preset)")
    p.add_argument(
        "--recompare",
        action="store_true",
        help="run nothing: compare --out's outside count with --dir's report",
    )
    return p.parse_args(list(argv))


def main(argv: Sequence[str] | None = None) -> int:
    """Re-run inside a fresh network namespace, run the devnet there under watch, compare, write JSON."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--recompare" in argv:
        args = parse(argv)
        old = json.loads(args.out.read_text())
        report = json.loads((args.dir / "report.json").read_text())
        kept = {k: old[k] for k in ("command", "devnet", "devnet_rc", "wall_seconds", "label")}
        out = compare(old, report, args.dir) | kept
        args.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
        print(summary(out))
        return 0
    if os.environ.get(NETNS_ENV) != "1":
        cmd = ["unshare", "-n", sys.executable, "-m", "benchmarks.traffic_outside", *argv]
        return subprocess.run(cmd, env={**os.environ, NETNS_ENV: "1"}, check=False).returncode
    args = parse(argv)
    loopback_up()
    watch = SocketWatch(every=args.every).start()
    devnet = [sys.executable, "-m", "tessera", "devnet", "--rounds", str(args.rounds), "--no-live"]
    devnet += ["--dir", str(args.dir), "--timeout", str(args.timeout), "--preset", args.preset]
    t0 = time.time()
    rc = subprocess.run(devnet, check=False).returncode
    wall = time.time() - t0
    time.sleep(2 * args.every)  # the last destroy events
    seen = watch.stop()
    report_file = args.dir / "report.json"
    report = json.loads(report_file.read_text()) if report_file.exists() else {}
    out = compare(seen, report, args.dir) | {
        "command": " ".join(["python -m benchmarks.traffic_outside", *argv]),
        "devnet": " ".join(devnet[1:]),
        "devnet_rc": rc,
        "wall_seconds": round(wall, 1),
        "label": args.label,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(summary(out))
    return rc


def compare(seen: dict[str, Any], report: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """The outside count (``seen``: :meth:`SocketWatch.stop`) beside the devnet report's ledgers, in all
    and by term: JSON-RPC (anvil's connections, less the deployment, which no ledger holds), the nodes'
    HTTP (less the model export's checkpoint fetch, which the devnet makes after it has read the ledgers:
    its body's bytes are the blob's in validator0's store under ``workdir``), the DHT."""
    lo = seen["loopback"]
    payload = lo["bytes"] - lo["packets"] * TCP_IP_HEADER
    by_server = seen["by_server"]
    kinds: dict[str, int] = dict(report.get("traffic_ledger_bytes_by_kind") or {})
    ledger: dict[str, Any] = {
        "nodes_all_rounds": int(report.get("traffic_ledger_bytes_all_rounds", 0)),
        "driver_rpc": int(report.get("driver_rpc_bytes", 0)),
        "driver_dht": int(report.get("driver_dht_bytes", 0)),
        "by_kind_all_rounds": kinds,
    }
    ledger["total"] = ledger["nodes_all_rounds"] + ledger["driver_rpc"] + ledger["driver_dht"]
    anvil = by_server.get("anvil", {"bytes": 0, "by_client": {}})
    deploy = anvil["by_client"].get("deploy", 0)
    http = sum(row["bytes"] for role, row in by_server.items() if role in ("miner", "validator"))
    blob = (
        workdir
        / "validator0"
        / "public"
        / str((report.get("model") or {}).get("checkpoint", "")).removeprefix("0x")
    )
    export = blob.stat().st_size if blob.is_file() else 0
    terms = {
        "rpc": [anvil["bytes"] - deploy, kinds.get("rpc", 0) + ledger["driver_rpc"]],
        "node_http": [http - export, sum(b for k, b in kinds.items() if k not in ("rpc", "dht"))],
        "dht": [by_server.get("dht", {}).get("bytes", 0), kinds.get("dht", 0) + ledger["driver_dht"]],
        "deployment (no ledger)": [deploy, 0],
        "model export's checkpoint body, after the ledgers were read": [export, 0],
        "no listener seen, or not in any socket": [
            payload
            - seen["sockets"]["flows"]
            + sum(r["bytes"] for k, r in by_server.items() if k == "unseen"),
            0,
        ],
    }
    return {
        "loopback": lo | {"payload": payload, "header_bytes": lo["packets"] * TCP_IP_HEADER},
        "sockets": seen["sockets"],
        "protocols": seen["protocols"],
        "by_server": by_server,
        "ledger": ledger,
        "by_term": {k: {"outside": o, "ledger": n, "ledger_pct": _pct(n, o)} for k, (o, n) in terms.items()},
        "ledger_share_of_loopback_bytes": _pct(ledger["total"], lo["bytes"]),
        "ledger_share_of_loopback_payload": _pct(ledger["total"], payload),
        "ledger_share_of_payload_less_deployment": _pct(ledger["total"], payload - deploy),
        "ledger_share_of_payload_less_deployment_and_export": _pct(
            ledger["total"], payload - deploy - export
        ),
    }


def _pct(a: int, b: int) -> float | None:
    return round(100.0 * a / b, 2) if b > 0 else None


def summary(out: dict[str, Any]) -> str:
    """The figures, one per line."""
    lo = out["loopback"]
    lines = [
        f"loopback: {lo['bytes']:,} bytes in {lo['packets']:,} packets; payload (less {TCP_IP_HEADER} per"
        f" packet) {lo['payload']:,}",
        f"connections' bytes (each direction from the end whose counters survived):"
        f" {out['sockets']['flows']:,} in {out['sockets']['connections']:,} connections"
        f" (bytes_received alone: {out['sockets']['received']:,}); packets by protocol {out['protocols']}",
    ]
    for name, row in sorted(out["by_server"].items()):
        clients = ", ".join(f"{c} {b:,}" for c, b in sorted(row.get("by_client", {}).items()))
        lines.append(f"  {name}: {row['bytes']:,} (clients: {clients})")
    led = out["ledger"]
    lines.append(
        f"ledgers {led['nodes_all_rounds']:,} + driver RPC {led['driver_rpc']:,} + driver DHT"
        f" {led['driver_dht']:,} = {led['total']:,}:"
        f" {out['ledger_share_of_loopback_bytes']}% of the loopback's bytes,"
        f" {out['ledger_share_of_loopback_payload']}% of its payload,"
        f" {out['ledger_share_of_payload_less_deployment']}% of the payload less the deployment,"
        f" {out['ledger_share_of_payload_less_deployment_and_export']}% less the deployment and the model"
        " export read after the ledgers"
    )
    for term, row in out["by_term"].items():
        lines.append(f"  {term}: outside {row['outside']:,}, ledger {row['ledger']:,} ({row['ledger_pct']}%)")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
