"""``tessera simulate``: R rounds of N miners in one process (no chain, no network), with a report.

Every update goes through the real wire format (``protocol.wire.update``: encoded, digested, decoded and
checked) before it is merged, so the bytes reported are the bytes a miner would send.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from tqdm import tqdm

from tessera.errors import TesseraError
from training.config import CodecConfig, InnerConfig, ModelConfig, OuterConfig, RunConfig
from training.corpus import load_bundled_corpus, parse_corpus


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments shared by ``simulate`` and ``bench training``: model, inner loop, codec, outer step, data."""
    p.add_argument("--mode", choices=["moe", "dipaco", "dense"], default="moe", help="model mode")
    p.add_argument("--miners", type=int, default=4, help="N miners")
    p.add_argument("--inner-steps", type=int, default=30, help="H inner steps per round")
    p.add_argument("--batch", type=int, default=8, help="sequences per inner step per miner")
    p.add_argument("--seq-len", type=int, default=64, help="context length (bytes)")
    p.add_argument("--d-model", type=int, default=64, help="model width")
    p.add_argument("--layers", type=int, default=2, help="trunk layers / DiPaCo levels")
    p.add_argument("--experts", type=int, default=4, help="experts per MoE layer")
    p.add_argument("--lr", type=float, default=3e-3, help="peak inner AdamW learning rate")
    p.add_argument("--topk", type=int, default=32, help="values kept per chunk")
    p.add_argument("--chunk", type=int, default=4096, help="values per chunk")
    p.add_argument("--bits", type=int, default=2, choices=[2, 4, 8, 32], help="bits per kept value")
    p.add_argument(
        "--transform",
        choices=["dct", "none"],
        default="dct",
        help="select values in the 2-D DCT basis of 64x64 tiles (needs --chunk 4096) or as they are",
    )
    p.add_argument("--ef-beta", type=float, default=1.0, help="error-feedback decay")
    p.add_argument("--no-compress", action="store_true", help="send fp32 pseudo-gradients (plain DiLoCo)")
    p.add_argument(
        "--outer",
        choices=["nesterov", "average"],
        default="average",
        help="outer step: DiLoCo Nesterov (lr 0.7, momentum 0.9) or plain averaging",
    )
    p.add_argument("--outer-lr", type=float, help="override the outer learning rate")
    p.add_argument("--merge", choices=["mean", "sender_mean"], default="mean", help="per-value merge")
    p.add_argument("--corpus", help="your own corpus file (default: the bundled corpus)")
    p.add_argument("--corpus-format", choices=["jsonl", "text"], default="jsonl", help="format of --corpus")
    p.add_argument("--seed", type=int, default=0, help="run seed (init and round seeds)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")


def run_config(args: argparse.Namespace, rounds: int) -> Any:
    """The :class:`training.config.RunConfig` the arguments describe."""
    model = ModelConfig(
        mode=args.mode,
        seq_len=args.seq_len,
        d_model=args.d_model,
        n_heads=max(1, args.d_model // 16),
        n_layers=args.layers,
        d_ff=2 * args.d_model,
        n_experts=args.experts,
        top_k=min(2, args.experts),
    )
    steps = args.inner_steps
    inner = InnerConfig(
        steps=steps,
        batch_size=args.batch,
        lr=args.lr,
        warmup_steps=min(100, max(1, steps * rounds // 10)),
        total_steps=steps * rounds,
        transcript_interval=min(10, steps),
    )
    outer = OuterConfig() if args.outer == "nesterov" else OuterConfig.plain_average()
    outer = OuterConfig(
        lr=args.outer_lr if args.outer_lr is not None else outer.lr,
        momentum=outer.momentum,
        nesterov=outer.nesterov,
        merge=args.merge,
    )
    codec = CodecConfig(
        name="topk",
        chunk=args.chunk,
        topk=args.topk,
        bits=args.bits,
        transform=args.transform,
        ef_beta=args.ef_beta,
    )
    return RunConfig(model, inner, outer, codec)


def load_corpus(args: argparse.Namespace) -> Any:
    """The bundled corpus, or the user's file named by ``--corpus``."""
    if args.corpus:
        path = Path(args.corpus)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise TesseraError(f"cannot read corpus {path}: {exc.strerror}") from exc
        return parse_corpus(data, args.corpus_format, path.name)
    return load_bundled_corpus()


def plot_report(path: Path, series: dict[str, list[float]], ylabel: str, title: str) -> None:
    """A line plot of named series over rounds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, ys in series.items():
        ax.plot(range(1, len(ys) + 1), ys, label=name)
    ax.set_xlabel("outer round")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def register(subparsers: Any) -> None:
    """Add ``tessera simulate``."""
    p = subparsers.add_parser("simulate", help="simulate R rounds of N miners in one process")
    p.add_argument("--rounds", type=int, default=10, help="R outer rounds")
    add_run_arguments(p)
    p.add_argument("--baseline", action="store_true", help="also run synchronous data-parallel training")
    p.add_argument("--out", default="simulation-report", help="report directory")
    p.set_defaults(handler=_simulate)


def _simulate(args: argparse.Namespace) -> int:
    import torch

    from tessera.simwire import wire_transport
    from training.data import prepare
    from training.simulation import Baseline, Simulation

    if args.rounds < 1 or args.miners < 1:
        raise TesseraError("--rounds and --miners must be positive")
    torch.set_num_threads(max(1, args.threads))
    run = run_config(args, args.rounds)
    ds = prepare(load_corpus(args), run.model)
    transport = wire_transport(run.codec, run.model)
    miners = [f"0x{i + 1:040x}" for i in range(args.miners)]
    sim = Simulation(run, ds, miners, run_seed=args.seed, compress=not args.no_compress, transport=transport)
    base = Baseline(sim) if args.baseline else None
    rows: list[dict[str, Any]] = []
    bar = tqdm(range(args.rounds), desc=f"simulate {args.mode}", unit="round")
    for r in bar:
        st = sim.step(r)
        row = dataclasses.asdict(st)
        if base is not None:
            row["baseline_eval_loss"] = base.step(r).eval_loss
        rows.append(row)
        bar.set_postfix(loss=f"{st.eval_loss:.3f}", kB=f"{st.bytes_sent / 1e3:.1f}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "command": "tessera simulate",
        "run": dataclasses.asdict(run),
        "miners": miners,
        "corpus_digest": ds.corpus_digest,
        "compress": not args.no_compress,
        "rounds": rows,
        "final_eval_loss": rows[-1]["eval_loss"],
        "total_bytes_sent": sum(r["bytes_sent"] for r in rows),
    }
    if base is not None:
        report["final_baseline_eval_loss"] = rows[-1]["baseline_eval_loss"]
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    label = "miners (uncompressed DiLoCo)" if args.no_compress else "miners (compressed DiLoCo)"
    series = {label: [r["eval_loss"] for r in rows]}
    if base is not None:
        series["synchronous data-parallel"] = [r["baseline_eval_loss"] for r in rows]
    plot_report(out / "loss.png", series, "held-out loss (nats/byte)", f"tessera simulate: {args.mode}")
    plot_report(
        out / "bytes.png", {"bytes sent": [r["bytes_sent"] for r in rows]}, "bytes per round", "wire bytes"
    )
    print(
        f"final held-out loss {report['final_eval_loss']:.4f}"
        + (f" (baseline {report['final_baseline_eval_loss']:.4f})" if base is not None else "")
        + f"; {report['total_bytes_sent']} bytes sent; report in {out}/"
    )
    return 0
