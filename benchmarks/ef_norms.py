"""Why F12 needed the error-feedback chain: honest update norms against the transcript, over many rounds.

Runs the miner's own ``miner.work.build_update`` for ``--miners`` honest miners over ``--rounds`` rounds
(each starting from the residual of its previous round, as the node does; the checkpoint moves by the
plain average of the decoded updates) and, per update, prints how the decoded update ``d`` compares with
the transcript's result ``t = theta_r - final state``:

* ``cos``: cosine on the update's support (what ``min_final_cosine`` would bound);
* ``ratio_full``: ||d|| / ||t||; ``ratio_support``: the same on the update's support.

The ratios grow with the rounds because the residual accumulates, so no fixed norm bound separates an
honest update from a scaled one; the validator recomputes ``d`` from ``t`` and the committed residual instead
(``validator.pipeline``, docs/security.md F12). Run with
``python -m benchmarks.ef_norms [--mode moe|dipaco] [--rounds 12] [--miners 4] [--out reports/ef-norms.json]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from miner.behaviour import Behaviour
from miner.work import RoundInputs, build_update
from protocol.runspec import RunSpec
from protocol.wire.tensorblob import tensors_digest
from protocol.wire.update import decode_update
from training.config import InnerConfig, ModelConfig
from training.data import prepare
from training.diloco import pseudo_gradient

if TYPE_CHECKING:
    from miner.work import BuiltUpdate

SEED_TAG = b"ef-norms"
"""Assignment seeds are sha256(SEED_TAG || round): fixed, so the figures reproduce."""


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line arguments of ``python -m benchmarks.ef_norms``."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.ef_norms", description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=["moe", "dipaco"], default="moe", help="model family (default moe)")
    p.add_argument("--rounds", type=int, default=12, help="outer rounds (default 12)")
    p.add_argument("--miners", type=int, default=4, help="honest miners (default 4)")
    p.add_argument("--steps", type=int, default=30, help="inner steps H (default 30)")
    p.add_argument("--out", type=Path, default=Path("reports/ef-norms.json"), help="JSON report path")
    return p.parse_args(argv)


def _compare(d: dict[str, torch.Tensor], t: dict[str, torch.Tensor]) -> dict[str, float]:
    """Cosine on the support of ``d``, and the norm ratios of ``d`` to ``t`` on that support and in full."""
    num = da = db = tf = 0.0
    for name, x in d.items():
        mask = x != 0
        xs, ts = x.double()[mask], t[name].double()[mask]
        num += float((xs * ts).sum())
        da += float(xs.pow(2).sum())
        db += float(ts.pow(2).sum())
        tf += float(t[name].double().pow(2).sum())
    return {
        "cos": num / max(math.sqrt(da * db), 1e-30),
        "ratio_support": math.sqrt(da / max(db, 1e-30)),
        "ratio_full": math.sqrt(da / max(tf, 1e-30)),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the measurement, print a line per round and write the JSON report."""
    args = _parse(argv)
    torch.set_num_threads(1)
    spec = RunSpec(
        model=ModelConfig(mode=args.mode),
        inner=InnerConfig(steps=args.steps, batch_size=8, transcript_interval=10),
    )
    ds = prepare(spec.load_corpus(), spec.model)
    params = spec.genesis_params()
    miners = ["0x" + f"{i + 1:040x}" for i in range(args.miners)]
    last: dict[str, BuiltUpdate | None] = dict.fromkeys(miners)
    rows: list[dict[str, Any]] = []
    for r in range(1, args.rounds + 1):
        deltas, mine = _round(spec, ds, params, r, miners, last)
        params = _average_step(params, deltas)
        rows += mine
        _print_round(r, mine)
    report = {
        "mode": args.mode,
        "rounds": args.rounds,
        "miners": args.miners,
        "steps": args.steps,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"report: {args.out}")
    return report


def _round(
    spec: Any,
    ds: Any,
    params: dict[str, torch.Tensor],
    round: int,
    miners: list[str],
    last: dict[str, BuiltUpdate | None],
) -> tuple[list[dict[str, torch.Tensor]], list[dict[str, Any]]]:
    """``round`` of every miner from ``params``, each carrying its previous build's residual (``last``,
    updated): the decoded updates and one comparison row per miner."""
    digest = bytes.fromhex(tensors_digest({f"param/{k}": v for k, v in params.items()})[2:])
    seed = hashlib.sha256(SEED_TAG + round.to_bytes(8, "big")).digest()
    deltas, rows = [], []
    for m in miners:
        prev = last[m]
        b = build_update(
            spec,
            ds,
            RoundInputs(
                round=round,
                miner=m,
                checkpoint=params,
                checkpoint_digest=digest,
                assign_seed=seed,
                registry=miners,
                ef_state=prev.ef_state if prev else {},
                ef_source=(prev.round, prev.digest) if prev else None,
            ),
            Behaviour(),
        )
        last[m] = b
        d = decode_update(b.update).pseudo_gradient()
        final = b.states[b.transcript_steps[-1]]
        t = pseudo_gradient(params, {n: final[f"param/{n}"] for n in d})
        rows.append({"round": round, "miner": m, **_compare(d, t)})
        deltas.append(d)
    return deltas, rows


def _average_step(
    params: dict[str, torch.Tensor], deltas: list[dict[str, torch.Tensor]]
) -> dict[str, torch.Tensor]:
    """The next checkpoint: each tensor moved by the plain average of the updates that carry it."""
    new = dict(params)
    for name in params:
        got = [d[name] for d in deltas if name in d]
        if got:
            new[name] = params[name] - torch.stack(got).mean(0)
    return new


def _print_round(round: int, mine: list[dict[str, Any]]) -> None:
    """The round's range of each figure over the miners."""
    print(
        f"round {round:3d}: cos {min(x['cos'] for x in mine):.3f}-{max(x['cos'] for x in mine):.3f}  "
        f"ratio_full {min(x['ratio_full'] for x in mine):.3f}-{max(x['ratio_full'] for x in mine):.3f}  "
        f"ratio_support {min(x['ratio_support'] for x in mine):.3f}-"
        f"{max(x['ratio_support'] for x in mine):.3f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
