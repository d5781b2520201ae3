"""The ``device`` setting: names, availability, torch's deterministic settings, and the device plumbing of
the inner loop and the replay (run with ``cpu`` here; CUDA is checked where a GPU is present).

The CUDA environment (issue 39): every entry point puts ``CUBLAS_WORKSPACE_CONFIG`` into the environment
before CUDA can start (checked here in fresh processes), and ``use_deterministic`` checks the value CUDA
started with, not the one at call time, so the tests pass in one process in any order (checked with
``torch.cuda.is_initialized`` patched here; the CUDA tests themselves run where a GPU is, in a shuffled
order by ``benchmarks/gpu/run_issue39.sh``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.training.training_fixtures import tiny_inner, tiny_model
from training.assignment import assign
from training.corpus import load_bundled_corpus
from training.cudaenv import CUBLAS_ENV, CUBLAS_WORKSPACE_CONFIG, prepare_cuda_env
from training.data import miner_batches, prepare
from training.device import (
    CUDA_START,
    check_device_name,
    cublas_config_at_cuda_start,
    note_cuda_env,
    resolve_device,
    use_deterministic,
)
from training.digest import part_digests, state_digest
from training.errors import DeviceError
from training.inner import replay_segment, train_inner
from training.model import build_model, param_state

HAS_CUDA = torch.cuda.is_available()
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def torch_flags() -> Iterator[None]:
    """Restore torch's process-wide flags (and the cuBLAS variable) after a test that sets them."""
    saved = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cuda.matmul.allow_tf32,
        torch.get_float32_matmul_precision(),
        os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    )
    yield
    torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = saved[2], saved[3]
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved[4], saved[5]
    torch.set_float32_matmul_precision(saved[6])
    if saved[7] is not None:  # never removed: CUDA, wherever a test started it, started with it
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = saved[7]


def test_device_names() -> None:
    for ok in ("cpu", "cuda", "cuda:0", "cuda:12"):
        assert check_device_name(ok) == ok
    for bad in ("", "CPU", "gpu", "cuda:", "cuda:x", "cuda:0 ", "mps", "cpu:0"):
        with pytest.raises(DeviceError, match="cpu, cuda or cuda:N"):
            check_device_name(bad)
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.skipif(HAS_CUDA, reason="checks the error on a machine without CUDA")
def test_cuda_without_a_gpu_is_a_clear_error() -> None:
    with pytest.raises(DeviceError, match="CUDA is not available"):
        resolve_device("cuda")
    with pytest.raises(DeviceError, match="CUDA is not available"):
        use_deterministic("cuda:0")


def test_use_deterministic_sets_torch_flags(torch_flags: None) -> None:
    os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    assert use_deterministic("cpu") == torch.device("cpu")
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert not torch.backends.cuda.matmul.allow_tf32 and torch.get_float32_matmul_precision() == "highest"
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


ENTRY_POINTS = {
    "python -m tessera": "import sys; sys.argv = ['tessera']\ntry:\n    import tessera.__main__\nexcept SystemExit:\n    pass",
    "tessera (tessera.cli)": "import tessera.cli",
    "training.device": "import training.device",
    "python -m benchmarks.gpu.precision": "import benchmarks.gpu.precision",
}
"""Each entry point, as the import that starts it (the ``tessera`` script is ``tessera.cli:main``)."""


@pytest.mark.parametrize("preset", [None, ":16:8"])
def test_every_entry_point_sets_the_cublas_env_before_cuda_can_start(preset: str | None) -> None:
    """Importing an entry point puts the deterministic value into a process started without it, keeps an
    operator's own value, and touches no CUDA; ``tessera`` also leaves torch unimported (its --help path)."""
    env = {k: v for k, v in os.environ.items() if k != CUBLAS_ENV}
    if preset is not None:
        env[CUBLAS_ENV] = preset
    probe = (
        f"\nimport os, sys\nprint(os.environ.get({CUBLAS_ENV!r}), 'torch' in sys.modules and "
        "sys.modules['torch'].cuda.is_initialized(), 'torch' in sys.modules)"
    )
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-c", code + probe], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
        )
        for name, code in ENTRY_POINTS.items()
    }
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, name
        value, cuda_started, torch_loaded = out.strip().splitlines()[-1].split()
        assert value == (preset or CUBLAS_WORKSPACE_CONFIG), name
        assert cuda_started == "False", name
        if name.startswith("tessera (") or name == "python -m tessera":
            assert torch_loaded == "False", name


def test_prepare_cuda_env_sets_only_what_is_missing() -> None:
    env: dict[str, str] = {}
    assert prepare_cuda_env(env) == CUBLAS_WORKSPACE_CONFIG == env[CUBLAS_ENV]
    env[CUBLAS_ENV] = ":0:0"
    assert prepare_cuda_env(env) == ":0:0"  # an operator's value is kept; use_deterministic judges it


@pytest.fixture
def cuda_start(monkeypatch: pytest.MonkeyPatch, torch_flags: None) -> Iterator[pytest.MonkeyPatch]:
    """A monkeypatch that puts back what this process noted of CUDA's start (and torch's flags) after."""
    monkeypatch.setattr(CUDA_START, "cublas", CUDA_START.cublas)
    monkeypatch.setattr(CUDA_START, "seen_before_init", CUDA_START.seen_before_init)
    yield monkeypatch


def _start_cuda_with(mp: pytest.MonkeyPatch, value: str | None) -> None:
    """Pretend CUDA starts now, with ``CUBLAS_WORKSPACE_CONFIG`` = ``value`` (None: unset)."""
    mp.setattr(torch.cuda, "is_initialized", lambda: False)
    if value is None:
        mp.delenv(CUBLAS_ENV, raising=False)
    else:
        mp.setenv(CUBLAS_ENV, value)
    note_cuda_env()
    mp.setattr(torch.cuda, "is_initialized", lambda: True)


def test_a_setting_made_before_cuda_started_never_trips(cuda_start: pytest.MonkeyPatch) -> None:
    """The old failure (issue 39): CUDA started with the setting, then something removed or changed the
    variable (a test fixture did), and the next ``use_deterministic("cuda")`` raised. It passes now and puts
    back the value CUDA started with (torch's deterministic mode re-reads it at each cuBLAS call)."""
    _start_cuda_with(cuda_start, CUBLAS_WORKSPACE_CONFIG)
    for later in (None, ":0:0"):
        if later is None:
            cuda_start.delenv(CUBLAS_ENV)
        else:
            cuda_start.setenv(CUBLAS_ENV, later)
        assert use_deterministic(torch.device("cuda")) == torch.device("cuda")
        assert os.environ[CUBLAS_ENV] == CUBLAS_WORKSPACE_CONFIG == cublas_config_at_cuda_start()
        assert torch.are_deterministic_algorithms_enabled()


def test_cuda_started_without_the_setting_is_refused(cuda_start: pytest.MonkeyPatch) -> None:
    """Where CUDA really started without a deterministic value, setting it afterwards does not help: a CUDA
    device is refused (naming the fix); the CPU, which reads no cuBLAS setting, is not."""
    _start_cuda_with(cuda_start, None)
    cuda_start.setenv(CUBLAS_ENV, CUBLAS_WORKSPACE_CONFIG)  # too late
    with pytest.raises(DeviceError, match="CUDA was initialised before CUBLAS_WORKSPACE_CONFIG was set"):
        use_deterministic(torch.device("cuda:0"))
    assert use_deterministic("cpu") == torch.device("cpu")
    _start_cuda_with(cuda_start, ":0:0")
    with pytest.raises(DeviceError, match="initialised with CUBLAS_WORKSPACE_CONFIG=':0:0'"):
        use_deterministic(torch.device("cuda"))


def test_before_cuda_starts_the_setting_is_made_or_refused(cuda_start: pytest.MonkeyPatch) -> None:
    """Before CUDA starts: a missing value is set (and noted as the one CUDA will start with), an operator's
    non-deterministic one is refused for CUDA and left alone for the CPU."""
    cuda_start.setattr(torch.cuda, "is_initialized", lambda: False)
    cuda_start.delenv(CUBLAS_ENV, raising=False)
    use_deterministic(torch.device("cuda"))
    assert os.environ[CUBLAS_ENV] == CUBLAS_WORKSPACE_CONFIG == cublas_config_at_cuda_start()
    cuda_start.setenv(CUBLAS_ENV, ":0:0")
    with pytest.raises(DeviceError, match="':0:0' is not deterministic"):
        use_deterministic(torch.device("cuda"))
    use_deterministic("cpu")
    assert os.environ[CUBLAS_ENV] == ":0:0"


def _round(mode: str):  # type: ignore[no-untyped-def]
    cfg, inner = tiny_model(mode), tiny_inner(steps=4, k=1)
    ds = prepare(load_bundled_corpus(), cfg)
    a = assign(b"seed", ["m0", "m1"], cfg)["m0"]
    batches = miner_batches(ds, b"seed", a, inner.steps, inner.batch_size, cfg.seq_len)
    return cfg, inner, param_state(build_model(cfg)), a, batches


@pytest.mark.parametrize("mode", ["moe", "dipaco"])
def test_cpu_device_and_deterministic_mode_change_no_bits(mode: str, torch_flags: None) -> None:
    """``device="cpu"`` (by name or as a torch.device) and torch's deterministic settings give the bits of
    the default call, and every result is a CPU tensor."""
    cfg, inner, theta, a, batches = _round(mode)
    plain = train_inner(cfg, inner, theta, a, batches, round=1, keep_states=True)
    named = train_inner(cfg, inner, theta, a, batches, round=1, keep_states=True, device="cpu")
    use_deterministic("cpu")
    det = train_inner(cfg, inner, theta, a, batches, 1, keep_states=True, device=torch.device("cpu"))
    for res in (named, det):
        assert res.transcript.parts == plain.transcript.parts
        assert res.losses == plain.losses
        assert state_digest(res.optimizer_state) == state_digest(plain.optimizer_state)
    for st in det.transcript.states.values():
        assert all(t.device.type == "cpu" and t.dtype in (torch.float32, torch.int64) for t in st.values())
    got = replay_segment(cfg, inner, theta, a, batches, 1, det.transcript.states[1], 2, device="cpu")
    assert part_digests(got) == plain.transcript.parts[2]


@pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU")
def test_cuda_round_trip_stays_on_the_cpu(torch_flags: None) -> None:  # pragma: no cover - no GPU in CI
    """On a GPU: the loop runs there, returns CPU fp32, and a CPU replay is within the tolerances."""
    from validator.policy import VerifyPolicy
    from validator.recompute import replay_differences

    cfg, inner, theta, a, batches = _round("moe")
    use_deterministic("cuda")
    res = train_inner(cfg, inner, theta, a, batches, 1, keep_states=True, device="cuda")
    again = train_inner(cfg, inner, theta, a, batches, 1, keep_states=True, device="cuda")
    assert res.transcript.parts == again.transcript.parts  # deterministic on one GPU
    assert all(t.device.type == "cpu" for t in res.params.values())
    got = replay_segment(cfg, inner, theta, a, batches, 1, res.transcript.states[1], 2, device="cpu")
    d_param, d_moment = replay_differences(got, res.transcript.states[2])
    policy = VerifyPolicy()
    assert d_param <= policy.param_rel_tol and d_moment <= policy.replay_rel_tol


@pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU")
def test_simulation_and_baseline_on_a_gpu(torch_flags: None) -> None:  # pragma: no cover - no GPU in CI
    """The benchmark's simulation and data-parallel baseline compute on a GPU (``--device cuda``) and land
    near the CPU's losses (kernels differ, so not bit for bit)."""
    from training.config import RunConfig
    from training.simulation import Baseline, Simulation

    cfg, inner = tiny_model("moe"), tiny_inner(steps=4, k=2)
    ds = prepare(load_bundled_corpus(), cfg)
    run = RunConfig(cfg, inner)
    losses = {}
    for device in ("cpu", "cuda"):
        sim = Simulation(run, ds, ["m0", "m1"], eval_windows=8, device=device)
        dp = Baseline(Simulation(run, ds, ["m0", "m1"], eval_windows=8, device=device))
        losses[device] = (sim.step(0).eval_loss, dp.step(0).eval_loss)
    for cpu, gpu in zip(losses["cpu"], losses["cuda"], strict=True):
        assert gpu == pytest.approx(cpu, rel=1e-3)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU")
def test_cuda_transcript_digests_the_states_it_serves(torch_flags: None) -> None:  # pragma: no cover - GPU
    """On a GPU the recorded states are copied without waiting and digested by a helper thread: every
    digest is that of the state served (the copies had landed), and a replay on the same GPU (AdamW's
    foreach path there too) gives the transcript's bits."""
    cfg, inner, theta, a, batches = _round("moe")
    use_deterministic("cuda")
    res = train_inner(cfg, inner, theta, a, batches, 1, keep_states=True, device="cuda")
    for step, parts in zip(res.transcript.steps, res.transcript.parts, strict=True):
        assert part_digests(res.transcript.states[step]) == parts
    lean = train_inner(cfg, inner, theta, a, batches, 1, device="cuda")  # intermediate states not kept
    assert lean.transcript.parts == res.transcript.parts
    got = replay_segment(cfg, inner, theta, a, batches, 1, res.transcript.states[1], 2, device="cuda")
    assert part_digests(got) == res.transcript.parts[2]
