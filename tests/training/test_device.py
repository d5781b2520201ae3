"""The ``device`` setting: names, availability, torch's deterministic settings, and the device plumbing of
the inner loop and the replay (run with ``cpu`` here; CUDA is checked where a GPU is present)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

from tests.training.training_fixtures import tiny_inner, tiny_model
from training.assignment import assign
from training.corpus import load_bundled_corpus
from training.data import miner_batches, prepare
from training.device import check_device_name, resolve_device, use_deterministic
from training.digest import part_digests, state_digest
from training.errors import DeviceError
from training.inner import replay_segment, train_inner
from training.model import build_model, param_state

HAS_CUDA = torch.cuda.is_available()


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
    if saved[7] is None:
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    else:
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
