"""Run a fuzz campaign: ``python -m tests.fuzz.campaign --target update --inputs 100000 [--seed 0]``.

``--target schemathesis`` sends schemathesis-generated requests to a live miner and validator
(``tests/fuzz/apispec.py``); the other targets are the mutational ones of ``tests/fuzz/targets.py``.

Prints progress and a JSON summary (inputs, time, refusals by error type, distinct failures with a
reproducing input); ``--out FILE`` also writes it. Exit status 1 if any input raised an exception that is
not the target's typed error, or a server crashed.

``--measure`` (issue 11) also takes each input's wall time and peak resident memory (torch's allocations
included) and reports the worst of each with its input, and for updates the worst ratio of peak memory to
the decoded size the header declares; the update target then also crafts well-formed updates for random
codecs and shapes (``--costly`` of the inputs, default 0.3), all at the default caps:
``python -m tests.fuzz.campaign --target update --inputs 3000 --measure``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import apispec
from .engine import Result, run_campaign
from .targets import TARGETS

#: Targets driven by schemathesis/Hypothesis rather than by the mutational engine.
SPEC_TARGETS = {"schemathesis": apispec.run_campaign}


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    p = argparse.ArgumentParser(prog="python -m tests.fuzz.campaign", description=__doc__)
    p.add_argument("--target", choices=[*TARGETS, *SPEC_TARGETS, "all"], required=True)
    p.add_argument("--inputs", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-limit", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--out", type=Path, help="write the JSON summary here")
    p.add_argument("--measure", action="store_true", help="worst time and peak memory per input")
    p.add_argument("--costly", type=float, default=0.3, help="share of crafted costly updates (--measure)")
    p.add_argument("--no-at-cap", action="store_true", help="with --measure: skip the at-the-cap decodes")
    p.add_argument(
        "--memory", choices=["rss", "tracemalloc"], help="with --measure: override the target's probe"
    )
    args = p.parse_args(argv)
    names = [*TARGETS, *SPEC_TARGETS] if args.target == "all" else [args.target]
    if args.measure:
        import torch

        torch.set_num_threads(1)  # CPU time per input is then the decode's own work
    results = []

    def progress(r: Result) -> None:
        if r.inputs % 10_000 == 0:
            print(f"{r.target}: {r.inputs} inputs, {r.failed} failures, {r.seconds:.0f}s", file=sys.stderr)

    for name in names:
        res: Result
        if name in SPEC_TARGETS:
            res = SPEC_TARGETS[name](args.inputs, args.seed, progress, args.time_limit)
        else:
            target = TARGETS[name]()
            if args.measure and hasattr(target, "costly"):
                target.costly = args.costly  # type: ignore[attr-defined]
            if args.memory:
                target.memory = args.memory
            res = run_campaign(
                target, args.inputs, args.seed, progress, args.time_limit, measure=args.measure
            )
        summary = res.to_json()
        if args.measure and name == "update" and not args.no_at_cap:
            from tests.support.bombs import measure_at_cap

            summary["at_cap"] = measure_at_cap()
            for row in summary["at_cap"]:
                print(json.dumps(row), file=sys.stderr)
        results.append(summary)
        print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    untyped = any(row["outcome"] not in ("accepted",) and not row["outcome"].endswith(("Error", "Costly", "Large"))
                  for r in results for row in r.get("at_cap", []))  # fmt: skip
    return 1 if untyped or any(r["failed"] or r["crashed_servers"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
