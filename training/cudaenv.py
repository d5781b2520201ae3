"""The CUDA settings that must be in the environment before CUDA initialises, set without importing torch.

``CUBLAS_WORKSPACE_CONFIG`` is read by cuBLAS (and checked by torch's deterministic mode) from the process
environment: a value set after the first CUDA work comes too late (``training.device`` says why it is
needed). So it is set as early as a process can: by :func:`prepare_cuda_env`, called when the command line
starts (``tessera/__main__.py``, ``tessera.cli``), when ``training.device`` is imported (every benchmark
and node reaches it before its first CUDA call) and when the test run starts (``tests/conftest.py``). This
module imports nothing heavy, so the command line's ``--help`` path stays free of torch.

A value already there is kept, deterministic or not: ``training.device.use_deterministic`` refuses a
non-deterministic one for a CUDA device with a clear error rather than overriding what an operator set.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import TypeGuard

CUBLAS_ENV = "CUBLAS_WORKSPACE_CONFIG"
"""The environment variable cuBLAS reads its workspace configuration from."""

CUBLAS_WORKSPACE_CONFIG = ":4096:8"
"""The cuBLAS workspace configuration set for deterministic GEMMs (eight 4 MiB buffers)."""

DETERMINISTIC_CUBLAS = (":4096:8", ":16:8")
"""The values torch's deterministic mode accepts (``:16:8``: less memory, sometimes slower)."""


def prepare_cuda_env(environ: MutableMapping[str, str] | None = None) -> str:
    """Put :data:`CUBLAS_WORKSPACE_CONFIG` into ``environ`` (default: ``os.environ``) unless the variable is
    already set; return the value now there. Harmless to call any number of times, with or without CUDA."""
    env = os.environ if environ is None else environ
    return env.setdefault(CUBLAS_ENV, CUBLAS_WORKSPACE_CONFIG)


def is_deterministic_cublas(value: str | None) -> TypeGuard[str]:
    """Whether ``value`` of ``CUBLAS_WORKSPACE_CONFIG`` is one torch's deterministic mode accepts."""
    return value in DETERMINISTIC_CUBLAS
