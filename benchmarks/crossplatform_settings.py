"""The platforms and cases of ``tessera bench crossplatform``: its settings (instruction-set caps, threads,
device), which of them this machine can run, the run specs of its cases, and the fixed chain identities
its miner and validator use. Light to import."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tessera.devnet.config import DevnetConfig
from training.config import InnerConfig, ModelConfig

ROOT = Path(__file__).resolve().parent.parent
"""The repository root: the workers run there."""
AVX512 = ("avx512f", "avx512bw", "avx512vl", "avx512dq")
"""The CPU flags ATen's avx512 kernels need."""
CHAIN_ID = 31337
CONTRACT = "0x" + "11" * 20
MINERS = ["0x" + f"{i:040x}" for i in (0xA1, 0xB2, 0xC3, 0xD4)]
"""The registry (4 miners, as the devnet); the first one trains."""
VALIDATOR = "0x" + "5e" * 20
ENV_KEYS = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")
"""The variables a setting controls (removed from the workers' environment unless the setting sets them)."""


@dataclass(frozen=True)
class Setting:
    """One platform: the instruction-set caps of ATen, MKL and oneDNN, torch threads, and the device."""

    name: str
    env: dict[str, str] = field(default_factory=dict)
    needs: tuple[str, ...] = ()
    """CPU flags (``/proc/cpuinfo``) the setting needs."""
    threads: int = 1
    device: str = "cpu"
    about: str = ""


SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        Setting("native", about="what torch picks on this CPU by itself"),
        Setting("aten-default", {"ATEN_CPU_CAPABILITY": "default"}, about="ATen without vector kernels"),
        Setting("aten-avx2", {"ATEN_CPU_CAPABILITY": "avx2"}, ("avx2", "fma")),
        Setting("aten-avx512", {"ATEN_CPU_CAPABILITY": "avx512"}, AVX512),
        Setting("mkl-sse4_2", {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}, ("sse4_2",), about="MKL matmuls"),
        Setting("onednn-sse41", {"ONEDNN_MAX_CPU_ISA": "SSE41"}, ("sse4_1",), about="oneDNN GELU"),
        Setting(
            "oldest",
            {
                "ATEN_CPU_CAPABILITY": "default",
                "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
                "ONEDNN_MAX_CPU_ISA": "SSE41",
            },
            ("sse4_2",),
            about="all three at their lowest: a CPU without AVX",
        ),
        Setting(
            "all-avx2",
            {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
            ("avx2", "fma"),
            about="an AVX2 CPU",
        ),
        Setting(
            "all-avx512",
            {
                "ATEN_CPU_CAPABILITY": "avx512",
                "MKL_ENABLE_INSTRUCTIONS": "AVX512",
                "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
            },
            AVX512,
            about="an AVX-512 CPU",
        ),
        Setting("threads-4", threads=4, about="native kernels on 4 torch threads (nodes default to 1)"),
        Setting("cuda", device="cuda", about="the GPU (miner training, validator replay)"),
    )
}
DEFAULT_SETTINGS = [n for n in SETTINGS if n != "cuda"]
"""The settings run by default: every CPU one."""


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none, e.g. not Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


def unsupported(s: Setting, flags: set[str]) -> str | None:
    """Why this machine cannot run ``s`` (None if it can)."""
    if s.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return "no CUDA device (torch.cuda.is_available() is false)"
        return None
    missing = [f for f in s.needs if f not in flags]
    if missing:
        return f"this CPU lacks {', '.join(missing)}" + (
            " (forcing it dies with 'illegal instruction')" if "avx512f" in missing else ""
        )
    return None


SPECS = ("devnet", "run")
"""The run specs a case may use (see :func:`run_spec`)."""


def run_spec(spec: str, mode: str, steps: int | None) -> dict[str, Any]:
    """The run spec of a case: ``devnet`` is the recipe's inner loop, which ``tessera devnet`` and ``tessera
    runspec init`` write (``protocol.recipe``), ``run`` the plain ``InnerConfig()`` that run files written
    before the recipe use (H = 30, a state every 10 steps); both with ``mode``, H overridden by ``steps``."""
    from protocol.runspec import RunSpec
    from tessera.devnet.runfile import devnet_spec

    if spec == "devnet":
        inner = devnet_spec(DevnetConfig()).inner
    elif spec == "run":
        inner = InnerConfig()
    else:
        raise SystemExit(f"unknown spec {spec!r}; choose from {', '.join(SPECS)}")
    if steps:
        inner = replace(inner, steps=steps)
    return RunSpec(model=ModelConfig(mode=mode), inner=inner).to_json()  # type: ignore[arg-type]


def case_seed(case: str, setting: str) -> bytes:
    """The seed that picks the segments a validator replays of ``case`` trained under ``setting``."""
    return hashlib.sha256(f"tessera.bench.crossplatform\0{case}\0{setting}".encode()).digest()


METRICS = ("replay_param_rel_diff", "replay_moment_rel_diff", "ef_rel_err", "ef_after_rel_err")
"""What ``validator.pipeline`` records of an honest update's differences (see :mod:`benchmarks.crossplatform`)."""
