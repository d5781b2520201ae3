"""``tessera bench training``: compressed DiLoCo against synchronous data-parallel training.

Figures (printed, and written to ``<out>/training.json`` with PNGs):

- communication: codec payload bits (and whole wire-message bits) per trained parameter per inner step
  of the chosen configuration; synchronous data parallelism all-reduces 32;
- quality: final held-out loss of the miners' model against the synchronous baseline at equal tokens,
  equal model and identical batches, in MoE and DiPaCo mode;
- trade-off: loss gap against bits per parameter per step as H, density, chunking, bits and the outer
  optimizer vary (table + plot);
- overhead: the miner's inner loop (transcript digests every k steps included) against a plain PyTorch
  loop on the same model and batches, in tokens per second;
- codec speed: compress + decompress throughput in MB/s of fp32 input.

The default is a quick, small run (minutes on 2 CPU cores); ``--full`` is the campaign recorded in
docs/benchmarks.md. This module's import is light; everything heavy is imported inside ``main``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``tessera bench training``."""
    p.add_argument("--out", default="bench-training", help="output directory")
    p.add_argument("--full", action="store_true", help="the long campaign (>= 50 outer rounds per mode)")
    p.add_argument("--rounds", type=int, help="override the number of outer rounds of the quality runs")
    p.add_argument("--tradeoff-rounds", type=int, help="outer rounds (at H=30) of each trade-off run")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument(
        "--mode",
        choices=["moe", "dipaco"],
        action="append",
        help="quality runs for these modes (default both)",
    )
    p.add_argument(
        "--reference", action="store_true", help="also run uncompressed DiLoCo against the same baseline"
    )
    p.add_argument(
        "--only",
        choices=["codec", "overhead", "quality", "tradeoff"],
        action="append",
        help="run only these parts (repeatable)",
    )


# The configuration the figures are about (see docs/training.md for why).
CHOSEN: dict[str, Any] = {
    "inner_steps": 30,
    "codec": {"name": "topk", "chunk": 4096, "topk": 32, "bits": 2, "transform": "dct", "ef_beta": 1.0},
    "outer": {"lr": 1.0, "momentum": 0.0, "nesterov": False, "merge": "mean"},
}


def _scale(full: bool) -> dict[str, Any]:
    if full:
        return {
            "model": {"seq_len": 64, "d_model": 64, "n_heads": 4, "n_layers": 2, "d_ff": 128},
            "rounds": 60,
            "batch": 8,
        }
    return {
        "model": {"seq_len": 32, "d_model": 32, "n_heads": 2, "n_layers": 2, "d_ff": 64},
        "rounds": 12,
        "batch": 4,
    }


def _run_config(
    mode: str, scale: dict[str, Any], rounds: int, h: int, codec: dict[str, Any], outer: dict[str, Any]
) -> Any:
    from training.config import CodecConfig, InnerConfig, ModelConfig, OuterConfig, RunConfig

    model = ModelConfig(mode=mode, n_experts=4, top_k=2, n_choices=2, **scale["model"])  # type: ignore[arg-type]
    inner = InnerConfig(
        steps=h,
        batch_size=scale["batch"],
        lr=3e-3,
        warmup_steps=min(100, max(1, h * rounds // 10)),
        total_steps=h * rounds,
        transcript_interval=min(10, h),
        carry_optimizer=False,
    )
    return RunConfig(model, inner, OuterConfig(**outer), CodecConfig(**codec))


def quality_run(
    mode: str,
    scale: dict[str, Any],
    rounds: int,
    h: int,
    codec: dict[str, Any] | None,
    outer: dict[str, Any],
    corpus: Any,
    baseline: list[float] | None = None,
    eval_every: int = 1,
) -> dict[str, Any]:
    """Run the miners (and the baseline unless given) for ``rounds``; per-round losses and bit counts."""
    from tessera.commands.simulate import wire_transport
    from training.data import prepare
    from training.model import module_params
    from training.simulation import Baseline, Simulation

    run = _run_config(mode, scale, rounds, h, codec or CHOSEN["codec"], outer)
    ds = prepare(corpus, run.model)
    miners = [f"0x{i + 1:040x}" for i in range(4)]
    sim = Simulation(run, ds, miners, compress=codec is not None, transport=wire_transport(run.codec))
    base = Baseline(sim) if baseline is None else None
    losses, base_losses, wire_bytes, payload_bits = [], [], 0, []
    t0 = time.perf_counter()
    for r in range(rounds):
        ev = (r + 1) % eval_every == 0 or r == rounds - 1
        st = sim.step(r, evaluate_after=ev)
        wire_bytes += st.bytes_sent
        payload_bits.append(st.payload_bits_per_param_step)
        if ev:
            losses.append((r + 1, st.eval_loss))
        if base is not None:
            b = base.step(r, evaluate_after=ev)
            if ev:
                base_losses.append((r + 1, b.eval_loss))
    per_round_params = sum(
        sum(t.numel() for t in module_params(sim.params, a.module_ids).values())
        for a in sim.assignments(0).values()
    )
    final = losses[-1][1]
    base_curve = baseline if baseline is not None else [loss for _, loss in base_losses]
    base_final = base_curve[-1]
    return {
        "mode": mode,
        "rounds": rounds,
        "inner_steps": h,
        "codec": codec,
        "outer": outer,
        "params": sum(t.numel() for t in sim.params.values()),
        "tokens": rounds * h * run.inner.batch_size * run.model.seq_len * len(miners),
        "eval_loss": losses,
        "baseline_eval_loss": base_losses if baseline is None else None,
        "final_loss": final,
        "final_baseline_loss": base_final,
        "gap_pct": 100.0 * (final - base_final) / base_final,
        "payload_bits_per_param_step": sum(payload_bits) / len(payload_bits),
        "wire_bits_per_param_step": 8.0 * wire_bytes / (per_round_params * rounds * h),
        "seconds": time.perf_counter() - t0,
        "_baseline_curve": base_curve,
    }


def codec_speed(n_values: int = 1 << 22, repeats: int = 3) -> list[dict[str, Any]]:
    """Compress + decompress MB/s (fp32 input) for the codecs the bench uses, on the CPU."""
    import torch

    from training.codecs import decode, encode, encoded_bits
    from training.config import CodecConfig

    x = torch.randn(n_values, generator=torch.Generator().manual_seed(0))
    rows = []
    for label, cfg in [
        ("top-32/4096, 2-bit", CodecConfig(topk=32, bits=2)),
        ("top-64/4096, 2-bit", CodecConfig(topk=64, bits=2)),
        ("top-64/4096, 4-bit", CodecConfig(topk=64, bits=4)),
        ("top-32/4096, 2-bit, DCT", CodecConfig(topk=32, bits=2, transform="dct")),
        ("dense 8-bit", CodecConfig(name="dense", bits=8)),
    ]:
        best_e = best_d = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            enc = encode(x, cfg)
            t1 = time.perf_counter()
            decode(enc, cfg)
            t2 = time.perf_counter()
            best_e, best_d = min(best_e, t1 - t0), min(best_d, t2 - t1)
        mb = 4 * n_values / 1e6
        rows.append(
            {
                "codec": label,
                "device": "cpu",
                "input_mb": mb,
                "compress_mb_s": mb / best_e,
                "decompress_mb_s": mb / best_d,
                "round_trip_mb_s": mb / (best_e + best_d),
                "bits_per_value": encoded_bits((n_values,), cfg) / n_values,
            }
        )
    return rows


def overhead(scale: dict[str, Any], steps: int = 30, repeats: int = 3) -> dict[str, Any]:
    """Tokens/s of ``train_inner`` (transcript every k steps) against a plain PyTorch AdamW loop."""
    import torch

    from training.assignment import assign
    from training.corpus import load_bundled_corpus
    from training.data import miner_batches, prepare
    from training.inner import train_inner
    from training.model import build_model, lm_loss, module_params, param_state

    run = _run_config("moe", scale, 10, steps, CHOSEN["codec"], CHOSEN["outer"])
    ds = prepare(load_bundled_corpus(), run.model)
    a = assign(b"bench", ["m0"], run.model)["m0"]
    batches = miner_batches(ds, b"bench", a, steps, run.inner.batch_size, run.model.seq_len)
    theta = param_state(build_model(run.model))
    tokens = steps * run.inner.batch_size * run.model.seq_len

    def plain() -> float:
        model = build_model(run.model)
        trained = set(module_params(dict(model.named_parameters()), a.module_ids))
        params = [p for n, p in model.named_parameters() if n in trained]
        for n, p in model.named_parameters():
            p.requires_grad_(n in trained)
        opt = torch.optim.AdamW(params, lr=run.inner.lr, betas=(0.9, 0.95), weight_decay=0.1, foreach=False)
        t0 = time.perf_counter()
        for s in range(steps):
            _, loss = lm_loss(model, batches[s])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=False)
            opt.step()
        return time.perf_counter() - t0

    def miner() -> float:
        model = build_model(run.model)
        t0 = time.perf_counter()
        train_inner(run.model, run.inner, theta, a, batches, 0, model=model)
        return time.perf_counter() - t0

    plain_t, miner_t = [], []
    for _ in range(repeats):
        plain_t.append(plain())
        miner_t.append(miner())
    p, m = min(plain_t), min(miner_t)
    return {
        "steps": steps,
        "tokens": tokens,
        "transcript_interval": run.inner.transcript_interval,
        "plain_tokens_per_s": tokens / p,
        "miner_tokens_per_s": tokens / m,
        "ratio_pct": 100.0 * p / m,
    }


def _plot_curves(path: Path, runs: dict[str, dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 4), squeeze=False)
    for ax, (mode, res) in zip(axes[0], runs.items(), strict=True):
        xs, ys = zip(*res["eval_loss"], strict=True)
        ax.plot(xs, ys, label=f"miners: {res['payload_bits_per_param_step']:.4f} bits/param/step")
        if res.get("fp32_diloco_eval_loss"):
            fx, fy = zip(*res["fp32_diloco_eval_loss"], strict=True)
            ax.plot(fx, fy, label="uncompressed DiLoCo (32 bits every H steps)")
        bx, by = zip(*res["baseline_eval_loss"], strict=True)
        ax.plot(bx, by, label="synchronous data-parallel (32 bits/param/step)")
        ax.set_title(f"{mode}: gap {res['gap_pct']:+.1f}% after {res['rounds']} rounds")
        ax.set_xlabel("outer round")
        ax.set_ylabel("held-out loss (nats/byte)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_tradeoff(path: Path, rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for r in rows:
        ax.scatter(r["payload_bits_per_param_step"], r["gap_pct"])
        ax.annotate(r["label"], (r["payload_bits_per_param_step"], r["gap_pct"]), fontsize=7)
    ax.set_xscale("log")
    ax.axvline(0.005, color="grey", ls="--", lw=0.8)
    ax.axhline(3.0, color="grey", ls="--", lw=0.8)
    ax.set_xlabel("payload bits per parameter per inner step (log)")
    ax.set_ylabel("final held-out loss gap vs synchronous (%)")
    ax.set_title("trade-off: communication vs quality")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def tradeoff_grid(full: bool) -> list[tuple[str, int, dict[str, Any] | None, dict[str, Any]]]:
    """(label, H, codec or None for fp32, outer) of the trade-off study; the chosen config is first."""
    avg = CHOSEN["outer"]
    nest = {"lr": 0.7, "momentum": 0.9, "nesterov": True, "merge": "mean"}
    c = CHOSEN["codec"]
    grid: list[tuple[str, int, dict[str, Any] | None, dict[str, Any]]] = [
        ("chosen: top-32/4096 2b DCT, EF, average", CHOSEN["inner_steps"], c, avg),
        ("fp32 DiLoCo, average", 30, None, avg),
        ("top-32 2b DCT, EF, Nesterov 0.7/0.9", 30, c, nest),
    ]
    if full:
        grid += [
            ("fp32 DiLoCo, Nesterov 0.7/0.9", 30, None, nest),
            ("top-32 2b, SparseLoCo EF beta 0.95", 30, {**c, "ef_beta": 0.95}, avg),
            ("top-32 2b, sender-mean merge", 30, c, {**avg, "merge": "sender_mean"}),
            ("top-16 2b", 30, {**c, "topk": 16}, avg),
            ("top-64 2b", 30, {**c, "topk": 64}, avg),
            ("top-32 8b", 30, {**c, "bits": 8}, avg),
            ("top-32 2b, no DCT", 30, {**c, "transform": "none"}, avg),
            (
                "top-2/256 2b (small chunks, no DCT)",
                30,
                {**c, "chunk": 256, "topk": 2, "transform": "none"},
                avg,
            ),
            ("top-32 2b, H=15", 15, c, avg),
            ("top-32 2b, H=60", 60, c, avg),
            ("top-256 8b", 30, {**c, "topk": 256, "bits": 8}, avg),
            ("top-1024 8b", 30, {**c, "topk": 1024, "bits": 8}, avg),
        ]
    return grid


def main(args: argparse.Namespace) -> int:
    """Run the benchmark; print the figures; write JSON and PNGs under ``args.out``."""
    import torch

    from training.corpus import load_bundled_corpus

    torch.set_num_threads(max(1, args.threads))
    parts = set(args.only or ["codec", "overhead", "quality", "tradeoff"])
    scale = _scale(args.full)
    rounds = args.rounds or scale["rounds"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    corpus = load_bundled_corpus()
    result: dict[str, Any] = {
        "command": "tessera bench training" + (" --full" if args.full else ""),
        "scale": scale,
        "rounds": rounds,
        "miners": 4,
        "chosen": CHOSEN,
        "corpus_digest": corpus.digest,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    if "codec" in parts:
        result["codec_speed"] = codec_speed(n_values=(1 << 22) if args.full else (1 << 20))
        for row in result["codec_speed"]:
            print(
                f"codec {row['codec']:<26} {row['round_trip_mb_s']:8.1f} MB/s round trip, {row['bits_per_value']:.4f} bits/value"
            )
    if "overhead" in parts:
        result["overhead"] = overhead(_scale(True))  # the campaign's model: what a miner runs
        o = result["overhead"]
        print(
            f"overhead: miner loop {o['miner_tokens_per_s']:.0f} tok/s vs plain {o['plain_tokens_per_s']:.0f} tok/s = {o['ratio_pct']:.1f}%"
        )
    baselines: dict[tuple[str, str, int, int], list[float]] = {}
    if "quality" in parts:
        runs = {}
        for mode in args.mode or ["moe", "dipaco"]:
            res = quality_run(
                mode, scale, rounds, CHOSEN["inner_steps"], CHOSEN["codec"], CHOSEN["outer"], corpus
            )
            baselines[(mode, json.dumps(scale), CHOSEN["inner_steps"], rounds)] = res["_baseline_curve"]
            runs[mode] = res
            if args.reference:
                ref = quality_run(
                    mode, scale, rounds, 30, None, CHOSEN["outer"], corpus, baseline=res["_baseline_curve"]
                )
                res["fp32_diloco_final_loss"] = ref["final_loss"]
                res["fp32_diloco_gap_pct"] = ref["gap_pct"]
                res["fp32_diloco_eval_loss"] = ref["eval_loss"]
                print(
                    f"quality {mode}: uncompressed DiLoCo (average) {ref['final_loss']:.4f} (gap {ref['gap_pct']:+.2f}%)"
                )
            print(
                f"quality {mode}: loss {res['final_loss']:.4f} vs synchronous {res['final_baseline_loss']:.4f} "
                f"(gap {res['gap_pct']:+.2f}%), {res['payload_bits_per_param_step']:.5f} payload bits/param/step, "
                f"{res['wire_bits_per_param_step']:.5f} wire bits/param/step"
            )
            _plot_curves(out / "training_quality.png", runs)
            result["quality"] = {
                m: {k: v for k, v in r.items() if not k.startswith("_")} for m, r in runs.items()
            }
            (out / "training.json").write_text(json.dumps(result, indent=1) + "\n")  # partial results survive
    if "tradeoff" in parts:
        rows = []
        # The grid runs on the small model (it has many rows); its own baselines, equal tokens per row.
        t_scale = _scale(False)
        t_rounds = args.tradeoff_rounds or (50 if args.full else rounds)
        total_steps = t_rounds * 30
        mode = "dipaco"
        for label, h, codec, outer in tradeoff_grid(args.full):
            r_count = max(1, total_steps // h)
            key = (mode, json.dumps(t_scale), h, r_count)
            res = quality_run(
                mode,
                t_scale,
                r_count,
                h,
                codec,
                outer,
                corpus,
                baseline=baselines.get(key),
                eval_every=r_count,
            )
            baselines.setdefault(key, res["_baseline_curve"])
            row = {
                "label": label,
                **{
                    k: v
                    for k, v in res.items()
                    if k
                    in (
                        "inner_steps",
                        "rounds",
                        "codec",
                        "outer",
                        "final_loss",
                        "final_baseline_loss",
                        "gap_pct",
                        "payload_bits_per_param_step",
                        "wire_bits_per_param_step",
                    )
                },
            }
            rows.append(row)
            print(
                f"trade-off {label:<28} H={h:<3} gap {row['gap_pct']:+6.2f}%  {row['payload_bits_per_param_step']:.5f} bits/param/step",
                flush=True,
            )
            result["tradeoff"] = {"mode": mode, "scale": t_scale, "rows": rows}
            (out / "training.json").write_text(json.dumps(result, indent=1) + "\n")  # partial results survive
        result["tradeoff"] = {"mode": mode, "scale": t_scale, "rows": rows}
        _plot_tradeoff(out / "training_tradeoff.png", rows)
    (out / "training.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out / 'training.json'}")
    return 0
