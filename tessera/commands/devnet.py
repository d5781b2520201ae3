"""``tessera devnet``: anvil, the contracts, validators and miners on this machine, R rounds, a report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    """Add ``tessera devnet``."""
    p = subparsers.add_parser(
        "devnet",
        help="run the whole network locally: chain, contracts, validators, miners; write a report",
        description="Starts anvil (state persisted in --dir), deploys the contracts, starts validators and "
        "miners as separate processes, runs --rounds rounds on the bundled corpus with a live view, writes "
        "report.json and report.png to --dir, and stops everything (also on Ctrl-C).",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="training rounds (default 3; a fresh chain adds round 1 to join)",
    )
    p.add_argument("--miners", type=int, default=4, help="miner processes (default 4)")
    p.add_argument("--validators", type=int, default=2, help="validator processes (default 2)")
    p.add_argument("--mode", choices=("moe", "dipaco"), default="moe", help="MoE experts or DiPaCo paths")
    p.add_argument(
        "--dipaco", dest="mode", action="store_const", const="dipaco", help="same as --mode dipaco"
    )
    p.add_argument("--inner-steps", type=int, default=60, help="H, inner steps per round (default 60)")
    p.add_argument(
        "--segments", type=int, default=2, help="transcript steps each validator replays per miner"
    )
    p.add_argument("--merge", choices=("mean", "trimmed_mean"), default="mean", help="merge rule")
    p.add_argument("--tee", choices=("simulated", "none"), default="simulated", help="miner TEE evidence")
    p.add_argument("--dir", type=Path, default=Path(".devnet"), help="work directory (default .devnet)")
    p.add_argument("--resume", action="store_true", help="keep the persisted chain and node state in --dir")
    p.add_argument("--no-fast-forward", action="store_true", help="wait out every phase deadline")
    p.add_argument("--no-live", action="store_true", help="print progress lines instead of the live view")
    p.add_argument("--timeout", type=float, default=1800, help="give up after this many seconds")
    p.add_argument(
        "--adversary",
        action="append",
        default=[],
        metavar="NODE=MODE",
        help="run a node as an adversary, e.g. miner3=poisoner-scaled (a `tessera miner run --behaviour`) or "
        "validator1=random (a `tessera validator run --mode`); repeatable. Node names are miner0.. and "
        "validator0..",
    )
    p.set_defaults(handler=_run)


def adversary_args(specs: list[str], miners: int, validators: int) -> dict[str, list[str]]:
    """``NODE=MODE`` pairs as the extra flags of those nodes; :class:`TesseraError` on a bad pair."""
    from tessera.commands.validator import MODES
    from tessera.errors import TesseraError

    out: dict[str, list[str]] = {}
    for spec in specs:
        node, sep, mode = spec.partition("=")
        if not sep or not mode:
            raise TesseraError(f"--adversary {spec!r}: expected NODE=MODE, e.g. miner3=poisoner-scaled")
        if node.startswith("miner") and node[5:].isdigit() and int(node[5:]) < miners:
            from miner.behaviour import available
            from tessera.attack.miners import register_all

            register_all()
            if mode not in available():
                raise TesseraError(
                    f"--adversary {spec!r}: unknown miner behaviour; choose from {available()}"
                )
            out[node] = ["--behaviour", mode]
        elif node.startswith("validator") and node[9:].isdigit() and int(node[9:]) < validators:
            if mode not in MODES:
                raise TesseraError(
                    f"--adversary {spec!r}: unknown validator mode; choose from {sorted(MODES)}"
                )
            out[node] = ["--mode", mode]
        else:
            raise TesseraError(
                f"--adversary {spec!r}: no node {node!r} (miner0..miner{miners - 1}, "
                f"validator0..validator{validators - 1})"
            )
    return out


def _run(args: argparse.Namespace) -> int:
    import json

    from tessera.devnet.network import DevnetConfig
    from tessera.devnet.run import run_devnet

    cfg = DevnetConfig(
        workdir=args.dir,
        miners=args.miners,
        validators=args.validators,
        mode=args.mode,
        inner_steps=args.inner_steps,
        segments_per_miner=args.segments,
        tee=args.tee,
        merge_method=args.merge,
        fresh=not args.resume,
        fast_forward=not args.no_fast_forward,
        extra_args=adversary_args(args.adversary, args.miners, args.validators),
    )
    report = run_devnet(cfg, args.rounds, live=not args.no_live, timeout=args.timeout)
    summary = {
        "wall_seconds_total": report["wall_seconds_total"],
        "heldout": [(p["round"], p["heldout_before"], p["heldout_after"]) for p in report["per_round"]],
        "verification_cost_pct": [
            p["verification_cost_pct"] for p in report["per_round"] if not p["join_round"]
        ],
        "round_wall_seconds": [p["wall_seconds"] for p in report["per_round"]],
        "rewards_total_tokens": {m: round(w / 1e18, 2) for m, w in report["rewards_total_wei"].items()},
    }
    print(json.dumps(summary, indent=1))
    print(f"report: {args.dir / 'report.json'} and {args.dir / 'report.png'}")
    return 0
