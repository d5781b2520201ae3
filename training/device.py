"""Where the training core computes (``cpu``, ``cuda``, ``cuda:N``) and the deterministic settings torch offers.

A node names its device once (``device`` in its config, ``--device`` on the command line); the inner loop,
the validator's replay and its loss evaluation build the model on that device, move the batches there,
and hand every result back as CPU fp32 tensors. What crosses a process boundary (updates, transcript
states, checkpoints, digests, the codec's input and output) never lives on an accelerator, so the wire
format and every digest are the same whatever device computed them.

Determinism. :func:`use_deterministic` applies what torch offers: ``torch.use_deterministic_algorithms
(True)`` (ops with a deterministic variant use it, the others raise instead of silently varying), cuDNN
without autotuning (``cudnn.benchmark = False``, ``cudnn.deterministic = True``), fp32 matmuls without
TF32 (``set_float32_matmul_precision("highest")``: TF32 keeps 10 mantissa bits and would be far outside
the replay tolerances) and ``CUBLAS_WORKSPACE_CONFIG=:4096:8``. Why the last one: since CUDA 10.2 cuBLAS
takes GEMM workspace from a pool shared by streams, and the workspace a call gets can change the algorithm,
so the bits, from one call to the next; a fixed configuration (``:4096:8``, eight 4 MiB buffers) removes
that, and torch's deterministic mode refuses cuBLAS calls without one. It is an environment variable, read
once when the first cuBLAS handle is set up (the first matmul on a GPU), so it must be in the environment
before CUDA is initialised. It is therefore set before any CUDA work can happen, whatever the import
order: :func:`training.cudaenv.prepare_cuda_env` runs when this module is imported (and earlier still in
the command line's and the test run's entry points), and this module notes the value each time it looks
while CUDA is not yet initialised (:func:`note_cuda_env`): that is the value CUDA starts with.
:func:`use_deterministic` checks that noted value, not the environment at call time, so a correct process
never trips it (a test fixture that removed the variable afterwards, a benchmark that moved a model to the
GPU before its first call); it puts the noted value back where it was removed (torch's deterministic mode
re-reads the variable at each cuBLAS call) and raises :class:`DeviceError` only when CUDA really started
without a deterministic value. On the CPU these settings change no bits (checked by
``tests/training/test_device.py``).

Deterministic means: the same inputs on the same machine, torch build and settings give the same bits.
Across CPU instruction sets, or between a GPU and a CPU, kernels differ and so do the bits; validators
compare replays within tolerances measured across platforms (``tessera bench crossplatform``,
docs/benchmarks.md).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import torch

from training.cudaenv import CUBLAS_ENV, CUBLAS_WORKSPACE_CONFIG, is_deterministic_cublas, prepare_cuda_env
from training.errors import DeviceError

_NAME = re.compile(r"cpu|cuda(:[0-9]+)?")


@dataclass
class CudaStart:
    """What this process knows of the environment CUDA started (or will start) with."""

    cublas: str | None = None
    """``CUBLAS_WORKSPACE_CONFIG`` as last seen while CUDA was not initialised (None: unset then)."""
    seen_before_init: bool = False
    """Whether this module ever looked while CUDA was not initialised; False when CUDA was initialised
    before it was imported, so :attr:`cublas` is the value found at import, the best evidence there is."""


CUDA_START = CudaStart()
"""This process's :class:`CudaStart` (one per process: CUDA starts once)."""


def note_cuda_env() -> CudaStart:
    """Note ``CUBLAS_WORKSPACE_CONFIG`` as it stands if CUDA is not initialised yet (it is what CUDA will
    start with); return what is known. Called at import and by :func:`use_deterministic`."""
    if not torch.cuda.is_initialized():
        CUDA_START.cublas, CUDA_START.seen_before_init = os.environ.get(CUBLAS_ENV), True
    return CudaStart(CUDA_START.cublas, CUDA_START.seen_before_init)


def cublas_config_at_cuda_start() -> str | None:
    """The ``CUBLAS_WORKSPACE_CONFIG`` CUDA started (or will start) with, as far as this process knows."""
    return note_cuda_env().cublas


if torch.cuda.is_initialized():  # CUDA started before this import: what is set now is the best evidence
    CUDA_START.cublas = os.environ.get(CUBLAS_ENV)
else:
    prepare_cuda_env()
    note_cuda_env()


def check_device_name(name: str) -> str:
    """``name`` if it is ``cpu``, ``cuda`` or ``cuda:N``; :class:`DeviceError` otherwise (no torch calls)."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise DeviceError(f"device must be cpu, cuda or cuda:N, not {name!r}")
    return name


def resolve_device(name: str) -> torch.device:
    """The ``torch.device`` for a device name; :class:`DeviceError` if it is malformed or the machine has
    no such device (CUDA asked for and ``torch.cuda.is_available()`` false, or an index out of range)."""
    check_device_name(name)
    dev = torch.device(name)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(
                f"device {name!r}: CUDA is not available here (torch {torch.__version__}, built "
                f"{'with CUDA ' + str(torch.version.cuda) if torch.version.cuda else 'without CUDA'}); "
                "use device cpu or install a CUDA build of torch on a machine with an NVIDIA GPU"
            )
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise DeviceError(f"device {name!r}: this machine has {count} CUDA device(s)")
    return dev


def use_deterministic(device: torch.device | str = "cpu") -> torch.device:
    """Apply torch's deterministic settings for ``device`` (process-wide) and return the device.

    Call at a node's start. CUDA work done before is fine as long as ``CUBLAS_WORKSPACE_CONFIG`` was set
    before CUDA initialised (importing this module sees to that); otherwise, for a CUDA device,
    :class:`DeviceError` (see the module doc for each setting and why)."""
    dev = resolve_device(str(device)) if not isinstance(device, torch.device) else device
    _check_cublas(dev)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return dev


def _check_cublas(dev: torch.device) -> None:
    """Make the environment's ``CUBLAS_WORKSPACE_CONFIG`` deterministic and the one CUDA started with."""
    if not torch.cuda.is_initialized():  # not too late: the value set now is the one CUDA starts with
        value = prepare_cuda_env()
        if dev.type == "cuda" and not is_deterministic_cublas(value):
            raise DeviceError(
                f"CUBLAS_WORKSPACE_CONFIG={value!r} is not deterministic; use {CUBLAS_WORKSPACE_CONFIG}"
            )
        note_cuda_env()
        return
    at_start = note_cuda_env().cublas
    if is_deterministic_cublas(at_start):
        os.environ[CUBLAS_ENV] = at_start  # torch's deterministic mode re-reads it at each cuBLAS call
    elif dev.type == "cuda":
        if at_start is None:
            raise DeviceError(
                "CUDA was initialised before CUBLAS_WORKSPACE_CONFIG was set; set "
                f"CUBLAS_WORKSPACE_CONFIG={CUBLAS_WORKSPACE_CONFIG} in the environment before starting (or "
                "import training.device before the first CUDA call)"
            )
        raise DeviceError(
            f"CUDA was initialised with CUBLAS_WORKSPACE_CONFIG={at_start!r}, which is not deterministic; "
            f"set CUBLAS_WORKSPACE_CONFIG={CUBLAS_WORKSPACE_CONFIG} in the environment before starting"
        )
    else:
        prepare_cuda_env()  # the CPU computes without it; set for any later CUDA call's check
