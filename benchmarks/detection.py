"""Monte Carlo of catching a miner that fakes 10% of its steps within 10 rounds, over the real segment draw.

Each trial is a faking miner: every round it spoils ``H / 10`` segments at random positions and two
validators replay their coordinated windows (``validator.sampling.segments_to_check`` with their slots) of
``m`` segments; the trial counts as caught in the first round a window meets a spoiled segment. Compare
with ``tessera.attack.economics.p_within(p_detect_any(0.1, H, m, 2), 10)``. Run with
``python -m benchmarks.detection [--trials 2000] [--segments 30,60] [--checked 2]``.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence

from tessera.attack import economics as ec
from validator.sampling import segments_to_check

TRIALS_SEED = 1
"""Seed of the trials' fake positions."""


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    """Run the trials for each transcript length; print and return {H: (model, Monte Carlo)}."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.detection", description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=2000, help="faking miners per transcript length")
    p.add_argument("--segments", default="30,60", help="transcript lengths H (one-step segments)")
    p.add_argument("--checked", type=int, default=2, help="segments each of the 2 validators replays")
    args = p.parse_args(argv)
    out: dict[str, float] = {}
    for h in (int(x) for x in args.segments.split(",")):
        rng = random.Random(TRIALS_SEED)
        caught = 0
        for t in range(args.trials):
            for r in range(10):
                bad = set(rng.sample(range(h), max(1, h // 10)))
                seed = f"{t}-{r}".encode()
                if any(set(segments_to_check(seed, "0xm", h, args.checked, slot=i)) & bad for i in (0, 1)):
                    caught += 1
                    break
        model = ec.p_within(ec.p_detect_any(0.1, h, args.checked, 2), 10)
        out[f"H={h}"] = round(caught / args.trials, 4)
        out[f"H={h} model"] = round(model, 4)
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
