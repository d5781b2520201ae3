"""A small mutational fuzzing engine: seeded, reproducible, typed-error aware.

A :class:`Target` generates one input from a ``random.Random`` and feeds it to the code under test. The
engine counts inputs that were accepted, refused with an allowed (typed) error, or that raised anything
else (a *failure*, kept with its input for reproduction, deduplicated by type and raising line).
Nothing is unpickled; inputs are bytes or text.

With ``measure=True`` every input's wall time and peak resident memory (``tests.support.bombs.PeakRSS``:
the kernel's high-water mark reset before the input, so torch's allocations count) are taken, and the
worst of each is kept with its input; where the target can say how many bytes an input declares it
decodes to (``Target.declared_bytes``), the worst ratio of peak memory to that size is kept too.
"""

from __future__ import annotations

import json
import random
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Values a JSON mutator substitutes: every JSON type, boundaries and odd text.
JSON_ODDITIES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    2**31,
    2**32,
    2**63,
    2**64,
    -(2**63),
    10**30,
    "",
    "0x",
    "0x" + "00" * 20,
    "0x" + "ff" * 32,
    "a" * 300,
    "\u0000",
    "\u00e9",
    "../../etc/passwd",
    "NaN",
    [],
    {},
    [[[]]],
    {"a": {}},
    [0] * 40,
]


def random_json(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON value (no floats: most of our formats refuse them; see ``float_json``)."""
    r = rng.random()
    if depth > 3 or r < 0.5:
        return rng.choice(JSON_ODDITIES) if rng.random() < 0.6 else rng.randint(-(2**70), 2**70)
    if r < 0.75:
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(["a", "v", "kind", "", "x" * 10]): random_json(rng, depth + 1) for _ in range(3)}


def mutate_json(doc: Any, rng: random.Random) -> Any:
    """Replace, delete or add one field somewhere in ``doc`` (a deep copy is returned)."""
    doc = json.loads(json.dumps(doc))
    holders: list[Any] = []

    def walk(x: Any) -> None:
        if isinstance(x, dict | list):
            holders.append(x)
            for v in x.values() if isinstance(x, dict) else x:
                walk(v)

    walk(doc)
    if not holders:
        return random_json(rng)
    h = rng.choice(holders)
    op = rng.random()
    if isinstance(h, dict):
        keys = list(h)
        if keys and op < 0.6:
            h[rng.choice(keys)] = random_json(rng)
        elif keys and op < 0.8:
            del h[rng.choice(keys)]
        else:
            h[rng.choice(["extra", "v", "", "__proto__"])] = random_json(rng)
    else:
        if h and op < 0.6:
            h[rng.randrange(len(h))] = random_json(rng)
        elif h and op < 0.8:
            del h[rng.randrange(len(h))]
        else:
            h.insert(rng.randint(0, len(h)), random_json(rng))
    return doc


def mutate_bytes(data: bytes, rng: random.Random, max_ops: int = 4) -> bytes:
    """Byte-level havoc: flips, random bytes, inserts, deletes, truncation, splices, boundary ints."""
    b = bytearray(data)
    for _ in range(rng.randint(1, max_ops)):
        op = rng.randrange(8)
        n = len(b)
        if op == 0 and n:
            i = rng.randrange(n)
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and n:
            b[rng.randrange(n)] = rng.randrange(256)
        elif op == 2:
            i = rng.randint(0, n)
            b[i:i] = rng.randbytes(rng.randint(1, 16))
        elif op == 3 and n:
            i = rng.randrange(n)
            del b[i : i + rng.randint(1, 16)]
        elif op == 4:
            del b[rng.randint(0, n) :]
        elif op == 5 and n >= 8:
            i = rng.randrange(n - 7)
            b[i : i + 8] = rng.choice([b"\xff" * 8, b"\x00" * 8, b"\x7f" + b"\xff" * 7, rng.randbytes(8)])
        elif op == 6 and n:
            i, j = sorted(rng.sample(range(n + 1), 2)) if n > 1 else (0, n)
            b[i:i] = b[i:j]
        else:
            chars = b'{}[]",:0-eE.\\\x00\xff'
            if n:
                b[rng.randrange(n)] = chars[rng.randrange(len(chars))]
    return bytes(b)


@dataclass
class Failure:
    """One distinct unexpected exception."""

    kind: str
    message: str
    where: str
    count: int
    input_hex: str


@dataclass
class Result:
    """What a campaign did."""

    target: str
    inputs: int = 0
    accepted: int = 0
    refused: int = 0
    seconds: float = 0.0
    failures: dict[str, Failure] = field(default_factory=dict)
    refused_by: dict[str, int] = field(default_factory=dict)
    crashed_servers: int = 0
    measured: bool = False
    worst_seconds: float = 0.0
    worst_seconds_input: str = ""
    worst_seconds_outcome: str = ""
    worst_cpu_seconds: float = 0.0
    """Largest CPU time of one input (all threads; torch runs on one thread when measuring)."""
    worst_cpu_input: str = ""
    worst_peak_bytes: int = 0
    worst_peak_input: str = ""
    worst_peak_outcome: str = ""
    worst_ratio: float = 0.0
    """Largest peak memory / declared decoded bytes, over inputs declaring at least ``RATIO_FLOOR``."""
    worst_ratio_input: str = ""
    largest_declared_accepted: int = 0
    """Largest declared decoded size among accepted inputs."""

    @property
    def failed(self) -> int:
        """Inputs that raised an unexpected exception."""
        return sum(f.count for f in self.failures.values())

    def to_json(self) -> dict[str, Any]:
        """JSON summary."""
        return {
            "target": self.target,
            "inputs": self.inputs,
            "accepted": self.accepted,
            "refused": self.refused,
            "failed": self.failed,
            "crashed_servers": self.crashed_servers,
            "seconds": round(self.seconds, 2),
            "inputs_per_second": round(self.inputs / max(self.seconds, 1e-9), 1),
            "refused_by": dict(sorted(self.refused_by.items(), key=lambda kv: -kv[1])),
            "failures": [f.__dict__ for f in self.failures.values()],
            **(
                {
                    "worst_seconds": round(self.worst_seconds, 4),
                    "worst_cpu_seconds": round(self.worst_cpu_seconds, 4),
                    "worst_cpu_input": self.worst_cpu_input,
                    "worst_seconds_outcome": self.worst_seconds_outcome,
                    "worst_seconds_input": self.worst_seconds_input,
                    "worst_peak_mib": round(self.worst_peak_bytes / 2**20, 1),
                    "worst_peak_bytes": self.worst_peak_bytes,
                    "worst_peak_outcome": self.worst_peak_outcome,
                    "worst_peak_input": self.worst_peak_input,
                    "worst_peak_over_declared": round(self.worst_ratio, 2),
                    "worst_ratio_input": self.worst_ratio_input,
                    "largest_declared_accepted_mib": round(self.largest_declared_accepted / 2**20, 1),
                }
                if self.measured
                else {}
            ),
        }


class Target:
    """A fuzz target: ``generate`` one input, ``check`` it; allowed exceptions are refusals."""

    name = "target"
    allowed: tuple[type[BaseException], ...] = ()
    memory = "rss"
    """How ``measure`` takes an input's peak memory: ``rss`` (the process's resident set, torch included)
    or ``tracemalloc`` (Python's allocations only: exact for pure-Python decoders)."""

    def setup(self) -> None:
        """Build seed corpora, start servers."""

    def teardown(self) -> None:
        """Stop what ``setup`` started."""

    def generate(self, rng: random.Random) -> bytes:
        """One input."""
        raise NotImplementedError

    def check(self, data: bytes) -> None:
        """Feed the input to the code under test (raise on refusal)."""
        raise NotImplementedError

    def crashed(self) -> bool:
        """Whether a server under test has died (checked periodically)."""
        return False

    def declared_bytes(self, data: bytes) -> int | None:
        """How many bytes the input declares it decodes to, if the target knows (for memory ratios)."""
        return None

    def describe(self, data: bytes) -> str:
        """A short description of an input (what it declares), kept with the worst inputs."""
        return ""

    def warm_up(self) -> None:
        """One-time work (caches, lazy imports) done before measuring, so it is not billed to an input."""


#: Inputs declaring fewer decoded bytes than this are left out of the memory ratio (the caps allow a fixed
#: 16 MiB on top of the ratio: tiny parameters have fixed costs, e.g. a whole DCT tile).
RATIO_FLOOR = 16 << 20


def _where(exc: BaseException) -> str:
    """The innermost frame in Tessera's own code (not the fuzzer, not a dependency)."""
    tb = traceback.extract_tb(exc.__traceback__)
    root = str(Path(__file__).resolve().parents[2]) + "/"
    ours = [
        f
        for f in tb
        if f.filename.startswith(root) and "/tests/fuzz/" not in f.filename and "/.venv/" not in f.filename
    ]
    f = (ours or tb)[-1] if (ours or tb) else None
    return f"{f.filename.removeprefix(root)}:{f.lineno}" if f else "?"


def _hex(target: Target, data: bytes) -> str:
    what = target.describe(data)
    return (what + " | " if what else "") + data[:2048].hex()


def run_campaign(
    target: Target,
    inputs: int,
    seed: int = 0,
    progress: Callable[[Result], None] | None = None,
    time_limit: float | None = None,
    measure: bool = False,
) -> Result:
    """Run ``inputs`` generated inputs against ``target``; never raises for the target's exceptions."""
    from tests.support.bombs import PeakRSS, TracePeak

    rng = random.Random(seed)
    res = Result(target.name, measured=measure)
    target.setup()
    probe = (TracePeak() if target.memory == "tracemalloc" else PeakRSS()) if measure else None
    if measure:
        target.warm_up()
    t0 = time.perf_counter()
    try:
        for i in range(inputs):
            data = target.generate(rng)
            res.inputs += 1
            exc: BaseException | None = None
            if probe is None:
                try:
                    target.check(data)
                except Exception as e:
                    exc = e
            else:
                started, cpu = time.perf_counter(), time.process_time()
                peak, exc = probe.measure(lambda d=data: target.check(d))
                took, cpu = time.perf_counter() - started, time.process_time() - cpu
                outcome = "accepted" if exc is None else type(exc).__name__
                if took > res.worst_seconds:
                    res.worst_seconds, res.worst_seconds_outcome = took, outcome
                    res.worst_seconds_input = _hex(target, data)
                if cpu > res.worst_cpu_seconds:
                    res.worst_cpu_seconds, res.worst_cpu_input = cpu, _hex(target, data)
                if peak > res.worst_peak_bytes:
                    res.worst_peak_bytes, res.worst_peak_outcome = peak, outcome
                    res.worst_peak_input = _hex(target, data)
                declared = target.declared_bytes(data)
                if declared is not None and declared >= RATIO_FLOOR and peak / declared > res.worst_ratio:
                    res.worst_ratio, res.worst_ratio_input = peak / declared, _hex(target, data)
                if declared is not None and exc is None:
                    res.largest_declared_accepted = max(res.largest_declared_accepted, declared)
            if exc is None:
                res.accepted += 1
            elif isinstance(exc, target.allowed):
                res.refused += 1
                res.refused_by[type(exc).__name__] = res.refused_by.get(type(exc).__name__, 0) + 1
            else:  # the point of fuzzing: anything untyped is a finding
                key = f"{type(exc).__name__}@{_where(exc)}"
                if key in res.failures:
                    res.failures[key].count += 1
                else:
                    res.failures[key] = Failure(
                        type(exc).__name__, str(exc)[:300], _where(exc), 1, data[:2048].hex()
                    )
            if i % 1000 == 999:
                if target.crashed():
                    res.crashed_servers += 1
                    break
                if progress is not None:
                    res.seconds = time.perf_counter() - t0
                    progress(res)
            if time_limit is not None and time.perf_counter() - t0 > time_limit:
                break
        if target.crashed():
            res.crashed_servers += 1
    finally:
        res.seconds = time.perf_counter() - t0
        target.teardown()
    return res
