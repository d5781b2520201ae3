"""``tessera model``: the trained model back out of the network (export, eval, sample).

``export`` takes a checkpoint from a node (``--from http://validator:port``) or a file, checks its digest
against the certificate on chain (``--deployment``, newest certified round unless ``--round``), and writes
``model.safetensors`` (theta, fp32) and ``config.json`` (``--format tessera``, the default), or a directory
Hugging Face transformers loads with ``AutoModelForCausalLM.from_pretrained`` (``--format hf``: GPT-2 for
a dense model and each DiPaCo path, ``path-N/``; a custom model for MoE, ``trust_remote_code=True``).
``eval`` reports held-out loss and perplexity on the run's corpus; ``sample`` continues a prompt; both
read either format and refuse a directory with a file missing or altered.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from protocol.rounds.deployment import Deployment
from tessera.errors import TesseraError


def register(subparsers: Any) -> None:
    """Add ``tessera model``."""
    parser = subparsers.add_parser(
        "model",
        help="export a certified checkpoint, evaluate it, generate text from it",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="model_command", metavar="ACTION")
    ex = _add_export(sub)
    ev = sub.add_parser("eval", help="held-out loss and perplexity of an exported model")
    ev.add_argument("model_dir", type=Path)
    ev.add_argument("--run-file", type=Path, default=Path("run.json"), help="the run's run.json (its corpus)")
    ev.add_argument("--windows", type=int, default=64, help="held-out windows (per path in DiPaCo mode)")
    ev.set_defaults(handler=_eval)
    sa = sub.add_parser("sample", help="continue a prompt with an exported model")
    sa.add_argument("model_dir", type=Path)
    sa.add_argument("--prompt", default="The ", help="text to continue")
    sa.add_argument("--length", type=int, default=200, help="tokens to generate (bytes, byte-level)")
    sa.add_argument(
        "--temperature",
        type=float,
        default=0.8,
        help="softmax temperature (default 0.8, as the devnet's samples; 0: greedy, which repeats itself "
        "in a small model)",
    )
    sa.add_argument("--top-k", type=int, default=40, help="sample among the k likeliest tokens (default 40)")
    sa.add_argument(
        "--seed", type=int, default=0, help="sampling seed (default 0: the devnet's first sample)"
    )
    sa.add_argument("--path", type=int, default=0, help="DiPaCo mode: which path (index into all paths)")
    sa.set_defaults(handler=_sample)
    for p in (ex, ev, sa):
        p.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=lambda args: (parser.print_help(), 1)[1])


def _add_export(sub: Any) -> argparse.ArgumentParser:
    """Add ``tessera model export`` to ``sub``; returns its parser."""
    ex: argparse.ArgumentParser = sub.add_parser(
        "export", help="check a checkpoint against the chain and write safetensors + config"
    )
    ex.add_argument(
        "--from",
        dest="source",
        required=True,
        help="a node's URL, a checkpoint blob file, or an exported model's directory (to change its format)",
    )
    ex.add_argument(
        "--deployment", type=Path, help="deployment file: the digest is checked against the chain"
    )
    ex.add_argument("--rpc-url", default=None, help="JSON-RPC endpoint (default: the deployment's)")
    ex.add_argument("--round", type=int, default=None, help="export theta_ROUND (default: newest certified)")
    ex.add_argument("--digest", default=None, help="expected 0x digest, when no --deployment is given")
    ex.add_argument("--run-file", type=Path, default=Path("run.json"), help="the run's run.json")
    ex.add_argument("--out", type=Path, required=True, help="directory to write")
    ex.add_argument(
        "--format",
        choices=("tessera", "hf"),
        default="tessera",
        help="tessera: model.safetensors + config.json (default); hf: a directory Hugging Face "
        "transformers loads (GPT-2, or for MoE a custom model needing trust_remote_code=True; DiPaCo: "
        "one per path, path-N/)",
    )
    ex.add_argument(
        "--path",
        dest="paths",
        metavar="N",
        type=int,
        action="append",
        help="--format hf of a DiPaCo model: write path N (repeatable; default every path, up to 16)",
    )
    ex.set_defaults(handler=_export)
    return ex


def _export(args: argparse.Namespace) -> int:
    from protocol.runspec import RunSpec
    from tessera.modelout import certified_digest, export, fetch_checkpoint, theta_of, theta_of_export

    spec = RunSpec.load(args.run_file)
    certified = None
    expect = args.digest
    if args.deployment is not None:
        from protocol.chain import Chain

        chain = Chain.connect(Deployment.load(args.deployment), rpc_url=args.rpc_url)
        certified = certified_digest(chain, args.round)
        expect = certified.digest
    checked = "chain" if certified else ("--digest" if expect else "nothing (no --deployment)")
    if Path(args.source).is_dir():  # an export, e.g. the devnet's model/: the same theta in another format
        params, digest, recorded = theta_of_export(Path(args.source), spec.model, expect)
        if certified is None and recorded is not None:
            checked = f"{checked}; {args.source} records round {recorded.round}'s certificate"
        certified = certified or recorded
    else:
        params, digest = theta_of(fetch_checkpoint(args.source, expect), expect)
    export(params, spec, args.out, certified, digest, args.format, args.paths)
    out = {
        "out": str(args.out),
        "format": args.format,
        "checkpoint_digest": digest,
        "checked_against": checked,
        "round": certified.round if certified else None,
        "parameters": sum(v.numel() for v in params.values()),
    }
    _print(out, args.json)
    return 0


def _eval(args: argparse.Namespace) -> int:
    from protocol.runspec import RunSpec
    from tessera.modelout import evaluate, load_export

    params, cfg, doc = load_export(args.model_dir)
    spec = RunSpec.load(args.run_file)
    if spec.model != cfg:
        raise TesseraError(
            f"{args.model_dir} is not a model of the run {args.run_file} (model configs differ)"
        )
    out = {"model": str(args.model_dir), "checkpoint_digest": doc.get("checkpoint_digest")}
    out.update({k: round(v, 6) for k, v in evaluate(params, spec, args.windows).items()})
    _print(out, args.json)
    return 0


def _sample(args: argparse.Namespace) -> int:
    from tessera.modelout import export_tokenizer, load_export, model_with, sample
    from training.model import all_paths

    params, cfg, doc = load_export(args.model_dir)
    paths = all_paths(cfg)
    if not 0 <= args.path < len(paths):
        raise TesseraError(f"--path must be in [0, {len(paths) - 1}]")
    path = paths[args.path] if cfg.mode == "dipaco" else None
    text = sample(
        model_with(params, cfg),
        args.prompt,
        max_new=args.length,
        temperature=args.temperature,
        top_k=args.top_k,
        seed=args.seed,
        path=path,
        tokenizer=export_tokenizer(args.model_dir, doc),
    )
    if args.json:
        print(json.dumps({"prompt": args.prompt, "text": text}))
    else:
        print(args.prompt + text)
    return 0


def _print(out: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(out, sort_keys=True))
    else:
        for k, v in out.items():
            print(f"{k:>18}: {v}")
