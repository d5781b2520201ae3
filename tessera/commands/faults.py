"""``tessera faults``: kill, cut off and corrupt real devnet processes, then check that nobody lost money."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tessera.devnet.faults import SCENARIOS, FaultsError, run_faults, table


def register(subparsers: Any) -> None:
    """Add ``tessera faults``."""
    listing = "\n".join(f"  {s.name:<15} {s.summary}" for s in SCENARIOS.values())
    p = subparsers.add_parser(
        "faults",
        help="fault injection on a real devnet: kill -9 the chain or a node, cut a validator off, bad peers",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Each scenario starts a fresh devnet (anvil, the contracts, a DHT, 2 validators and "
        "--miners miners as separate processes), injects one fault in the first training round at a phase "
        "drawn from --seed, runs --rounds rounds from there, and checks the chain's events: nothing paid "
        "twice, payouts equal the settlement of the revealed scores, every honest participant paid in every "
        "round it completed, the round after the fault finalized and certified (recovery within one round), "
        "nobody slashed, and a log line saying what happened. mixed-hardware injects nothing: its nodes run "
        "under different CPU instruction sets (ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS, "
        "ONEDNN_MAX_CPU_ISA; avx512 only where /proc/cpuinfo has it) and every round must be certified, the "
        "validators' merged digests equal, no honest miner refused or slashed, everyone paid. slow-certificate "
        "holds every certify transaction 30 s at the validators' RPC proxies (2-s blocks, a 60-s commit window) "
        "and every miner must commit in every round. Phase "
        "windows are sized from the work measured before each devnet deploys (tessera devnet --help). "
        "Prints a table; writes "
        "DIR/faults-report.json and each scenario's faults.log and devnet (node logs in DIR/NAME/devnet/logs) under DIR/NAME.\n\n"
        f"scenarios:\n{listing}",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="scenarios to run (see above)")
    p.add_argument("--all", action="store_true", help="run every scenario")
    p.add_argument(
        "--seed", type=int, default=6, help="seed of the fault phases and delays (default 6; printed)"
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="training rounds from the fault round on (default 2: the fault round and the recovery round)",
    )
    p.add_argument("--miners", type=int, default=3, help="miner processes per devnet (default 3)")
    p.add_argument("--inner-steps", type=int, default=8, help="H, inner steps per round (default 8)")
    p.add_argument("--dir", type=Path, default=Path(".faults"), help="work directory (default .faults)")
    p.add_argument("--timeout", type=float, default=900, help="give up on a scenario after this many seconds")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    names = list(SCENARIOS) if args.all else list(args.names)
    if not names:
        raise FaultsError(f"name scenarios or pass --all; scenarios: {', '.join(SCENARIOS)}")
    print(f"tessera faults: seed {args.seed}, {args.rounds} rounds from the fault round, scenarios {names}")
    report = run_faults(
        names,
        seed=args.seed,
        rounds=args.rounds,
        workdir=args.dir,
        timeout=args.timeout,
        miners=args.miners,
        inner_steps=args.inner_steps,
        say=lambda line: print(line, flush=True),
    )
    print()
    print(table(report))
    print(f"\nseed {args.seed}; {report['wall_seconds']:.0f}s; report: {args.dir / 'faults-report.json'}")
    sys.stdout.flush()
    return 0 if report["ok"] else 1
