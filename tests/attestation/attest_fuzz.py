"""Input generators shared by the hypothesis tests and the fuzz campaign: mutated real evidence, random
bytes, mutated collateral. Every generated input goes through parse and verify; the only exceptions
allowed out are ``AttestationError`` subclasses."""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attest_support import (
    NVIDIA_TIME,
    SNP_TIME,
    intel_policy,
    intel_vectors,
    nvidia_collateral,
    nvidia_report,
    snp_collateral,
    snp_report,
    utc,
)

from attestation import Binding, Policy, detect_format, parse_evidence, verify
from attestation.amd.report import SnpReport
from attestation.collateral import Collateral, collateral_from_dict, loads_collateral
from attestation.errors import AttestationError
from attestation.intel.quote import Quote
from attestation.nvidia.spdm import GpuReport
from attestation.policy import policy_from_dict
from attestation.simulated import SimulatedEnclave


@dataclass(frozen=True)
class Seed:
    """One real (or simulated) evidence with what verifies it."""

    name: str
    evidence: bytes
    collateral: Collateral
    collateral_json: dict[str, Any] | None
    policy: Policy
    now: dt.datetime
    expected: Binding | bytes | None


SIM_NOW = utc(2026, 11, 22, 12)
SIM_BINDING = Binding(31337, 9, "0x" + "42" * 20, bytes(range(32)))


def seeds() -> list[Seed]:
    """The real Intel, AMD, NVIDIA evidence and one simulated TDX quote."""
    out = []
    for name, vec in intel_vectors().items():
        out.append(
            Seed(name, vec.quote, vec.collateral, vec.collateral_json, intel_policy(), vec.inside, None)
        )
    out.append(
        Seed("snp", snp_report(), snp_collateral(), None, Policy(dangerous_allow_debug=True), SNP_TIME, None)
    )
    out.append(Seed("nvidia", nvidia_report(), nvidia_collateral(), None, Policy(), NVIDIA_TIME, None))
    enc = SimulatedEnclave.from_seed(b"fuzz")
    coll = enc.collateral(SIM_NOW)
    out.append(
        Seed(
            "simulated",
            enc.quote(SIM_BINDING.report_data()),
            coll,
            coll.to_dict(),
            enc.policy(),
            SIM_NOW,
            SIM_BINDING,
        )
    )
    return out


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    """One to four random edits: flip, set, insert, delete, truncate, duplicate a span, splice zeros."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(8)
        n = len(b)
        if n == 0:
            b += rng.randbytes(rng.randint(1, 64))
            continue
        pos = rng.randrange(n)
        if op == 0:
            b[pos] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[pos] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
        elif op == 2:
            b[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op == 3:
            del b[pos : pos + rng.randint(1, 8)]
        elif op == 4:
            del b[pos:]
        elif op == 5:
            end = min(n, pos + rng.randint(1, 64))
            b[pos:pos] = b[pos:end]
        elif op == 6:
            # Length fields: write a random little-endian u16/u32 somewhere.
            width = rng.choice((2, 4))
            b[pos : pos + width] = rng.randrange(1 << (8 * width)).to_bytes(width, "little")
        else:
            b[pos : pos + 4] = bytes(4)
    return bytes(b)


def mutate_collateral(rng: random.Random, cj: dict[str, Any]) -> dict[str, Any]:
    """One random edit of a collateral dict: drop a key, edit a string, re-type a value, edit inner JSON."""
    d = dict(cj)
    key = rng.choice(sorted(d))
    op = rng.randrange(6)
    value = d[key]
    if op == 0:
        del d[key]
    elif op == 1 and isinstance(value, str) and value:
        pos = rng.randrange(len(value))
        d[key] = value[:pos] + chr(rng.randrange(32, 127)) + value[pos + 1 :]
    elif op == 2:
        d[key] = rng.choice([None, 1, [], {}, "", "zz", "00" * 3])
    elif op == 3 and key in ("tcb_info", "qe_identity"):
        try:
            doc = json.loads(value)
        except ValueError:
            return d
        if isinstance(doc, dict) and doc:
            inner = rng.choice(sorted(doc))
            doc[inner] = rng.choice([None, -1, 2**70, "x", [], {}, [{}], "2025-13-01T00:00:00Z", 1.5])
        d[key] = json.dumps(doc)
    elif op == 4 and isinstance(value, str):
        d[key] = value[: rng.randrange(len(value) + 1)]
    else:
        d["format"] = rng.choice(["intel-dcap", "amd-sev-snp", "nvidia-h100", "x", 3])
    return d


def run_one(fn: Callable[[], object]) -> str:
    """Run ``fn``; return "accept" or the AttestationError class name. Any other exception propagates."""
    try:
        fn()
    except AttestationError as exc:
        return type(exc).__name__
    return "accept"


def check_parsers(data: bytes) -> list[str]:
    """Every parser and the detector on ``data``."""
    outs = [
        run_one(lambda: Quote.parse(data)),
        run_one(lambda: SnpReport.parse(data)),
        run_one(lambda: GpuReport.parse(data)),
        run_one(lambda: detect_format(data)),
        run_one(lambda: parse_evidence(data)),
    ]
    for parsed_cls in (Quote, SnpReport, GpuReport):
        try:
            parsed = parsed_cls.parse(data)  # type: ignore[attr-defined]
        except AttestationError:
            continue
        assert parsed.to_bytes() == data, f"{parsed_cls.__name__} does not round-trip"
    return outs


def check_verify(seed: Seed, evidence: bytes, collateral: Collateral | None = None) -> str:
    """verify() of mutated evidence (and optionally other collateral)."""
    coll = collateral if collateral is not None else seed.collateral
    return run_one(lambda: verify(evidence, coll, seed.policy, seed.now, seed.expected))


def check_collateral(seed: Seed, cj: dict[str, Any]) -> str:
    """Load mutated collateral JSON and verify the seed's evidence with it."""

    def go() -> None:
        coll = loads_collateral(json.dumps(cj))
        verify(seed.evidence, coll, seed.policy, seed.now, seed.expected)

    return run_one(go)


def check_policy(rng: random.Random) -> str:
    """A random policy document."""
    keys = [
        "intel_roots",
        "min_tcb_status",
        "allowed_mrtd",
        "allowed_rtmr",
        "snp_min_tcb",
        "max_collateral_age_s",
    ]
    doc = {
        rng.choice(keys): rng.choice([None, [], ["zz"], ["00"], "UpToDate", "x", {"a": "b"}, 5, [None] * 4])
        for _ in range(rng.randint(1, 3))
    }
    return run_one(lambda: policy_from_dict(doc))


__all__ = [
    "Seed",
    "check_collateral",
    "check_parsers",
    "check_policy",
    "check_verify",
    "collateral_from_dict",
    "mutate_bytes",
    "mutate_collateral",
    "seeds",
]
