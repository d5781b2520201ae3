"""``tessera runspec``: write and inspect the run file (``run.json``) a launcher publishes.

The run file fixes the model, inner loop, outer step, codec, corpus and the seed of theta_0; every miner and
validator loads the same file. Its theta_0 digest is the genesis checkpoint the contracts are deployed
with (``tessera contracts deploy --run-file run.json``); a node whose run file does not match the chain's
genesis refuses to start.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    """Add ``tessera runspec``."""
    parser = subparsers.add_parser(
        "runspec",
        help="write or show the run file (run.json) that fixes a run's math",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="runspec_command", metavar="ACTION")
    init = sub.add_parser("init", help="write a run file and print its digest and genesis checkpoint")
    init.add_argument("--out", type=Path, default=Path("run.json"), help="file to write")
    init.add_argument("--mode", choices=["moe", "dipaco", "dense"], default="moe", help="model mode")
    init.add_argument("--inner-steps", type=int, default=None, help="H, inner steps per round")
    init.add_argument("--batch-size", type=int, default=None, help="sequences per inner step")
    init.add_argument(
        "--corpus",
        default="bundled",
        help="'bundled' or a .txt/.jsonl file or a folder of them; its content digest is pinned "
        "in the run file as corpus_digest",
    )
    init.add_argument("--genesis-seed", type=int, default=0, help="seed of theta_0")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.set_defaults(handler=_init)
    show = sub.add_parser("show", help="print a run file's digest, genesis checkpoint and settings")
    show.add_argument("run_file", type=Path, nargs="?", default=Path("run.json"))
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(handler=_show)
    parser.set_defaults(handler=lambda args: (parser.print_help(), 1)[1])


def _init(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from protocol.runspec import RunSpec
    from tessera.errors import TesseraError
    from training.config import InnerConfig, ModelConfig

    if args.out.exists() and not args.force:
        raise TesseraError(f"{args.out} exists; pass --force to overwrite it")
    inner = InnerConfig()
    if args.inner_steps is not None:
        inner = replace(inner, steps=args.inner_steps)
    if args.batch_size is not None:
        inner = replace(inner, batch_size=args.batch_size)
    corpus_digest = None
    if args.corpus != "bundled":
        from training.corpus import load_corpus_path

        corpus_digest = load_corpus_path(args.corpus).digest
    spec = RunSpec(
        model=ModelConfig(mode=args.mode),
        inner=inner,
        corpus=args.corpus,
        genesis_seed=args.genesis_seed,
        corpus_digest=corpus_digest,
    )
    spec = RunSpec.from_json(spec.to_json())  # the same validation a node applies when it loads the file
    spec.save(args.out)
    print(json.dumps(summary(spec, args.out), indent=1))
    return 0


def summary(spec: Any, path: Path) -> dict[str, Any]:
    """What a launcher publishes about a run file."""
    return {
        "run_file": str(path),
        "digest": spec.digest(),
        "genesis_checkpoint": spec.genesis_digest(),
        "mode": spec.model.mode,
        "inner_steps": spec.inner.steps,
        "batch_size": spec.inner.batch_size,
        "corpus": spec.corpus,
        **({"corpus_digest": spec.corpus_digest} if spec.corpus_digest else {}),
        "deploy_with": f"tessera contracts deploy --run-file {path} ...",
    }


def _show(args: argparse.Namespace) -> int:
    from protocol.runspec import RunSpec

    spec = RunSpec.load(args.run_file)
    out = summary(spec, args.run_file)
    if args.json:
        out["spec"] = spec.to_json()
        print(json.dumps(out, sort_keys=True))
    else:
        for k, v in out.items():
            print(f"{k:>20}: {v}")
    return 0
