"""Issue 11's attestation reproducers, measured: outcome, wall and CPU time, tracemalloc peak.

    .venv/bin/python tests/attestation/issue11_reproducers.py [CHECKOUT]

CHECKOUT (default: this one) is the root of a checkout whose ``attestation`` and ``tests/attestation``
are measured, e.g. the code before the fix: ``git archive cbe1a3b attestation tests/attestation | tar
-x -C /tmp/before`` then ``... issue11_reproducers.py /tmp/before``. Written to run on both, so it uses
only what both have. The regression tests are ``test_attestation_bounds.py``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

MARKER = b"-----BEGIN CERTIFICATE-----"


def measure(name: str, fn: Callable[[], object]) -> dict[str, object]:
    """Run ``fn`` once; its outcome (ACCEPTED or the exception class), wall and CPU ms, peak MB."""
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    t, c = time.perf_counter(), time.process_time()
    try:
        fn()
        outcome = "ACCEPTED"
    except Exception as exc:  # the outcome is what is measured
        outcome = type(exc).__name__
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return {
        "case": name,
        "outcome": outcome,
        "wall_ms": round(1000 * wall, 3),
        "cpu_ms": round(1000 * cpu, 3),
        "peak_mb": round(peak / 2**20, 3),
    }


def main(argv: list[str]) -> int:
    """Print one JSON line per reproducer."""
    root = argv[1] if len(argv) > 1 else str(Path(__file__).resolve().parents[2])
    sys.path[:0] = [root]
    from attestation import loads_collateral, verify
    from attestation.intel.quote import CertificationData, Quote
    from tests.attestation.attest_support import intel_policy, intel_vectors

    vec = intel_vectors()["tdx_quote"]
    quote = Quote.parse(vec.quote)
    pem = quote.pck_certification.data.rstrip(b"\0")
    starts = [i for i in range(len(pem)) if pem.startswith(MARKER, i)]
    pck_ca, root_cert = pem[starts[1] : starts[2]], pem[starts[2] :]

    def with_pem(chain: bytes) -> bytes:
        qe = dataclasses.replace(quote.qe, certification_data=CertificationData(5, chain))
        outer = CertificationData(6, qe.to_bytes(), qe)
        return dataclasses.replace(quote, qe=qe, outer_certification=outer).to_bytes()

    cases: list[tuple[str, Callable[[], object]]] = []
    for n in (1000, 5000):
        padded = with_pem(pem + root_cert * n + b"\0")
        cases.append(
            (
                f"PCK chain + {n} root copies",
                lambda e=padded: verify(e, vec.collateral, intel_policy(), vec.inside),
            )
        )  # type: ignore[misc]
    big = with_pem(pem[: starts[2]] + pck_ca * ((18 << 20) // len(pck_ca)) + root_cert + b"\0")
    cases.append(
        ("18 MB PCK chain (PCK CA copies)", lambda: verify(big, vec.collateral, intel_policy(), vec.inside))
    )
    doc = json.loads(vec.collateral_json["tcb_info"])
    doc["tcbLevels"] = doc["tcbLevels"] * (61_000_000 // len(json.dumps(doc["tcbLevels"])))
    wire = json.dumps(dict(vec.collateral_json, tcb_info=json.dumps(doc)))
    cases.append(
        (
            "61 MB forged TCB info (collateral JSON)",
            lambda: verify(vec.quote, loads_collateral(wire), intel_policy(), vec.inside),
        )
    )
    for name, fn in cases:
        print(json.dumps(measure(name, fn)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
