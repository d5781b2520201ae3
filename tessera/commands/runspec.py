"""``tessera runspec``: write and inspect the run file (``run.json``) a launcher publishes.

The run file fixes the model, inner loop, outer step, codec, corpus, tokenizer and the seed of theta_0; every
miner and
validator loads the same file. Its theta_0 digest is the genesis checkpoint the contracts are deployed
with (``tessera contracts deploy --run-file run.json``); a node whose run file does not match the chain's
genesis refuses to start.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from tessera.errors import TesseraError
from training.corpus import load_bundled_corpus, load_corpus_path


def register(subparsers: Any) -> None:
    """Add ``tessera runspec``."""
    parser = subparsers.add_parser(
        "runspec",
        help="write or show the run file (run.json) that fixes a run's math",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="runspec_command", metavar="ACTION")
    _add_init(sub)
    _add_estimate(sub)
    _add_tokenizer(sub)
    _add_show(sub)
    parser.set_defaults(handler=lambda args: (parser.print_help(), 1)[1])


def _add_init(sub: Any) -> None:
    """Add ``tessera runspec init`` (write a run file)."""
    init = sub.add_parser("init", help="write a run file and print its digest and genesis checkpoint")
    init.add_argument("--out", type=Path, default=Path("run.json"), help="file to write")
    init.add_argument("--mode", choices=["moe", "dipaco", "dense"], default="moe", help="model mode")
    init.add_argument(
        "--preset",
        default="tiny",
        help="model size: tiny (default, ~0.2M), 1m, 10m, 50m, 125m (see `tessera runspec estimate`)",
    )
    init.add_argument(
        "--inner-steps", type=int, default=None, help="H, inner steps per round (default: the recipe's, 60)"
    )
    init.add_argument(
        "--batch-size", type=int, default=None, help="sequences per inner step (default: the preset's)"
    )
    init.add_argument(
        "--corpus",
        default="bundled",
        help="'bundled' or a .txt/.jsonl file or a folder of them; its content digest is pinned "
        "in the run file as corpus_digest",
    )
    init.add_argument(
        "--tokenizer",
        default=None,
        metavar="FILE",
        help="a BPE tokenizer file (tessera runspec tokenizer): pinned by SHA-256, the model's vocab_size "
        "follows it (default: byte-level tokens)",
    )
    init.add_argument("--genesis-seed", type=int, default=0, help="seed of theta_0")
    init.add_argument(
        "--epoch-rounds",
        type=int,
        default=None,
        help="rounds a DiPaCo assignment is kept (default: the recipe's, 8 in dipaco, 1 otherwise)",
    )
    init.add_argument(
        "--miners",
        type=int,
        default=None,
        help="miners the run plans for (the audit section: an honest miner's pay, hence q; default 4)",
    )
    init.add_argument(
        "--validators",
        type=int,
        default=None,
        help="validators the run plans for (the audit section: a committee's catch odds; default 2)",
    )
    init.add_argument(
        "--merge",
        default="mean",
        help="how validators merge accepted updates, a method of training.merge (miners rebuild "
        "theta_{r+1} the same way; default mean)",
    )
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.set_defaults(handler=_init)


def _add_estimate(sub: Any) -> None:
    """Add ``tessera runspec estimate`` (a preset's or run file's cost)."""
    est = sub.add_parser(
        "estimate",
        help="parameters, memory per miner and validator, and time per inner step and round of presets "
        "or a run file, measured on this machine",
        description="For each preset (or the run file given): parameter counts (total, a miner's trained "
        "modules), memory per miner and per validator in fp32 (parameters, gradients, AdamW moments, "
        "activations at the run's batch and sequence length, transcript states), and the time of one inner "
        "step measured here (--steps AdamW steps after a warm-up, at --time-batch sequences scaled to the "
        "run's batch) times H for a round's training.",
    )
    est.add_argument("run_file", type=Path, nargs="?", default=None, help="a run file (default: presets)")
    est.add_argument(
        "--preset", action="append", default=None, help="a preset name or 'all' (repeatable; default all)"
    )
    est.add_argument("--mode", choices=["moe", "dipaco", "dense"], default="moe", help="mode of the presets")
    est.add_argument("--vocab", type=int, default=256, help="vocabulary of the presets (BPE: its size)")
    est.add_argument(
        "--inner-steps", type=int, default=None, help="H for the presets (default: the recipe's, 60)"
    )
    est.add_argument("--steps", type=int, default=2, help="timed steps per model (0: do not time)")
    est.add_argument(
        "--time-batch", type=int, default=None, help="sequences per timed step (default: the run's batch)"
    )
    est.add_argument("--device", default=None, help="cpu, cuda, cuda:N (default: cuda if available)")
    est.add_argument("--json", action="store_true", help="print one JSON object")
    est.set_defaults(handler=_estimate)


def _add_tokenizer(sub: Any) -> None:
    """Add ``tessera runspec tokenizer`` (train a BPE tokenizer)."""
    tok = sub.add_parser(
        "tokenizer",
        help="train a byte-level BPE tokenizer on a corpus (its training documents) and write its file",
        description="Trains a byte-level BPE tokenizer (HuggingFace tokenizers) on the corpus's training "
        "documents (the held-out ones are left out) and writes its JSON file; the same corpus and settings "
        "give the same bytes on every machine. Pin it with `tessera runspec init --tokenizer FILE`.",
    )
    tok.add_argument(
        "--corpus", default="bundled", help="'bundled' or a .txt/.jsonl file or a folder of them"
    )
    tok.add_argument("--vocab", type=int, default=4096, help="vocabulary size (>= 257; default 4096)")
    tok.add_argument("--min-frequency", type=int, default=2, help="fewest occurrences of a merged pair")
    tok.add_argument("--out", type=Path, default=Path("tokenizer.json"), help="file to write")
    tok.add_argument("--force", action="store_true", help="overwrite an existing file")
    tok.set_defaults(handler=_tokenizer)


def _add_show(sub: Any) -> None:
    """Add ``tessera runspec show`` (print a run file)."""
    show = sub.add_parser("show", help="print a run file's digest, genesis checkpoint and settings")
    show.add_argument("run_file", type=Path, nargs="?", default=Path("run.json"))
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(handler=_show)


def _init(args: argparse.Namespace) -> int:
    from protocol.recipe import run_recipe
    from protocol.runspec import RunSpec

    if args.out.exists() and not args.force:
        raise TesseraError(f"{args.out} exists; pass --force to overwrite it")
    corpus, corpus_digest = "bundled", None
    if args.corpus != "bundled":
        corpus_digest = load_corpus_path(args.corpus).digest
        corpus = run_file_path(args.corpus, args.out)
    tokenizer = None
    if args.tokenizer is not None:
        tokenizer = replace(tokenizer_spec(args.tokenizer), file=run_file_path(args.tokenizer, args.out))
    spec = run_recipe(
        args.preset,
        args.mode,
        tokenizer=tokenizer,
        inner_steps=args.inner_steps,
        batch_size=args.batch_size,
        miners=args.miners,
        validators=args.validators,
        merge_method=args.merge,
        epoch_rounds=args.epoch_rounds,
        corpus=corpus,
        corpus_digest=corpus_digest,
        genesis_seed=args.genesis_seed,
    )
    # the same validation a node applies when it loads the file, paths resolved from where it is written
    spec = replace(RunSpec.from_json(spec.to_json()), base_dir=args.out.parent)
    spec.load_tokenizer()
    spec.save(args.out)
    print(json.dumps(summary(spec, args.out), indent=1))
    return 0


def run_file_path(path: str | Path, run_file: Path) -> str:
    """``path`` (as given on the command line: relative to the working directory, or absolute) as the run
    file at ``run_file`` names it: always relative to the run file's folder, where nodes resolve it
    (``protocol.runspec.RunSpec.resolve``) whatever their working directory, so the folder can be handed
    out as it is."""
    return Path(os.path.relpath(os.path.abspath(path), os.path.abspath(run_file.parent))).as_posix()


def summary(spec: Any, path: Path) -> dict[str, Any]:
    """What a launcher publishes about a run file."""
    return {
        "run_file": str(path),
        "digest": spec.digest(),
        "genesis_checkpoint": spec.genesis_digest(),
        "mode": spec.model.mode,
        "preset": preset_name(spec.model),
        "parameters": parameters(spec.model),
        "inner_steps": spec.inner.steps,
        "batch_size": spec.inner.batch_size,
        "corpus": spec.corpus,
        **({"corpus_digest": spec.corpus_digest} if spec.corpus_digest else {}),
        "tokenizer": "bytes (vocab 256)" if spec.tokenizer is None else spec.tokenizer.to_json(),
        "vocab_size": spec.model.vocab_size,
        "epoch_rounds": spec.epoch_rounds,
        "audits": None if spec.audits is None else spec.audits.to_json(),
        "deploy_with": f"tessera contracts deploy --run-file {path} ...",
    }


def preset_name(cfg: Any) -> str:
    """The preset a model config has the shape of, or ``custom``."""
    from training.presets import preset_of

    return preset_of(cfg) or "custom"


def parameters(cfg: Any) -> int:
    """Total parameters of a model config."""
    from training.presets import module_param_counts

    return sum(module_param_counts(cfg).values())


def _estimate(args: argparse.Namespace) -> int:
    import torch

    from protocol.rounds.auditspec import audit_serving
    from protocol.runspec import RunSpec
    from training.presets import PRESETS, estimate, get_preset

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    runs: list[tuple[str, Any, Any, int | None]] = []
    if args.run_file is not None:
        spec = RunSpec.load(args.run_file)
        runs.append((str(args.run_file), spec.model, spec.inner, spec.experts_per_miner))
    else:
        names = args.preset or ["all"]
        names = list(PRESETS) if "all" in names else names
        for name in names:
            p = get_preset(name)
            inner = p.inner()
            if args.inner_steps is not None:
                inner = replace(inner, steps=args.inner_steps)
            runs.append((name, p.model(args.mode, args.vocab), inner, None))
    rows = []
    for name, model, inner, epm in runs:
        e = estimate(model, inner, epm, time_steps=args.steps, time_batch=args.time_batch, device=device)
        rows.append({"name": name} | e | {"audit": audit_serving(e["params_trained_per_miner"])})
        if not args.json:
            _print_estimate(rows[-1])
    if args.json:
        print(json.dumps({"device": device, "estimates": rows}, sort_keys=True))
    return 0


def _print_estimate(e: dict[str, Any]) -> None:
    mib = 1 << 20
    m, v = e["miner_bytes"], e["validator_bytes"]
    print(
        f"{e['name']} ({e['model']['mode']}, d_model {e['model']['d_model']}, {e['model']['n_layers']} layers, "
        f"vocab {e['model']['vocab_size']}, batch {e['batch_size']} x seq {e['seq_len']}, H {e['inner_steps']})"
    )
    print(
        f"  parameters        {e['params_total'] / 1e6:9.2f}M total, "
        f"{e['params_trained_per_miner'] / 1e6:.2f}M trained per miner ({len(e['modules_per_miner'])} modules)"
    )
    print(
        "  miner memory      "
        f"{m['total'] / mib:9.1f} MiB = params {m['params'] / mib:.1f} + grads {m['grads'] / mib:.1f} + AdamW "
        f"{m['adamw_moments'] / mib:.1f} + activations {m['activations'] / mib:.1f} + transcript states "
        f"{m['transcript_states'] / mib:.1f}"
    )
    print(f"  validator memory  {v['total'] / mib:9.1f} MiB (checkpoint, outer momentum, merge, one replay)")
    a = e["audit"]
    print(
        f"  when audited      {a['audit_bytes'] / 1e6:9.2f} MB served, its largest part "
        f"{a['largest_part_bytes'] / 1e6:.2f} MB within {a['serve_window_s']:g} s: an upload of at least "
        f"{a['upload_mbit_s_needed']:g} Mbit/s (slower: the audit goes unanswered, slashed as a fake)"
    )
    if "seconds_per_inner_step" in e:
        print(
            f"  time ({e['device']})       {e['seconds_per_inner_step']:9.3f} s per inner step "
            f"({e['tokens_per_second']:,.0f} tokens/s; timed at batch {e['timed_batch']}), "
            f"{e['seconds_per_round_training']:.1f} s per round of training (H = {e['inner_steps']})"
        )


def tokenizer_spec(path: str) -> Any:
    """A ``protocol.runspec.TokenizerSpec`` pinning the BPE tokenizer file at ``path``."""
    from protocol.runspec import TokenizerSpec
    from training.tokenizer import BPETokenizer

    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise TesseraError(f"cannot read tokenizer file {path}: {exc}") from exc
    tok = BPETokenizer(data)
    return TokenizerSpec(file=str(path), digest=tok.digest, vocab_size=tok.vocab_size)


def train_tokenizer_file(corpus: str, vocab: int, out: Path, min_frequency: int = 2) -> Any:
    """Train a BPE tokenizer on ``corpus``'s training documents, write it to ``out``, return its
    ``TokenizerSpec``."""
    from training.data import is_heldout
    from training.tokenizer import train_bpe

    docs = (load_bundled_corpus() if corpus == "bundled" else load_corpus_path(corpus)).documents
    texts = [d.data.decode("utf-8", errors="replace") for d in docs if not is_heldout(d.id)]
    out.write_bytes(train_bpe(texts, vocab, min_frequency))
    return tokenizer_spec(str(out))


def _tokenizer(args: argparse.Namespace) -> int:
    if args.out.exists() and not args.force:
        raise TesseraError(f"{args.out} exists; pass --force to overwrite it")
    ts = train_tokenizer_file(args.corpus, args.vocab, args.out, args.min_frequency)
    print(
        json.dumps(
            {
                "tokenizer_file": str(args.out),
                "digest": ts.digest,
                "vocab_size": ts.vocab_size,
                "corpus": args.corpus,
                "pin_with": f"tessera runspec init --corpus {args.corpus} --tokenizer {args.out} ...",
            },
            indent=1,
        )
    )
    return 0


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
