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
before CUDA is initialised;
:func:`use_deterministic` sets it if it is missing and raises :class:`DeviceError` if CUDA was initialised
before without it. On the CPU these settings change no bits (checked by ``tests/training/test_device.py``).

Deterministic means: the same inputs on the same machine, torch build and settings give the same bits.
Across CPU instruction sets, or between a GPU and a CPU, kernels differ and so do the bits; validators
compare replays within tolerances measured across platforms (``tessera bench crossplatform``,
docs/benchmarks.md).
"""

from __future__ import annotations

import os
import re

import torch

from training.errors import DeviceError

CUBLAS_WORKSPACE_CONFIG = ":4096:8"
"""The cuBLAS workspace configuration set for deterministic GEMMs (``:16:8`` is also accepted)."""

_DETERMINISTIC_CUBLAS = (":4096:8", ":16:8")
_NAME = re.compile(r"cpu|cuda(:[0-9]+)?")


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

    Call once at a node's start, before any CUDA work (see the module doc for each setting and why)."""
    dev = resolve_device(str(device)) if not isinstance(device, torch.device) else device
    cublas = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if cublas is None:
        if dev.type == "cuda" and torch.cuda.is_initialized():
            raise DeviceError(
                "CUDA was initialised before CUBLAS_WORKSPACE_CONFIG was set; set "
                f"CUBLAS_WORKSPACE_CONFIG={CUBLAS_WORKSPACE_CONFIG} in the environment before starting"
            )
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE_CONFIG
    elif dev.type == "cuda" and cublas not in _DETERMINISTIC_CUBLAS:
        raise DeviceError(
            f"CUBLAS_WORKSPACE_CONFIG={cublas!r} is not deterministic; use {CUBLAS_WORKSPACE_CONFIG}"
        )
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return dev
