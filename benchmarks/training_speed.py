"""The speed figures of ``tessera bench training``: codec throughput and the miner's inner-loop overhead
against a plain PyTorch loop."""

from __future__ import annotations

import time
from typing import Any

from benchmarks.training_runs import CHOSEN, run_config
from training.config import CodecConfig
from training.corpus import load_bundled_corpus


def codec_speed(n_values: int = 1 << 22, repeats: int = 3) -> list[dict[str, Any]]:
    """Compress + decompress MB/s (fp32 input) for the codecs the bench uses, on the CPU."""
    import torch

    from training.codecs import decode, encode, encoded_bits

    side = int(n_values**0.5)
    # a square matrix: the shaped codecs tile it by rows and columns, the others flatten it
    x = torch.randn(side, side, generator=torch.Generator().manual_seed(0))
    n_values = side * side
    rows = []
    for label, cfg in [
        ("recipe: top-110/4096 2-bit shaped tiles (no DCT), Elias-Fano indices", CodecConfig.recipe()),
        ("previous recipe: top-32/4096 2-bit shaped DCT", CodecConfig(topk=32, bits=2, transform="shaped")),
        ("top-32/4096 2-bit tiles (no DCT)", CodecConfig(topk=32, bits=2, transform="tiles")),
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
                "bits_per_value": encoded_bits((side, side), cfg) / n_values,
            }
        )
    return rows


def overhead(scale: dict[str, Any], steps: int = 30, repeats: int = 3) -> dict[str, Any]:
    """Tokens/s of ``train_inner`` (transcript every k steps) against a plain PyTorch AdamW loop."""
    import torch

    from training.assignment import assign
    from training.data import miner_batches, prepare
    from training.inner import train_inner
    from training.model import build_model, lm_loss, module_params, param_state

    run = run_config("moe", scale, 10, steps, CHOSEN["codec"], CHOSEN["outer"])
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
