"""``tessera bench presets``: a miner's inner loop at each model preset against a plain PyTorch loop.

For each preset and mode, the two loops below train the same model
(the preset's shape, theta_0 of seed 0), the same modules (a miner's assignment: the shared modules and
its experts, or its DiPaCo path), on the same random token batches (the preset's batch and sequence
length), with AdamW:

- ``miner``: ``training.inner.train_inner`` as a miner calls it (``keep_states=True``: the transcript's
  state digests every ``transcript_interval`` steps and the states kept to serve, the learning-rate
  schedule, gradient clipping, zero gradients for experts that routed no token);
- ``plain``: the textbook loop: ``zero_grad``, forward, loss, ``backward``, ``clip_grad_norm_``, ``step``.

One child times both loops in alternation (a warm-up round of each, then at least ``--repeats`` rounds
of ``--steps`` steps of each, and at least ``--min-seconds`` of each loop, miner then plain, so both see
the same load on a shared machine); tokens/s = steps x batch x seq_len / the fastest round. The figure of
merit (target >= 95%) is the median over the pairs of rounds of plain time / miner time: a pair ran
back to back under about the same load, where the fastest rounds of the two loops may have met
different loads (``miner_over_plain_best_pct`` is that ratio, for comparison). Two more children run one round of one loop
each for its peak resident set size (``ru_maxrss``), so each loop's memory is its own (on a GPU also the
CUDA allocator's peak, ``torch.cuda.max_memory_allocated``). Output: a table
and ``OUT/presets.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

DEFAULT_PRESETS = ("tiny", "1m", "10m")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The benchmark's options (``tessera bench presets``)."""
    p.add_argument("--out", default="bench-presets", help="output directory")
    p.add_argument(
        "--presets", default=",".join(DEFAULT_PRESETS), help="comma-separated presets (default tiny,1m,10m)"
    )
    p.add_argument("--modes", default="moe,dipaco", help="comma-separated modes (default moe,dipaco)")
    p.add_argument("--steps", type=int, default=20, help="inner steps per timed round (default 20)")
    p.add_argument("--repeats", type=int, default=3, help="least timed rounds per loop (default 3)")
    p.add_argument(
        "--min-seconds",
        type=float,
        default=10.0,
        help="keep timing rounds until each loop has run this long (default 10: small presets get more rounds)",
    )
    p.add_argument("--transcript-interval", type=int, default=10, help="k of the miner's transcript")
    p.add_argument("--threads", type=int, default=1, help="torch threads per child (a devnet node uses 1)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument(
        "--batch-size",
        type=int,
        default=0,
        help="sequences per step (default 0: the preset's; smaller fits a large preset in a small memory)",
    )


def child(
    preset: str,
    mode: str,
    kind: str,
    steps: int,
    repeats: int,
    interval: int,
    device: str,
    min_seconds: float = 0.0,
    batch_size: int = 0,
) -> dict[str, Any]:
    """One child's figures: ``kind`` ``both`` times the two loops in alternation, ``miner`` or ``plain``
    runs one loop (for its peak memory); ``batch_size`` 0 is the preset's."""
    import torch

    from training.inner import train_inner
    from training.model import module_params

    cfg, inner, a, theta, batches, model = loop_setup(preset, mode, steps, interval, batch_size, device)

    def miner_round() -> None:
        train_inner(cfg, inner, theta, a, batches, 0, keep_states=True, model=model, device=device)

    def plain_loop() -> None:
        plain_round(model, theta, a, inner, batches, device)

    times, cpu = _time_alternating(
        {"miner": miner_round, "plain": plain_loop}, kind, repeats, min_seconds, device
    )
    tokens = steps * inner.batch_size * cfg.seq_len
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    timed = {k: v[1:] or v for k, v in times.items()}
    cpu_timed = {k: v[1:] or v for k, v in cpu.items()}
    return {
        "preset": preset,
        "mode": mode,
        "loop": kind,
        "params_total": sum(v.numel() for v in theta.values()),
        "params_trained": sum(v.numel() for v in module_params(theta, a.module_ids).values()),
        "batch_size": inner.batch_size,
        "seq_len": cfg.seq_len,
        "steps": steps,
        "seconds": timed,
        "tokens_per_second": {k: tokens / min(v) for k, v in timed.items()},
        "paired_ratios": [p / m for m, p in zip(timed["miner"], timed["plain"], strict=True)]
        if kind == "both"
        else [],
        # the process's CPU seconds (every thread) per round: what a loaded machine's waits do not inflate
        "cpu_seconds": cpu_timed,
        "paired_cpu_ratios": [p / m for m, p in zip(cpu_timed["miner"], cpu_timed["plain"], strict=True)]
        if kind == "both"
        else [],
        "peak_rss_bytes": rss,
        # on a GPU the model lives in device memory: the allocator's peak (None on a CPU)
        "peak_cuda_bytes": torch.cuda.max_memory_allocated(device) if device.startswith("cuda") else None,
        "device": device,
        "threads": torch.get_num_threads(),
    }


def loop_setup(
    preset: str, mode: str, steps: int, interval: int, batch_size: int, device: str
) -> tuple[Any, Any, Any, Any, Any, Any]:
    """What both loops train: the preset's model config and inner config (``batch_size`` 0: the
    preset's), a miner's assignment, theta_0 of seed 0, ``steps`` random batches and the model on
    ``device``."""
    import torch

    from training.assignment import assign
    from training.model import build_model, param_state
    from training.presets import get_preset

    p = get_preset(preset)
    cfg = p.model(mode)
    inner = replace(p.inner(), steps=steps, transcript_interval=interval)
    if batch_size:
        inner = replace(inner, batch_size=batch_size)
    a = assign(b"\0" * 32, ["miner"], cfg)["miner"]
    theta = param_state(build_model(cfg, seed=0))
    gen = torch.Generator().manual_seed(1)
    batches = torch.randint(1, cfg.vocab_size, (steps, inner.batch_size, cfg.seq_len + 1), generator=gen)
    return cfg, inner, a, theta, batches, build_model(cfg).to(device)


def plain_round(model: Any, theta: Any, a: Any, inner: Any, batches: Any, device: str) -> None:
    """The textbook loop over ``batches`` from ``theta``, training assignment ``a``'s modules."""
    import torch

    from training.model import lm_loss, load_params, module_params

    load_params(model, theta)
    trained = module_params(dict(model.named_parameters()), a.module_ids)
    for name, prm in model.named_parameters():
        prm.requires_grad_(name in trained)
    params = list(trained.values())
    opt = torch.optim.AdamW(
        params,
        lr=inner.lr,
        betas=(inner.beta1, inner.beta2),
        eps=inner.eps,
        weight_decay=inner.weight_decay,
    )
    model.train()
    for s in range(len(batches)):
        _, loss = lm_loss(model, batches[s].to(device), a.path)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, inner.grad_clip)
        opt.step()


def _time_alternating(
    loops: dict[str, Callable[[], None]], kind: str, repeats: int, min_seconds: float, device: str
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall and process CPU seconds of each round of ``kind``'s loops (``both``: miner then plain in
    alternation, so both see the same load on a shared machine; the first round of each is the warm-up):
    at least ``repeats`` rounds after it and ``min_seconds`` of the first loop."""
    import torch

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    kinds = ["miner", "plain"] if kind == "both" else [kind]
    times: dict[str, list[float]] = {k: [] for k in kinds}
    cpu: dict[str, list[float]] = {k: [] for k in kinds}
    while len(times[kinds[0]]) < repeats + 1 or sum(times[kinds[0]][1:]) < min_seconds:
        for k in kinds:
            sync()
            t0, c0 = time.perf_counter(), time.process_time()
            loops[k]()
            sync()
            times[k].append(time.perf_counter() - t0)
            cpu[k].append(time.process_time() - c0)
    return times, cpu


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every (preset, mode): both loops in child processes, their ratio and peak memory."""
    rows: list[dict[str, Any]] = []
    root = Path(__file__).resolve().parents[1]
    env = os.environ | {"OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(root)}
    for preset in [s for s in args.presets.split(",") if s]:
        for mode in [s for s in args.modes.split(",") if s]:
            got: dict[str, dict[str, Any]] = {}
            for kind in ("both", "miner", "plain"):  # timing, then each loop's peak memory on its own
                repeats = args.repeats if kind == "both" else 0
                least = args.min_seconds if kind == "both" else 0.0
                cmd = [sys.executable, "-m", "benchmarks.presets", "--child", preset, mode, kind,
                       str(args.steps), str(repeats), str(args.transcript_interval), args.device,
                       str(args.threads), str(least), str(args.batch_size)]  # fmt: skip
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, cwd=root)
                if out.returncode != 0:
                    raise RuntimeError(f"{preset}/{mode}/{kind} failed: {out.stderr.strip()[-1500:]}")
                got[kind] = json.loads(out.stdout.strip().splitlines()[-1])
            row = _row(preset, mode, got)
            rows.append(row)
            print(
                f"{preset:>5} {mode:>6} {row['params_total'] / 1e6:7.2f}M  miner {row['miner_tokens_per_second']:9.0f}"
                f" tok/s  plain {row['plain_tokens_per_second']:9.0f} tok/s  {row['miner_over_plain_pct']:6.1f}%"
                f" ({row['timed_rounds']} pairs; CPU time {row['miner_over_plain_cpu_pct']:.1f}%)"
                f"  peak RSS miner {row['miner_peak_rss_mib']:7.1f} MiB, plain {row['plain_peak_rss_mib']:7.1f} MiB",
                flush=True,
            )
    import torch

    return {
        "benchmark": "presets",
        "command": "tessera bench presets "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in sorted(vars(args).items()) if k in _OPTS),
        "settings": {k: v for k, v in vars(args).items() if k in _OPTS},
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__},
        "target_pct": 95.0,
        "rows": rows,
    }


def _row(preset: str, mode: str, got: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One table row from the timing child (``both``) and the two memory children (``miner``, ``plain``)."""
    m, pl = got["miner"], got["plain"]
    tps, secs = got["both"]["tokens_per_second"], got["both"]["seconds"]
    pairs = sorted(got["both"]["paired_ratios"])
    median = (pairs[(len(pairs) - 1) // 2] + pairs[len(pairs) // 2]) / 2
    cpu_pairs = sorted(got["both"].get("paired_cpu_ratios") or [float("nan")])
    cpu_median = (cpu_pairs[(len(cpu_pairs) - 1) // 2] + cpu_pairs[len(cpu_pairs) // 2]) / 2
    return {
        "preset": preset,
        "mode": mode,
        "params_total": m["params_total"],
        "params_trained": m["params_trained"],
        "batch_size": m["batch_size"],
        "seq_len": m["seq_len"],
        "miner_tokens_per_second": round(tps["miner"], 1),
        "plain_tokens_per_second": round(tps["plain"], 1),
        "miner_over_plain_pct": round(100 * median, 1),
        "miner_over_plain_best_pct": round(100 * tps["miner"] / tps["plain"], 1),
        # the same median over pairs of CPU seconds (the hashing thread's included)
        "miner_over_plain_cpu_pct": round(100 * cpu_median, 1),
        "timed_rounds": len(pairs),
        "miner_peak_rss_mib": round(m["peak_rss_bytes"] / 2**20, 1),
        "plain_peak_rss_mib": round(pl["peak_rss_bytes"] / 2**20, 1),
        "miner_peak_cuda_mib": _mib(m.get("peak_cuda_bytes")),
        "plain_peak_cuda_mib": _mib(pl.get("peak_cuda_bytes")),
        "miner_seconds": secs["miner"],
        "plain_seconds": secs["plain"],
        "miner_cpu_seconds": got["both"].get("cpu_seconds", {}).get("miner"),
        "plain_cpu_seconds": got["both"].get("cpu_seconds", {}).get("plain"),
    }


def _mib(n: int | None) -> float | None:
    return None if n is None else round(n / 2**20, 1)


_OPTS = (
    "presets",
    "modes",
    "steps",
    "repeats",
    "min_seconds",
    "transcript_interval",
    "threads",
    "device",
    "batch_size",
)


def main(args: Any = None) -> int:
    """``tessera bench presets`` (or ``python -m benchmarks.presets``)."""
    if args is None:
        parser = argparse.ArgumentParser(prog="tessera bench presets", description=__doc__.splitlines()[0])
        add_arguments(parser)
        args = parser.parse_args()
    result = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "presets.json").write_text(json.dumps(result, indent=1, sort_keys=True))
    print(f"wrote {out / 'presets.json'}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        preset, mode, kind, steps, repeats, interval, device, threads, least, batch = sys.argv[2:12]
        import torch

        torch.set_num_threads(int(threads))
        got = child(
            preset, mode, kind, int(steps), int(repeats), int(interval), device, float(least), int(batch)
        )
        print(json.dumps(got))
    else:
        sys.exit(main())
