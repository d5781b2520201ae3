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
    init.add_argument(
        "--tokenizer",
        default=None,
        metavar="FILE",
        help="a BPE tokenizer file (tessera runspec tokenizer): pinned by SHA-256, the model's vocab_size "
        "follows it (default: byte-level tokens)",
    )
    init.add_argument("--genesis-seed", type=int, default=0, help="seed of theta_0")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.set_defaults(handler=_init)
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
    model = ModelConfig(mode=args.mode)
    tokenizer = None
    if args.tokenizer is not None:
        tokenizer = tokenizer_spec(args.tokenizer)
        model = replace(model, vocab_size=tokenizer.vocab_size)
    spec = RunSpec(
        model=model,
        inner=inner,
        corpus=args.corpus,
        genesis_seed=args.genesis_seed,
        corpus_digest=corpus_digest,
        tokenizer=tokenizer,
    )
    spec = RunSpec.from_json(spec.to_json())  # the same validation a node applies when it loads the file
    spec.load_tokenizer()
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
        "tokenizer": "bytes (vocab 256)" if spec.tokenizer is None else spec.tokenizer.to_json(),
        "vocab_size": spec.model.vocab_size,
        "deploy_with": f"tessera contracts deploy --run-file {path} ...",
    }


def tokenizer_spec(path: str) -> Any:
    """A ``protocol.runspec.TokenizerSpec`` pinning the BPE tokenizer file at ``path``."""
    from protocol.runspec import TokenizerSpec
    from tessera.errors import TesseraError
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
    from training.corpus import load_bundled_corpus, load_corpus_path
    from training.data import is_heldout
    from training.tokenizer import train_bpe

    docs = (load_bundled_corpus() if corpus == "bundled" else load_corpus_path(corpus)).documents
    texts = [d.data.decode("utf-8", errors="replace") for d in docs if not is_heldout(d.id)]
    out.write_bytes(train_bpe(texts, vocab, min_frequency))
    return tokenizer_spec(str(out))


def _tokenizer(args: argparse.Namespace) -> int:
    from tessera.errors import TesseraError

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
