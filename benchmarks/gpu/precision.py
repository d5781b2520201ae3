"""What the deterministic settings cost on a GPU, and what the cheaper ones would do to cross-device replay.

For one preset (MoE), the miner's inner loop (``training.inner.train_inner``, transcript every
``--interval`` steps) runs under three settings on ``--device``:

- ``fp32-highest``: ``training.device.use_deterministic`` (no TF32: what a node runs);
- ``tf32``: the same, but fp32 matmuls and cuDNN may use TF32 (10 mantissa bits);
- ``bf16-autocast``: the deterministic settings, the loop inside ``torch.autocast(dtype=bfloat16)``.

For each: tokens/s of the timed rounds (after a warm-up round), the ratio to ``fp32-highest``, and a CPU
replay (fp32, what a validator on a CPU computes) of the first transcript segment from the state the
device served, compared with the device's state at the segment's end: the relative L2 differences of the
parameters and of the moments against the validators' tolerances (``validator.policy.VerifyPolicy``). A
setting whose differences exceed them would have its honest miners refused by CPU validators.

``python -m benchmarks.gpu.precision --device cuda --preset 50m --out DIR`` writes ``DIR/precision.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from training.assignment import assign
from training.device import use_deterministic
from training.inner import replay_segment, train_inner
from training.model import build_model, param_state
from training.presets import get_preset
from validator.policy import VerifyPolicy

SETTINGS = ("fp32-highest", "tf32", "bf16-autocast")


@contextlib.contextmanager
def setting(name: str, device: str) -> Iterator[None]:
    """Torch's flags (and autocast) for one of :data:`SETTINGS`, on top of the deterministic settings;
    the deterministic ones restored after."""
    use_deterministic(device)
    tf32 = name == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    kind = "cuda" if device.startswith("cuda") else "cpu"
    ctx = torch.autocast(kind, dtype=torch.bfloat16) if name == "bf16-autocast" else contextlib.nullcontext()
    try:
        with ctx:
            yield
    finally:
        use_deterministic(device)


def rel_differences(got: Mapping[str, Tensor], want: Mapping[str, Tensor]) -> tuple[float, float]:
    """The largest relative L2 difference over the parameters (``param/*``) and over the rest (moments)."""
    worst = [0.0, 0.0]
    for key, w in want.items():
        if w.dtype not in (torch.float32, torch.float64):
            continue
        g, w64 = got[key].double(), w.double()
        diff = float(torch.linalg.vector_norm(g - w64)) / max(float(torch.linalg.vector_norm(w64)), 1e-12)
        i = 0 if key.startswith("param/") else 1
        worst[i] = max(worst[i], diff)
    return worst[0], worst[1]


def measure(
    preset: str, device: str, steps: int, interval: int, rounds: int, batch: int = 0
) -> dict[str, Any]:
    """Every setting's throughput and CPU-replay differences (see the module doc)."""
    p = get_preset(preset)
    cfg = p.model("moe")
    inner = replace(
        p.inner(), steps=steps, transcript_interval=interval, warmup_steps=1, total_steps=10 * steps
    )
    if batch:
        inner = replace(inner, batch_size=batch)
    a = assign(b"\0" * 32, ["miner"], cfg)["miner"]
    theta = param_state(build_model(cfg, seed=0))
    gen = torch.Generator().manual_seed(1)
    batches = torch.randint(1, cfg.vocab_size, (steps, inner.batch_size, cfg.seq_len + 1), generator=gen)
    model = build_model(cfg).to(device)
    rows = [_row(name, cfg, inner, a, theta, batches, model, device, rounds) for name in SETTINGS]
    base = rows[0]["tokens_per_second"]
    for r in rows:
        r["speed_vs_fp32_highest"] = r["tokens_per_second"] / base
    return {
        "benchmark": "precision",
        "preset": preset,
        "device": device,
        "device_name": torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
        "steps": steps,
        "interval": interval,
        "batch_size": inner.batch_size,
        "rows": rows,
    }


def _row(
    name: str, cfg: Any, inner: Any, a: Any, theta: Any, batches: Tensor, model: Any, device: str, rounds: int
) -> dict[str, Any]:
    """One setting's figures: tokens/s of the fastest timed round, the CPU replay's differences."""
    times = []
    with setting(name, device):
        for _ in range(rounds + 1):  # the first round warms up
            _sync(device)
            t0 = time.perf_counter()
            res = train_inner(cfg, inner, theta, a, batches, 0, keep_states=True, model=model, device=device)
            _sync(device)
            times.append(time.perf_counter() - t0)
    k = inner.transcript_interval
    states = res.transcript.states
    cpu = replay_segment(cfg, inner, theta, a, batches, 0, states[0], k, device="cpu")
    d_param, d_moment = rel_differences(cpu, states[k])
    policy = VerifyPolicy()
    tokens = inner.steps * inner.batch_size * cfg.seq_len
    row = {
        "setting": name,
        "tokens_per_second": tokens / min(times[1:] or times),
        "round_seconds": times[1:],
        "cpu_replay_param_rel_diff": d_param,
        "cpu_replay_moment_rel_diff": d_moment,
        "cpu_validator_accepts": d_param <= policy.param_rel_tol and d_moment <= policy.replay_rel_tol,
        "final_loss": res.losses[-1],
    }
    print(
        f"{cfg.d_model}d {name:>13}: {row['tokens_per_second']:10.0f} tok/s  CPU replay of 0..{k}: "
        f"params {d_param:.2e} (tol {policy.param_rel_tol:.0e}), moments {d_moment:.2e} "
        f"(tol {policy.replay_rel_tol:.0e})",
        flush=True,
    )
    return row


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.gpu.precision``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--preset", default="50m")
    ap.add_argument("--steps", type=int, default=12, help="inner steps per timed round")
    ap.add_argument(
        "--interval", type=int, default=2, help="transcript interval (the replayed segment's length)"
    )
    ap.add_argument("--rounds", type=int, default=2, help="timed rounds per setting")
    ap.add_argument("--batch-size", type=int, default=0, help="0: the preset's")
    ap.add_argument("--out", default="bench-precision")
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    result = measure(args.preset, args.device, args.steps, args.interval, args.rounds, args.batch_size)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "precision.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out / 'precision.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
