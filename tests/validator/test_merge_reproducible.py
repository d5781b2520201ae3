"""The merge gives the same checkpoint digest under every instruction-set setting (issue 12).

Each setting runs ``tests/support/merge_case.py`` in its own process (ATen picks its kernels once, at
start-up) and must print the digests pinned in tests/training/golden/golden.json, so a machine with other
kernels (an AVX-512 CPU, ARM, a GPU box) is checked against the same numbers, not only against this one.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.crossplatform_settings import cpu_flags

HERE = Path(__file__).resolve().parent
GOLDEN = json.loads((HERE.parent / "training" / "golden" / "golden.json").read_text())["merge_case"]

# torch's x86 capabilities and the CPU flags each needs (torch dies with SIGILL on a CPU without them)
X86_CAPS = {"avx2": {"avx2", "fma"}, "avx512": {"avx512f", "avx512bw", "avx512vl", "avx512dq"}}


def _settings() -> list[tuple[str, dict[str, str], int]]:
    flags = cpu_flags()
    out: list[tuple[str, dict[str, str], int]] = [("default-1thread", {"ATEN_CPU_CAPABILITY": "default"}, 1)]
    out.append(("default-4threads", {"ATEN_CPU_CAPABILITY": "default"}, 4))
    if platform.machine() in ("x86_64", "AMD64"):
        for cap, need in X86_CAPS.items():
            if need <= flags:
                out.append((cap, {"ATEN_CPU_CAPABILITY": cap}, 2))
        out.append(("mkl-sse4_2", {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}, 2))
        out.append(("onednn-sse41", {"ONEDNN_MAX_CPU_ISA": "SSE41"}, 2))
    return out


SETTINGS = _settings()


def _run(env: dict[str, str], threads: int) -> dict[str, str]:
    full = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY",)}
    full.update(env)
    proc = subprocess.run(
        [sys.executable, str(HERE.parent / "support" / "merge_case.py"), str(threads)],
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(("label", "env", "threads"), SETTINGS, ids=[s[0] for s in SETTINGS])
def test_merge_digest_is_the_pinned_one(label: str, env: dict[str, str], threads: int) -> None:
    got = _run(env, threads)
    assert set(got) == set(GOLDEN)
    differ = {k: (got[k][:16], GOLDEN[k][:16]) for k in GOLDEN if got[k] != GOLDEN[k]}
    assert not differ, f"under {label} ({env}, {threads} threads) these digests differ: {differ}"


def test_every_setting_of_this_cpu_is_covered() -> None:
    """The capabilities this CPU supports are all in the list (an AVX-512 machine runs avx512 too)."""
    flags = cpu_flags()
    labels = {s[0] for s in SETTINGS}
    if platform.machine() in ("x86_64", "AMD64"):
        for cap, need in X86_CAPS.items():
            assert (cap in labels) == (need <= flags)
