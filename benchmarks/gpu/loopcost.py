"""Where a miner's round spends its time beyond a plain PyTorch loop, on any device.

For one preset and mode, on ``--device``, the loops of ``tessera bench presets`` (the same model, modules,
batches; :func:`benchmarks.presets.plain_round` and ``training.inner.train_inner``) run in alternation,
``--repeats`` rounds each after a warm-up round:

- ``plain``: the textbook loop;
- ``miner``: ``train_inner`` as a miner calls it (every ``--interval``-th state copied, kept and digested);
- ``miner_ends``: the same with the transcript at steps 0 and H only (``transcript_interval = H``): the
  difference to ``miner`` is what the intermediate transcript states cost.

Then each piece of the miner's extra work is timed alone on the state at H (best of ``--repeats``):

- ``digest``: ``part_digests`` of one state (SHA-256 of the parameters and of the moments), which the loop
  runs in a helper thread; the last state's digest cannot overlap a step;
- ``host_copy``: the state's tensors from the device to the host (on a GPU into freshly pinned memory, as
  ``training.snapshots.capture_async`` does, and the pinned allocation alone; on the CPU, a clone);
- ``codec``: the miner's compression with error feedback of the round's pseudo-gradient
  (``training.feedback.ErrorFeedback.compress`` with the devnet's codec for the preset) and the digest of
  the residual after it: what ``miner.work.build_update`` adds after the loop.

``python -m benchmarks.gpu.loopcost --device cuda --preset 50m --out DIR`` writes ``DIR/loopcost.json`` and
prints one line per figure. Nothing here changes what the loop computes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from benchmarks.presets import loop_setup, plain_round
from tessera.devnet.config import DevnetConfig
from tessera.devnet.runfile import devnet_spec
from training.digest import part_digests, state_digest
from training.feedback import ErrorFeedback
from training.inner import train_inner


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], device: str, repeats: int) -> tuple[list[float], Any]:
    """Wall seconds of ``repeats`` calls of ``fn`` (the device synchronised around each) and its last
    result."""
    out, times = None, []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        out = fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return times, out


def host_copy_seconds(state: Mapping[str, Tensor], device: str, repeats: int) -> dict[str, float]:
    """The best seconds to bring ``state`` (put on ``device`` first) to the host: into fresh pinned memory
    and the pinned allocation alone on a GPU, a clone on the CPU."""
    on_dev = {k: t.to(device) for k, t in state.items()}
    if not device.startswith("cuda"):
        return {
            "host_copy": min(timed(lambda: {k: t.clone() for k, t in on_dev.items()}, device, repeats)[0])
        }

    def pinned() -> dict[str, Tensor]:
        return {k: torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for k, t in on_dev.items()}

    def copy() -> dict[str, Tensor]:
        out = pinned()
        for k, t in on_dev.items():
            out[k].copy_(t, non_blocking=True)
        return out

    return {
        "host_copy": min(timed(copy, device, repeats)[0]),
        "pinned_alloc": min(timed(pinned, device, repeats)[0]),
        "pageable_copy": min(timed(lambda: {k: t.to("cpu") for k, t in on_dev.items()}, device, repeats)[0]),
    }


def measure(preset: str, mode: str, device: str, steps: int, interval: int, repeats: int) -> dict[str, Any]:
    """The loops' round seconds and each piece's (see the module doc)."""
    cfg, inner, a, theta, batches, model = loop_setup(preset, mode, steps, interval, 0, device)
    ends = replace(inner, transcript_interval=steps)
    loops: dict[str, Callable[[], Any]] = {
        "plain": lambda: plain_round(model, theta, a, inner, batches, device),
        "miner": lambda: train_inner(cfg, inner, theta, a, batches, 0, keep_states=True, model=model, device=device),
        "miner_ends": lambda: train_inner(cfg, ends, theta, a, batches, 0, keep_states=True, model=model, device=device),
    }  # fmt: skip
    rounds: dict[str, list[float]] = {k: [] for k in loops}
    results: dict[str, Any] = {}
    for i in range(repeats + 1):  # the first round of each warms up
        for k, fn in loops.items():
            t, results[k] = timed(fn, device, 1)
            if i:
                rounds[k] += t
    res = results["miner"]
    state = res.transcript.states[steps]
    delta = {n: theta[n] - res.params[n] for n in res.params}
    codec = devnet_spec(DevnetConfig(preset=preset, mode=mode)).codec

    def compress() -> bytes:
        ef = ErrorFeedback(codec)
        ef.compress(delta)
        return state_digest(ef.state_dict())

    pieces = {
        "digest": min(timed(lambda: part_digests(state), "cpu", repeats)[0]),
        **host_copy_seconds(state, device, repeats),
        "codec": min(timed(compress, "cpu", repeats)[0]),
    }
    median = {k: statistics.median(v) for k, v in rounds.items()}
    return {
        "benchmark": "loopcost",
        "preset": preset,
        "mode": mode,
        "device": device,
        "device_name": torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "steps": steps,
        "interval": interval,
        "states_recorded": len(res.transcript.steps),
        "state_bytes": sum(t.numel() * t.element_size() for t in state.values()),
        "tokens_per_round": steps * inner.batch_size * cfg.seq_len,
        "round_seconds": rounds,
        "round_seconds_median": median,
        "miner_over_plain_pct": 100 * median["plain"] / median["miner"],
        "intermediate_states_seconds": median["miner"] - median["miner_ends"],
        "piece_seconds": pieces,
    }


def report_lines(r: Mapping[str, Any]) -> list[str]:
    """The figures of :func:`measure`, one line each."""
    med, pieces = r["round_seconds_median"], r["piece_seconds"]
    lines = [
        f"{r['preset']} {r['mode']} on {r['device_name']}, {r['steps']} steps, transcript every {r['interval']} "
        f"({r['states_recorded']} states of {r['state_bytes'] / 2**20:.1f} MiB), {r['threads']} threads",
        f"round: plain {med['plain']:.3f} s, miner {med['miner']:.3f} s ({r['miner_over_plain_pct']:.1f}% of "
        f"plain's speed), miner with states at 0 and H only {med['miner_ends']:.3f} s",
    ]
    per_round = {"digest": r["states_recorded"], "host_copy": r["states_recorded"], "codec": 1}
    for k, s in pieces.items():
        n = per_round.get(k, r["states_recorded"])
        share = 100 * n * s / med["miner"]
        lines.append(f"  {k:>13}: {1000 * s:8.2f} ms each, x{n} a round = {share:5.1f}% of the miner's round")
    return lines


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.gpu.loopcost``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--preset", default="50m")
    ap.add_argument("--mode", default="moe", choices=["moe", "dipaco"])
    ap.add_argument("--steps", type=int, default=20, help="inner steps per round")
    ap.add_argument("--interval", type=int, default=10, help="transcript interval")
    ap.add_argument("--repeats", type=int, default=3, help="timed rounds of each loop")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--out", default="bench-loopcost")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    result = measure(args.preset, args.mode, args.device, args.steps, args.interval, args.repeats)
    print("\n".join(report_lines(result)), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "loopcost.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out / 'loopcost.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
