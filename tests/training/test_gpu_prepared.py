"""The pieces of issue 29's prepared GPU run that a CPU can check: the precision comparison's settings and
differences, and the script's syntax (the script itself ran here with ``--device cpu --tiny``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import torch

from benchmarks.gpu.precision import SETTINGS, rel_differences, setting

ROOT = Path(__file__).resolve().parents[2]


def test_relative_differences_split_parameters_from_moments() -> None:
    want = {"param/w": torch.ones(4), "exp_avg/w": torch.full((4,), 2.0), "step": torch.tensor(3)}
    got = {"param/w": torch.ones(4) * 1.01, "exp_avg/w": torch.full((4,), 2.0), "step": torch.tensor(3)}
    d_param, d_moment = rel_differences(got, want)
    assert abs(d_param - 0.01) < 1e-6 and d_moment == 0.0


def test_each_setting_is_undone_after() -> None:
    saved = (torch.are_deterministic_algorithms_enabled(), os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    saved_cudnn = (
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.allow_tf32,
    )
    for name in SETTINGS:
        with setting(name, "cpu"):
            assert torch.backends.cuda.matmul.allow_tf32 == (name == "tf32")
            if name == "bf16-autocast":
                assert torch.is_autocast_enabled("cpu")
        assert not torch.backends.cuda.matmul.allow_tf32
        assert torch.get_float32_matmul_precision() == "highest"
        assert not torch.is_autocast_enabled("cpu")
    torch.use_deterministic_algorithms(saved[0])
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic, torch.backends.cudnn.allow_tf32 = (
        saved_cudnn
    )
    if saved[1] is None:
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)


def test_the_scripts_parse() -> None:
    for script in ("run_issue29.sh", "carry.sh"):
        subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "gpu" / script)], check=True)
