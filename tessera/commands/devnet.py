"""``tessera devnet``: anvil, the contracts, validators and miners on this machine, R rounds, a report."""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any

from tessera.cli import LOG_LEVEL_ENV, add_log_level_flag
from tessera.devnet.config import DevnetConfig
from tessera.errors import TesseraError

_DESCRIPTION = (
    "Starts anvil (state persisted in --dir), deploys the contracts, starts validators and\n"
    "miners as separate processes, runs --rounds rounds on the bundled corpus (or --corpus) with a live\n"
    "view, writes report.json and report.png to --dir, and stops everything (also on Ctrl-C). --preset\n"
    "picks the model size, --bpe-vocab a BPE tokenizer trained on the corpus; each round's certified\n"
    "checkpoint is sampled (--samples).\n\n"
    "Phase windows are sized from the work they must hold, measured on this machine before deploying\n"
    "(in a process started like a node, once per --node-env setting; the slowest wins):\n"
    "  blocks       = max(floor, ceil(safety x seconds / block time)); floors 60/10/30/10 blocks\n"
    "  commit       = start + merge + held-out + train x ceil(miners / cores)\n"
    "  reveal       = start\n"
    "  score-commit = start + (miners x verify + held-out) x ceil(validators / cores), + 4 margin blocks\n"
    "  score-reveal = start\n"
    "start: a node's launch (imports, torch warm-up, a DHT peer), so a node restarted in a phase still\n"
    "acts in it; train: one miner's round of H inner steps; verify: one validator's check of one update\n"
    "with its segment replay; safety: --phase-safety (load arriving after the measurement). The\n"
    "derivation is logged and written to DIR/phases.json and the report. Rounds still last only as\n"
    "long as their work: the devnet mines the rest of a phase once every node has done its part\n"
    "(unless --no-fast-forward). docs/deploy.md explains how to size a real deployment."
)


def register(subparsers: Any) -> None:
    """Add ``tessera devnet``."""
    p = subparsers.add_parser(
        "devnet",
        help="run the whole network locally: chain, contracts, validators, miners; write a report",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=_DESCRIPTION,
    )
    _add_network_options(p)
    _add_model_options(p)
    _add_protocol_options(p)
    _add_run_options(p)
    _add_node_options(p)
    _add_phase_options(p)
    p.set_defaults(handler=_run)


def _add_network_options(p: argparse.ArgumentParser) -> None:
    """``tessera devnet``'s options for the network's shape: rounds, nodes, mode, H."""
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
    p.add_argument(
        "--inner-steps", type=int, default=None, help="H, inner steps per round (default: the recipe's, 60)"
    )


def _add_model_options(p: argparse.ArgumentParser) -> None:
    """``tessera devnet``'s options for the model and its data: preset, corpus, tokenizer, samples."""
    p.add_argument(
        "--preset",
        default="tiny",
        help="model preset: tiny (default), 1m, 10m, 50m, 125m (`tessera runspec estimate` prints their "
        "cost; 10m and up are slow on a CPU)",
    )
    p.add_argument(
        "--corpus",
        default="bundled",
        metavar="PATH",
        help="train on your text: a .txt or .jsonl file or a folder of them (documents in .txt files are "
        "separated by two blank lines); the run file pins its content digest and every node derives the "
        "same token streams (default: the bundled corpus)",
    )
    p.add_argument(
        "--bpe-vocab",
        type=int,
        default=None,
        metavar="N",
        help="train an N-token BPE tokenizer on the corpus and pin it in the run file "
        "(default: byte-level tokens)",
    )
    p.add_argument(
        "--samples",
        type=int,
        default=2,
        help="continuations generated from each round's certified checkpoint, shown live and in the report "
        "(default 2; 0: none)",
    )
    p.add_argument("--sample-prompt", default="The ", help="the prompt the samples continue")


def _add_protocol_options(p: argparse.ArgumentParser) -> None:
    """``tessera devnet``'s options for verification, merge and TEE evidence."""
    p.add_argument(
        "--segments", type=int, default=2, help="transcript steps each validator replays per miner"
    )
    p.add_argument("--merge", choices=("mean", "trimmed_mean"), default="mean", help="merge rule")
    p.add_argument("--tee", choices=("simulated", "none"), default="simulated", help="miner TEE evidence")
    p.add_argument(
        "--miner-stake",
        type=int,
        default=None,
        metavar="TOKENS",
        help="minimum miner stake, bonded by every miner (default 350000: q = 0.39%%; 100 gives q = 1, "
        "every miner audited every round)",
    )


def _add_run_options(p: argparse.ArgumentParser) -> None:
    """``tessera devnet``'s options for the work directory and how the run is driven and shown."""
    p.add_argument("--dir", type=Path, default=Path(".devnet"), help="work directory (default .devnet)")
    p.add_argument("--resume", action="store_true", help="keep the persisted chain and node state in --dir")
    p.add_argument("--no-fast-forward", action="store_true", help="wait out every phase deadline")
    p.add_argument(
        "--block-time",
        type=float,
        default=1.0,
        help="seconds between anvil's blocks (default 1; 2 or 12 for a public testnet's pace)",
    )
    p.add_argument("--no-live", action="store_true", help="print progress lines instead of the live view")
    p.add_argument("--timeout", type=float, default=1800, help="give up after this many seconds")
    add_log_level_flag(p)  # the devnet's own and, through $TESSERA_LOG_LEVEL, its nodes'


def _add_node_options(p: argparse.ArgumentParser) -> None:
    """``tessera devnet``'s options for per-node settings: adversaries and environments."""
    p.add_argument(
        "--adversary",
        action="append",
        default=[],
        metavar="NODE=MODE",
        help="run a node as an adversary, e.g. miner3=poisoner-scaled (a `tessera miner run --behaviour`) or "
        "validator1=random (a `tessera validator run --mode`); repeatable. Node names are miner0.. and "
        "validator0..",
    )
    p.add_argument(
        "--node-env",
        action="append",
        default=[],
        metavar="NODE=VAR=VALUE",
        help="set an environment variable in one node's process, e.g. miner1=ATEN_CPU_CAPABILITY=default or "
        "validator0=ONEDNN_MAX_CPU_ISA=AVX2; repeatable",
    )
    p.add_argument(
        "--miner-device",
        action="append",
        default=[],
        metavar="I=DEVICE",
        help="train miner I on DEVICE (cpu, cuda or cuda:N), e.g. 0=cuda; every other node computes on the "
        "CPU, so the validators replay its segments on the CPU; repeatable",
    )


def _add_phase_options(p: argparse.ArgumentParser) -> None:
    """``tessera devnet``'s options for how the phase windows are sized."""
    p.add_argument(
        "--phase-safety",
        type=float,
        default=4.0,
        help="safety factor on the measured work of each phase (default 4: load arriving after the measurement)",
    )
    p.add_argument(
        "--fixed-phases",
        action="store_true",
        help="do not measure: deploy the floors (60/10/30/10 blocks) as they are",
    )


def node_env_args(specs: list[str], miners: int, validators: int) -> dict[str, dict[str, str]]:
    """``NODE=VAR=VALUE`` triples as per-node environments; :class:`TesseraError` on a bad one."""
    names = [f"validator{i}" for i in range(validators)] + [f"miner{i}" for i in range(miners)]
    out: dict[str, dict[str, str]] = {}
    for spec in specs:
        node, _, assignment = spec.partition("=")
        var, sep, value = assignment.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", var):
            raise TesseraError(
                f"--node-env {spec!r}: expected NODE=VAR=VALUE, e.g. miner1=ATEN_CPU_CAPABILITY=default"
            )
        if node not in names:
            raise TesseraError(
                f"--node-env {spec!r}: no node {node!r} (miner0..miner{miners - 1}, "
                f"validator0..validator{validators - 1})"
            )
        out.setdefault(node, {})[var] = value
    return out


def miner_devices(specs: list[str], miners: int) -> dict[str, str]:
    """``I=DEVICE`` pairs as ``{"minerI": DEVICE}``; :class:`TesseraError` on a bad index or device name."""
    from training.device import check_device_name
    from training.errors import DeviceError

    out: dict[str, str] = {}
    for spec in specs:
        index, sep, device = spec.partition("=")
        if not sep or not index.isdigit() or int(index) >= miners:
            raise TesseraError(
                f"--miner-device {spec!r}: expected I=DEVICE with I in 0..{miners - 1}, e.g. 0=cuda"
            )
        try:
            out[f"miner{int(index)}"] = check_device_name(device)
        except DeviceError as exc:
            raise TesseraError(f"--miner-device {spec!r}: {exc}") from exc
    return out


def adversary_args(specs: list[str], miners: int, validators: int) -> dict[str, list[str]]:
    """``NODE=MODE`` pairs as the extra flags of those nodes; :class:`TesseraError` on a bad pair."""
    from tessera.attack.node import MODES

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
    from tessera.devnet.run import run_devnet
    from training.presets import get_preset

    get_preset(args.preset)  # an unknown name fails before anything starts
    if args.log_level:
        os.environ[LOG_LEVEL_ENV] = args.log_level  # the nodes it starts inherit it
    cfg = DevnetConfig(
        workdir=args.dir,
        miners=args.miners,
        validators=args.validators,
        mode=args.mode,
        inner_steps=args.inner_steps,
        preset=args.preset,
        corpus=args.corpus,
        bpe_vocab=args.bpe_vocab,
        samples=args.samples,
        sample_prompt=args.sample_prompt,
        segments_per_miner=args.segments,
        miner_stake=args.miner_stake,
        tee=args.tee,
        merge_method=args.merge,
        fresh=not args.resume,
        fast_forward=not args.no_fast_forward,
        block_time=args.block_time,
        extra_args=adversary_args(args.adversary, args.miners, args.validators),
        node_env=node_env_args(args.node_env, args.miners, args.validators),
        miner_devices=miner_devices(args.miner_device, args.miners),
        size_phases=not args.fixed_phases,
        phase_safety=args.phase_safety,
    )
    cfg.miner_stake_wei()  # a stake below one token fails before anvil or a node starts
    report = run_devnet(cfg, args.rounds, live=not args.no_live, timeout=args.timeout)
    _print_summary(report, args)
    return 0


def _print_summary(report: dict[str, Any], args: argparse.Namespace) -> None:
    """The devnet's closing lines: phase windows, a JSON summary, where the report and the model are."""
    summary = {
        "wall_seconds_total": report["wall_seconds_total"],
        "heldout": [(p["round"], p["heldout_before"], p["heldout_after"]) for p in report["per_round"]],
        "verification_cost_pct": [
            p["verification_cost_pct"] for p in report["per_round"] if not p["join_round"]
        ],
        "round_wall_seconds": [p["wall_seconds"] for p in report["per_round"]],
        "rewards_total_tokens": {m: round(w / 1e18, 2) for m, w in report["rewards_total_wei"].items()},
        "phase_blocks": {k: v for k, v in report["phases"].items() if k.endswith("_blocks")},
        "samples": {
            p["round"]: p["samples"].get("samples") or p["samples"].get("error")
            for p in report["per_round"]
            if "samples" in p
        },
    }
    print("\n".join(f"phase window {line}" for line in report["phases"]["derivation"]))
    print(json.dumps(summary, indent=1))
    print(f"report: {args.dir / 'report.json'} and {args.dir / 'report.png'}")
    model = report.get("model", {})
    if "dir" in model:
        print(
            f"model: theta_{model['theta_round']} (checked against the chain) in {model['dir']}; try\n"
            f"  tessera model sample {model['dir']} --prompt {json.dumps(args.sample_prompt)}\n"
            f"  tessera model eval {model['dir']} --run-file {args.dir / 'run.json'}"
        )
    else:
        print(f"model: not exported ({model.get('error', 'no devnet report')})")
