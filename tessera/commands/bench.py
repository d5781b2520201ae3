"""``tessera bench training|chain|attestation|crossplatform|presets``: run a benchmark, print its figures, write JSON (+PNG).

Each subcommand imports its benchmark module lazily and calls its ``main(args)``.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from benchmarks.crossplatform import add_arguments as add_crossplatform_arguments
from benchmarks.presets import add_arguments as add_presets_arguments
from benchmarks.training import add_arguments as add_training_arguments

_TARGETS = {
    "training": ("benchmarks.training", "compressed DiLoCo vs synchronous training, codec speed, overhead"),
    "chain": ("benchmarks.chain", "contract gas and chain round-trip figures"),
    "attestation": ("benchmarks.attestation", "attestation verification figures"),
    "crossplatform": (
        "benchmarks.crossplatform",
        "honest replay differences across CPU instruction sets (and CUDA) against the replay tolerances",
    ),
    "presets": (
        "benchmarks.presets",
        "a miner's inner loop at each model preset against a plain PyTorch loop: tokens/s, peak memory",
    ),
}


def register(subparsers: Any) -> None:
    """Add ``tessera bench`` and its subcommands."""
    parser = subparsers.add_parser("bench", help="run a benchmark and write its figures")
    sub = parser.add_subparsers(dest="bench_target", metavar="TARGET")
    for name, (module, help_text) in _TARGETS.items():
        p = sub.add_parser(name, help=help_text)
        if name == "training":
            add_training_arguments(p)
        elif name == "crossplatform":
            add_crossplatform_arguments(p)
        elif name == "presets":
            add_presets_arguments(p)
        else:
            p.add_argument("--out", default=f"bench-{name}", help="output directory")
            p.add_argument("extra", nargs=argparse.REMAINDER, help="arguments for the benchmark itself")
        p.set_defaults(handler=_runner(module))
    parser.set_defaults(handler=lambda args: (parser.print_help(), 1)[1])


def _runner(module: str) -> Any:
    def run(args: argparse.Namespace) -> int:
        return int(importlib.import_module(module).main(args) or 0)

    return run
