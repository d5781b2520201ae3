"""Validator compute against training compute, per preset: "at most 5%" budget, measured as CPU.

For each preset and mode, one miner trains a devnet round (``miner.work.build_update`` on the devnet's run:
H inner steps, transcript every step, the recipe's codec) and one validator verifies the update
(``validator.pipeline.VerificationPipeline.verify``: every stage, one replayed segment as for an attested miner, or
``--segments``), the states served from memory. Both are timed as this thread's CPU seconds
(``time.thread_time``), which a loaded machine does not inflate the way it inflates wall time; the
verification is repeated in one round's context (as a validator verifies a round's miners: the round's
model and held-out loss before are built by the first) and the median kept. Printed: per preset the training and verification CPU
seconds, their ratio, and the verification's stages (wall seconds of the median run).

``python -m benchmarks.verify_cost --presets tiny 1m --modes moe dipaco --out verify-cost.json``
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from miner.behaviour import Behaviour
from miner.work import RoundInputs, build_update
from protocol.runspec import warm_up_torch
from protocol.wire.commitments import update_commitment
from protocol.wire.tensorblob import tensors_digest
from tessera.devnet.config import DevnetConfig
from tessera.devnet.runfile import devnet_spec
from training.data import prepare
from validator.context import Incoming, RoundContext
from validator.pipeline import VerificationPipeline
from validator.policy import VerifyPolicy

CHAIN_ID = 31337
CONTRACT = "0x" + "11" * 20
MINERS = ["0x" + f"{i:040x}" for i in (0xA1, 0xB2, 0xC3, 0xD4)]
VALIDATOR = "0x" + "e5" * 20


def measure(preset: str, mode: str, steps: int, segments: int, repeats: int) -> dict[str, Any]:
    """One preset's training and verification CPU seconds (see the module's docstring)."""
    torch.set_num_threads(1)
    spec = devnet_spec(replace(DevnetConfig(), preset=preset, mode=mode, inner_steps=steps))
    ds = prepare(spec.load_corpus(), spec.model)
    theta = spec.genesis_params()
    digest = bytes.fromhex(tensors_digest({f"param/{k}": v for k, v in theta.items()})[2:])
    seeds = (b"\x01" * 32, b"\x02" * 32)
    warm_up_torch()  # the first optimizer step's one-time imports, as a node pays them before round 1
    cpu0 = time.thread_time()
    built = build_update(spec, ds, RoundInputs(2, MINERS[0], theta, digest, seeds[0], MINERS), Behaviour())
    build_cpu = time.thread_time() - cpu0
    served = {
        "0x" + d.hex(): built.states[s]
        for s, d in zip(built.transcript_steps, built.transcript_digests, strict=True)
    }
    served.update(built.published())
    ctx_args = dict(
        spec=spec, dataset=ds, round=2, chain_id=CHAIN_ID, contract=CONTRACT, validator=VALIDATOR,
        checkpoint=theta, checkpoint_digest=digest, assign_seed=seeds[0], seed=seeds[1], registry=MINERS,
    )  # fmt: skip
    policy = VerifyPolicy(segments_per_miner=segments)
    commitment = update_commitment(CHAIN_ID, CONTRACT, 2, MINERS[0], built.digest)
    runs = []
    # one round's context for every verification, as a validator verifies a round's miners: the round's
    # own work (its model, the held-out loss before) falls on the first, the median is a miner's share
    ctx = RoundContext(**ctx_args)  # type: ignore[arg-type]
    fetch_state = lambda d: {k: v.clone() for k, v in served[d].items()}  # noqa: E731
    incoming = Incoming(MINERS[0], commitment, lambda: built.update, fetch_state)
    for _ in range(repeats):
        verdict = VerificationPipeline(policy).verify(incoming, ctx)
        if not verdict.accepted:
            raise RuntimeError(f"{preset}/{mode}: the honest update was refused at {verdict.stage}")
        runs.append((verdict.metrics["verify_cpu_seconds"], verdict.timings))
    verify_cpu = statistics.median(r[0] for r in runs)
    timings = min(runs, key=lambda r: abs(r[0] - verify_cpu))[1]
    return {
        "preset": preset,
        "mode": mode,
        "inner_steps": steps,
        "segments": segments,
        "trained_params": built.trained_params,
        "train_cpu_seconds": round(built.train_cpu_seconds, 4),
        "build_cpu_seconds": round(build_cpu, 4),
        "verify_cpu_seconds": round(verify_cpu, 4),
        "verify_cpu_runs": [round(r[0], 4) for r in runs],
        "verify_pct_of_training": round(100 * verify_cpu / built.train_cpu_seconds, 2),
        "stage_wall_seconds": {str(k): round(v, 4) for k, v in timings.items()},
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.verify_cost", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--presets", nargs="+", default=["tiny", "1m"])
    ap.add_argument("--modes", nargs="+", default=["moe", "dipaco"], choices=["moe", "dipaco"])
    ap.add_argument(
        "--steps", type=int, default=60, help="H, inner steps per round (default 60, the devnet's)"
    )
    ap.add_argument(
        "--segments", type=int, default=1, help="segments replayed (default 1: an attested miner's)"
    )
    ap.add_argument("--repeats", type=int, default=5, help="verifications timed (the median is kept)")
    ap.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    rows = []
    for preset in args.presets:
        for mode in args.modes:
            row = measure(preset, mode, args.steps, args.segments, args.repeats)
            rows.append(row)
            print(
                f"{preset:>5} {mode:<6} trained {row['trained_params']:>9,}  train {row['train_cpu_seconds']:8.3f} s"
                f"  verify {row['verify_cpu_seconds']:7.3f} s  = {row['verify_pct_of_training']:5.2f}%  "
                + " ".join(f"{k}={v:.3f}" for k, v in row["stage_wall_seconds"].items()),
                flush=True,
            )
    if args.out is not None:
        args.out.write_text(json.dumps({"rows": rows, "torch": torch.__version__}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
