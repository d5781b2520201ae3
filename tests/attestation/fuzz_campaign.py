"""The attestation fuzz campaign: generated inputs through the parsers and verify, at the default caps,
measuring per format the inputs, the untyped exceptions, and the worst time and peak memory per input.

    nice -n 10 .venv/bin/python -m tests.attestation.fuzz_campaign --inputs 100000 [--seed 1] [--json out]

Inputs: random bytes and mutated real evidence (Intel SGX v3, TDX v4, SEV-SNP, H100, simulated TDX) for
every parser (with a round-trip check of whatever parses), mutated evidence and random bytes through
verify, verify without collateral, mutated collateral JSON through load + verify, random policy
documents, and inputs at and over every default cap (evidence, PCK chains padded with root copies or to
the chain cap, forged TCB info / QE identity up to 16 times the document cap, CRLs at the cap, padded
collateral chains). Any exception other than an ``AttestationError`` subclass is a finding: it is
printed and the exit status is 1.

Each input is built first, then only the call under test is measured: wall time (``perf_counter``), the
CPU time of the thread (``thread_time``: what the input costs, whatever else the machine runs) and peak
memory above the level before the call (``tracemalloc``, which sees every allocation made through
Python's allocators: Python objects, ``bytes`` and ``str`` (json's output included), and the ``bytes``
cryptography returns; it does not see what Rust and OpenSSL allocate with their own allocator inside
cryptography: parsed X.509 structures, keys, and the buffers of signature checks). Times are taken with
tracemalloc on, which slows Python code about twofold: they are upper bounds. ``--no-memory`` measures
time alone. The memos of ``attestation`` stay warm between inputs, as in a validator (each seed is
verified once before the campaign); inputs that differ from the seeds miss them. Python's cyclic
garbage collector is disabled during each measured call and run between inputs (a gen-2 pass over the
campaign's heap took up to 100 ms and landed on whichever input triggered it); garbage an input leaves
is therefore counted in its peak, not freed by a collection inside it.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import gc
import json
import random
import sys
import time
import traceback
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, when run as a script

from attestation.limits import DEFAULT_LIMITS
from tests.attestation.attest_fuzz import (
    FORMAT_OF_SEED,
    Case,
    check_collateral_text,
    check_parsers,
    check_policy,
    check_verify,
    check_without_collateral,
    mutate_bytes,
    mutate_collateral,
    oversized_case,
    seeds,
)

TARGET_MS = 50.0
"""Issue 11's target: worst time per attestation input."""
TARGET_MB = 50.0
"""Issue 11's target: worst peak memory per attestation input."""
GC_EVERY = 200
"""The cyclic collector is off during each measured call and runs between inputs every this many."""


def draw(rng: random.Random, pool: list, with_json: list) -> Case:  # type: ignore[type-arg]
    """One input: its format, its kind and the call to measure (the input itself is built here)."""
    r = rng.random()
    seed = rng.choice(pool)
    fmt = FORMAT_OF_SEED[seed.name]
    if r < 0.12:
        data = rng.randbytes(rng.choice((0, 1, 8, 48, 64, 600, 1184, 4117, 5006)))
        return Case("any (random bytes)", "parsers/random-bytes", lambda: check_parsers(data))
    if r < 0.32:
        data = mutate_bytes(rng, seed.evidence)
        return Case(fmt, "parsers/mutated-evidence", lambda: check_parsers(data))
    if r < 0.47:
        flipped = bytearray(seed.evidence)
        flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        ev = bytes(flipped)
        return Case(fmt, "verify/flipped-byte", lambda: [check_verify(seed, ev)])
    if r < 0.62:
        ev = mutate_bytes(rng, seed.evidence)
        return Case(fmt, "verify/mutated-evidence", lambda: [check_verify(seed, ev)])
    if r < 0.66:
        ev = rng.randbytes(rng.randrange(2000))
        return Case(fmt, "verify/random-bytes", lambda: [check_verify(seed, ev)])
    if r < 0.70:
        ev = mutate_bytes(rng, seed.evidence) if rng.random() < 0.5 else seed.evidence
        accept = rng.random() < 0.5
        return Case(fmt, "verify/no-collateral", lambda: [check_without_collateral(seed, ev, accept)])
    if r < 0.80:
        jseed = rng.choice(with_json)
        wire = json.dumps(mutate_collateral(rng, jseed.collateral_json))
        return Case(
            FORMAT_OF_SEED[jseed.name],
            "verify/mutated-collateral",
            lambda: [check_collateral_text(jseed, wire)],
        )
    if r < 0.82:
        prng = random.Random(rng.random())
        return Case("policy", "policy/random-document", lambda: [check_policy(prng)])
    return oversized_case(rng, pool)


@dataclasses.dataclass
class Figures:
    """What the campaign keeps per format."""

    inputs: int = 0
    untyped: int = 0
    worst_ms: float = 0.0
    worst_ms_kind: str = ""
    worst_ms_input: int = -1
    worst_cpu_ms: float = 0.0
    worst_cpu_ms_kind: str = ""
    worst_cpu_input: int = -1
    worst_mb: float = 0.0
    worst_mb_kind: str = ""
    worst_mb_input: int = -1
    total_s: float = 0.0
    walls: list[float] = dataclasses.field(default_factory=list)
    cpus: list[float] = dataclasses.field(default_factory=list)

    def add(self, i: int, kind: str, seconds: float, cpu: float, peak: int, failed: bool) -> None:
        self.inputs += 1
        self.untyped += failed
        self.total_s += seconds
        self.walls.append(seconds)
        self.cpus.append(cpu)
        if seconds * 1000 > self.worst_ms:
            self.worst_ms, self.worst_ms_kind, self.worst_ms_input = seconds * 1000, kind, i
        if cpu * 1000 > self.worst_cpu_ms:
            self.worst_cpu_ms, self.worst_cpu_ms_kind, self.worst_cpu_input = cpu * 1000, kind, i
        if peak / 2**20 > self.worst_mb:
            self.worst_mb, self.worst_mb_kind, self.worst_mb_input = peak / 2**20, kind, i

    def to_dict(self) -> dict[str, object]:
        walls, cpus = sorted(self.walls), sorted(self.cpus)

        def q(xs: list[float], f: float) -> float:
            return round(1000 * xs[min(len(xs) - 1, int(f * len(xs)))], 2) if xs else 0.0

        return {
            "inputs": self.inputs,
            "untyped_exceptions": self.untyped,
            "worst_ms_per_input": round(self.worst_ms, 2),
            "worst_ms_kind": self.worst_ms_kind,
            "worst_ms_input": self.worst_ms_input,
            "worst_cpu_ms_per_input": round(self.worst_cpu_ms, 2),
            "worst_cpu_ms_kind": self.worst_cpu_ms_kind,
            "worst_cpu_input": self.worst_cpu_input,
            "mean_ms_per_input": round(1000 * self.total_s / max(1, self.inputs), 3),
            "p99_ms": q(walls, 0.99),
            "p999_ms": q(walls, 0.999),
            "p999_cpu_ms": q(cpus, 0.999),
            "worst_peak_mb_per_input": round(self.worst_mb, 3),
            "worst_peak_kind": self.worst_mb_kind,
            "worst_peak_input": self.worst_mb_input,
        }


def replay(rng: random.Random, pool: list, with_json: list, index: int) -> int:  # type: ignore[type-arg]
    """Draw the inputs before ``index`` (building, not running them), then measure input ``index``."""
    for _ in range(index):
        draw(rng, pool, with_json)
    case = draw(rng, pool, with_json)
    for seed in pool:
        check_verify(seed, seed.evidence)
    tracemalloc.start()
    for _ in range(5):
        gc.collect()
        gc.disable()
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        t0, c0 = time.perf_counter(), time.thread_time()
        outs = case.run()
        took, cpu = time.perf_counter() - t0, time.thread_time() - c0
        peak = tracemalloc.get_traced_memory()[1] - base
        gc.enable()
        print(
            json.dumps(
                {
                    "input": index,
                    "format": case.format,
                    "kind": case.kind,
                    "outcomes": outs,
                    "ms": round(1000 * took, 2),
                    "cpu_ms": round(1000 * cpu, 2),
                    "peak_mb": round(peak / 2**20, 3),
                }
            )
        )
    tracemalloc.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the campaign; print and optionally write the figures."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--no-memory", action="store_true", help="time only (no tracemalloc)")
    ap.add_argument("--replay", type=int, help="run only input N of this seed, 5 times, and print its costs")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    pool = seeds()
    with_json = [s for s in pool if s.collateral_json is not None]
    if args.replay is not None:
        return replay(rng, pool, with_json, args.replay)
    kinds: collections.Counter[str] = collections.Counter()
    outcomes: collections.Counter[str] = collections.Counter()
    per_format: dict[str, Figures] = collections.defaultdict(Figures)
    per_kind: dict[str, Figures] = collections.defaultdict(Figures)
    findings: list[str] = []
    measure_memory = not args.no_memory
    for seed in pool:  # warm: imports, pinned roots, the seeds' memo entries (a validator is warm too)
        check_verify(seed, seed.evidence)
    gc.collect()
    if measure_memory:
        tracemalloc.start()
    start = time.perf_counter()
    for i in range(args.inputs):
        case = draw(rng, pool, with_json)
        failed = False
        if i % GC_EVERY == 0:
            gc.collect()  # outside the measurement: the collector's pauses are not the input's cost
        gc.disable()
        if measure_memory:
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            outs = case.run()
        except Exception:  # a finding: anything that is not an AttestationError
            failed = True
            outs = []
            findings.append(f"input {i} ({case.format}, {case.kind}):\n{traceback.format_exc()}")
        took, cpu = time.perf_counter() - t0, time.thread_time() - c0
        peak = tracemalloc.get_traced_memory()[1] - base if measure_memory else 0
        gc.enable()
        kinds[case.kind] += 1
        outcomes.update(outs)
        per_format[case.format].add(i, case.kind, took, cpu, peak, failed)
        per_kind[case.kind].add(i, case.kind, took, cpu, peak, failed)
    elapsed = time.perf_counter() - start
    if measure_memory:
        tracemalloc.stop()
    worst_ms = max(f.worst_ms for f in per_format.values())
    worst_cpu = max(f.worst_cpu_ms for f in per_format.values())
    worst_mb = max(f.worst_mb for f in per_format.values())
    figures = {
        "inputs": args.inputs,
        "seed": args.seed,
        "seconds": round(elapsed, 1),
        "inputs_per_second": round(args.inputs / elapsed, 1),
        "memory_measured": measure_memory,
        "limits": DEFAULT_LIMITS.to_dict(),
        "unexpected_exceptions": len(findings),
        "worst_ms_per_input": round(worst_ms, 2),
        "worst_cpu_ms_per_input": round(worst_cpu, 2),
        "worst_peak_mb_per_input": round(worst_mb, 3),
        "targets": {"ms": TARGET_MS, "mb": TARGET_MB},
        "within_targets": {
            "wall": worst_ms < TARGET_MS,
            "cpu": worst_cpu < TARGET_MS,
            "mb": worst_mb < TARGET_MB,
        },
        "per_format": {k: v.to_dict() for k, v in sorted(per_format.items())},
        "per_kind": {k: v.to_dict() for k, v in sorted(per_kind.items())},
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
