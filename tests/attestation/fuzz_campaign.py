"""The attestation fuzz campaign: >= 100,000 generated inputs through the parsers and verify.

    nice -n 10 .venv/bin/python -m tests.attestation.fuzz_campaign --inputs 100000 [--seed 1] [--json out]

Inputs: random bytes and mutated real evidence (Intel SGX v3, TDX v4, SEV-SNP, H100, simulated TDX) for
every parser (with a round-trip check of whatever parses), mutated evidence and random bytes through
verify, mutated collateral JSON through load + verify, random policy documents. Any exception other than
an ``AttestationError`` subclass is a finding: it is printed and the exit status is 1.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from attest_fuzz import (
    check_collateral,
    check_parsers,
    check_policy,
    check_verify,
    mutate_bytes,
    mutate_collateral,
    seeds,
)


def main(argv: list[str] | None = None) -> int:
    """Run the campaign; print and optionally write the figures."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    pool = seeds()
    with_json = [s for s in pool if s.collateral_json is not None]
    kinds: collections.Counter[str] = collections.Counter()
    outcomes: collections.Counter[str] = collections.Counter()
    findings: list[str] = []
    start = time.perf_counter()
    for i in range(args.inputs):
        r = rng.random()
        try:
            if r < 0.15:
                kind = "parsers/random-bytes"
                outs = check_parsers(rng.randbytes(rng.choice((0, 1, 8, 48, 64, 600, 1184, 4117, 5006))))
            elif r < 0.40:
                kind = "parsers/mutated-evidence"
                outs = check_parsers(mutate_bytes(rng, rng.choice(pool).evidence))
            elif r < 0.80:
                seed = rng.choice(pool)
                if rng.random() < 0.5:
                    kind = "verify/flipped-byte"
                    pos = rng.randrange(len(seed.evidence))
                    mutated = bytearray(seed.evidence)
                    mutated[pos] ^= 1 << rng.randrange(8)
                    outs = [check_verify(seed, bytes(mutated))]
                else:
                    kind = "verify/mutated-evidence"
                    outs = [check_verify(seed, mutate_bytes(rng, seed.evidence))]
            elif r < 0.85:
                kind = "verify/random-bytes"
                outs = [check_verify(rng.choice(pool), rng.randbytes(rng.randrange(2000)))]
            elif r < 0.97:
                kind = "verify/mutated-collateral"
                seed = rng.choice(with_json)
                assert seed.collateral_json is not None
                outs = [check_collateral(seed, mutate_collateral(rng, seed.collateral_json))]
            else:
                kind = "policy/random-document"
                outs = [check_policy(rng)]
        except Exception:  # a finding: anything that is not an AttestationError
            findings.append(f"input {i} ({kind}):\n{traceback.format_exc()}")
            kinds[kind] += 1
            continue
        kinds[kind] += 1
        outcomes.update(outs)
    elapsed = time.perf_counter() - start
    figures = {
        "inputs": args.inputs,
        "seed": args.seed,
        "seconds": round(elapsed, 1),
        "inputs_per_second": round(args.inputs / elapsed, 1),
        "unexpected_exceptions": len(findings),
        "by_kind": dict(sorted(kinds.items())),
        "outcomes": dict(outcomes.most_common()),
    }
    for f in findings[:20]:
        print(f, file=sys.stderr)
    print(json.dumps(figures, indent=1))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
