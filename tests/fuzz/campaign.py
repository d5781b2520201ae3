"""Run a fuzz campaign: ``python -m tests.fuzz.campaign --target update --inputs 100000 [--seed 0]``.

``--target schemathesis`` sends schemathesis-generated requests to a live miner and validator
(``tests/fuzz/apispec.py``); the other targets are the mutational ones of ``tests/fuzz/targets.py``.

Prints progress and a JSON summary (inputs, time, refusals by error type, distinct failures with a
reproducing input); ``--out FILE`` also writes it. Exit status 1 if any input raised an exception that is
not the target's typed error, or a server crashed.
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
    args = p.parse_args(argv)
    names = [*TARGETS, *SPEC_TARGETS] if args.target == "all" else [args.target]
    results = []

    def progress(r: Result) -> None:
        if r.inputs % 10_000 == 0:
            print(f"{r.target}: {r.inputs} inputs, {r.failed} failures, {r.seconds:.0f}s", file=sys.stderr)

    for name in names:
        res: Result
        if name in SPEC_TARGETS:
            res = SPEC_TARGETS[name](args.inputs, args.seed, progress, args.time_limit)
        else:
            res = run_campaign(TARGETS[name](), args.inputs, args.seed, progress, args.time_limit)
        results.append(res.to_json())
        print(json.dumps(res.to_json(), indent=1))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 1 if any(r["failed"] or r["crashed_servers"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
