"""``tessera bench attestation``: parse and verify time per quote for each format, simulated enclave cost.

    python -m benchmarks.attestation [--parse-runs 3000] [--verify-runs 300] [--json PATH]

Figures (median and p90 per call on this CPU):
* parse: bytes -> parsed object (Intel SGX v3, TDX v4, SEV-SNP v2, H100 SPDM, simulated TDX v4);
* verify (warm): the full ``attestation.verify`` with collateral already loaded (``CollateralCache``) and
  time-independent signature checks memoized: what a validator pays per quote;
* verify (cold): the first verification with freshly parsed collateral and empty memo caches;
* simulated enclave: deriving the development platform, producing a quote, producing collateral.
Targets: parse < 100 us, warm verify < 5 ms. JSON goes to --json (default reports/bench-attestation.json,
or OUT/bench-attestation.json when run as ``tessera bench attestation --out OUT``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from attestation import Binding, CollateralCache, Policy, TcbStatus, parse_evidence, verify
from attestation.collateral import NvidiaCollateral, SnpCollateral, dumps_collateral, loads_collateral
from attestation.memo import all_memos
from attestation.nvidia.spdm import decode_report_text
from attestation.simulated import SimulatedEnclave

VECTORS = Path(__file__).resolve().parent.parent / "tests" / "attestation" / "vectors"


def _times(fn: Callable[[], object], runs: int) -> dict[str, float]:
    fn()
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    out.sort()
    return {
        "median_us": round(statistics.median(out) * 1e6, 1),
        "p90_us": round(out[int(len(out) * 0.9)] * 1e6, 1),
        "runs": runs,
    }


def _clear_memos() -> None:
    for memo in all_memos():
        memo.cache_clear()


def _case(
    fmt: str, evidence: bytes, collateral_text: str, policy: Any, now: dt.datetime, expected: Any = None
) -> dict[str, Any]:
    """One quote format's case: its evidence and collateral, the policy and time it is verified under,
    and the binding it must carry (None: not checked)."""
    return {
        "format": fmt,
        "evidence": evidence,
        "collateral_text": collateral_text,
        "policy": policy,
        "now": now,
        "expected": expected,
    }


def _cases() -> list[dict[str, Any]]:
    """Every format's case: the real vectors of tests/attestation/vectors, then the simulated enclave."""
    utc = dt.UTC
    intel = VECTORS / "intel-dcap"
    policy_intel = Policy(min_tcb_status=TcbStatus.CONFIGURATION_AND_SW_HARDENING_NEEDED)
    sim = SimulatedEnclave.from_seed(b"bench")
    sim_now = dt.datetime(2026, 1, 1, tzinfo=utc)
    binding = Binding(31337, 1, "0x" + "11" * 20, bytes(32))
    snp_dir, nv_dir = VECTORS / "amd-sev-snp", VECTORS / "nvidia-h100"
    snp_collateral = SnpCollateral(
        (snp_dir / "vcek.testcer").read_bytes(), (snp_dir / "ask_ark_milan.pem").read_bytes()
    )
    return [
        *(
            _case(
                f"intel-{kind} (DCAP v{version}, real)",
                (intel / f"{kind}_quote").read_bytes(),
                (intel / f"{kind}_quote_collateral.json").read_text(),
                policy_intel,
                dt.datetime(2025, 6, 20, tzinfo=utc),
            )
            for kind, version in (("sgx", 3), ("tdx", 4))
        ),
        _case(
            "amd-sev-snp (v2, real)",
            (snp_dir / "attestation.bin").read_bytes(),
            dumps_collateral(snp_collateral),
            Policy(dangerous_allow_debug=True),
            dt.datetime(2023, 6, 1, tzinfo=utc),
        ),
        _case(
            "nvidia-h100 (SPDM 1.1, real)",
            decode_report_text((nv_dir / "hopperAttestationReport.txt").read_text()),
            dumps_collateral(NvidiaCollateral((nv_dir / "hopperCertChain.txt").read_bytes())),
            Policy(),
            dt.datetime(2025, 1, 1, tzinfo=utc),
        ),
        _case(
            "simulated TDX (v4, dev root)",
            sim.quote(binding.report_data()),
            dumps_collateral(sim.collateral(sim_now)),
            sim.policy(),
            sim_now,
            binding,
        ),
    ]


def run(parse_runs: int, verify_runs: int) -> dict[str, Any]:
    """Measure everything; return the figures."""
    rows = []
    for case in _cases():
        ev, text = case["evidence"], case["collateral_text"]

        def parse_once(ev: bytes = ev) -> object:
            return parse_evidence(ev)

        parse = _times(parse_once, parse_runs)
        cache = CollateralCache()

        def warm(case: dict[str, Any] = case, cache: CollateralCache = cache) -> None:
            verify(
                case["evidence"],
                cache.get(case["collateral_text"]),
                case["policy"],
                case["now"],
                case["expected"],
            )

        warm_t = _times(warm, verify_runs)
        colds = []
        for _ in range(max(5, verify_runs // 20)):
            _clear_memos()
            t = time.perf_counter()
            verify(ev, loads_collateral(text), case["policy"], case["now"], case["expected"])
            colds.append(time.perf_counter() - t)
        rows.append(
            {
                "format": case["format"],
                "bytes": len(ev),
                "parse": parse,
                "verify_warm": warm_t,
                "verify_cold_median_us": round(statistics.median(colds) * 1e6, 1),
            }
        )
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    counter = iter(range(10**9))
    enclave = SimulatedEnclave.from_seed(b"bench")
    rd = bytes(64)
    sim = {
        "setup_from_seed": _times(lambda: SimulatedEnclave.from_seed(b"seed-%d" % next(counter)), 20),
        "quote": _times(lambda: enclave.quote(rd), verify_runs),
        "collateral": _times(lambda: enclave.collateral(now), max(20, verify_runs // 5)),
    }
    return {
        "benchmark": "attestation",
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "targets": {"parse_us": 100, "verify_warm_us": 5000},
        "formats": rows,
        "simulated_enclave": sim,
    }


def _table(fig: dict[str, Any]) -> str:
    lines = [
        f"{'format':32} {'bytes':>6} {'parse us':>9} {'verify ms (warm)':>17} {'p90 ms':>7} {'cold ms':>8}",
    ]
    for r in fig["formats"]:
        lines.append(
            f"{r['format']:32} {r['bytes']:>6} {r['parse']['median_us']:>9.1f} "
            f"{r['verify_warm']['median_us'] / 1000:>17.2f} {r['verify_warm']['p90_us'] / 1000:>7.2f} "
            f"{r['verify_cold_median_us'] / 1000:>8.2f}"
        )
    s = fig["simulated_enclave"]
    lines.append(
        f"simulated enclave: setup {s['setup_from_seed']['median_us'] / 1000:.2f} ms, quote "
        f"{s['quote']['median_us'] / 1000:.2f} ms, collateral {s['collateral']['median_us'] / 1000:.2f} ms"
    )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="benchmarks.attestation", description="attestation parse/verify figures"
    )
    ap.add_argument("--parse-runs", type=int, default=3000)
    ap.add_argument("--verify-runs", type=int, default=300)
    ap.add_argument("--json", default=None, help="output JSON (default reports/bench-attestation.json)")
    return ap


def main(args: argparse.Namespace | Sequence[str] | None = None) -> int:
    """Entry point for ``tessera bench attestation`` (a Namespace with ``out``/``extra``) and ``-m``."""
    out_dir: str | None = None
    if isinstance(args, argparse.Namespace):
        out_dir = getattr(args, "out", None)
        argv = [a for a in (getattr(args, "extra", None) or []) if a != "--"]
    else:
        argv = list(sys.argv[1:] if args is None else args)
    opts = _parser().parse_args(argv)
    fig = run(opts.parse_runs, opts.verify_runs)
    print(_table(fig))
    path = Path(
        opts.json
        or (Path(out_dir) / "bench-attestation.json" if out_dir else "reports/bench-attestation.json")
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fig, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
