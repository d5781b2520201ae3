"""Honest replays across CPU instruction sets stay within the validator's tolerances
(``benchmarks.crossplatform`` at its smallest size), and the benchmark's own bookkeeping."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from benchmarks.crossplatform import _kernels, _run_spec, _train, _verify, run
from benchmarks.crossplatform_report import render
from benchmarks.crossplatform_settings import AVX512, METRICS, SETTINGS, cpu_flags, unsupported


def test_settings_the_cpu_lacks_are_skipped_with_the_reason() -> None:
    no_avx512 = {"sse4_1", "sse4_2", "avx", "avx2", "fma"}
    why = unsupported(SETTINGS["aten-avx512"], no_avx512)
    assert why is not None and "avx512f" in why and "illegal instruction" in why
    assert unsupported(SETTINGS["aten-avx512"], no_avx512 | set(AVX512)) is None
    assert unsupported(SETTINGS["aten-default"], set()) is None
    assert unsupported(SETTINGS["all-avx2"], {"avx2"}) == "this CPU lacks fma"


def test_kernel_report_parses_verbose_output() -> None:
    out = "\n".join(
        [
            "MKL_VERBOSE oneMKL 2024.0 Update 2 Product build 20240605 for Intel(R) 64 architecture",
            "MKL_VERBOSE SGEMM(N,N,16,32,64,0x1,0x2,192,0x3,64,0x4,0x5,16) 2.94us CNR:OFF Dyn:1",
            "onednn_verbose,v1,info,cpu,isa:Intel SSE4.1",
            "onednn_verbose,v1,primitive,exec,cpu,eltwise,jit:sse41,forward_training,data:f32,,alg:gelu,1x2,0.1",
        ]
    )
    k = _kernels(out)
    assert k["mkl_calls"] == ["SGEMM"] and k["mkl"][0].startswith("oneMKL 2024.0")
    assert k["onednn_isa"] == ["Intel SSE4.1"] and k["onednn_impls"] == ["eltwise:jit:sse41"]


def test_worker_code_in_process(tmp_path: Path) -> None:
    """The miner and validator halves of the benchmark on one platform: the validator's replay of the
    miner's files is exact (every difference 0) and nothing is refused."""
    from protocol.runspec import RunSpec
    from protocol.wire.tensorblob import encode_tensors
    from training.data import prepare

    spec_json = _run_spec("run", "moe", 2)
    spec = RunSpec.from_json(spec_json)
    genesis = tmp_path / "genesis.safetensors"
    genesis.write_bytes(encode_tensors(spec.genesis_params()))
    job = {
        "dir": str(tmp_path / "here"),
        "setting": "here",
        "segments": 2,
        "device": "cpu",
        "cases": {"run-moe": {"spec": spec_json, "genesis": str(genesis)}},
    }
    meta = _train(job)["cases"]["run-moe"]
    assert len(meta["transcript_digests"]) == 2  # H = 2 with a state every 10 steps: one 2-step segment
    ds = prepare(spec.load_corpus(), spec.model)
    row = _verify(spec, ds, meta, tmp_path / "here" / "run-moe", 2, "cpu")
    assert row["stage"] != "recompute" and row["segments"] == [0], row
    assert all(row[k] == 0.0 for k in METRICS), row


@pytest.mark.slow
def test_default_and_best_capability_replay_within_tolerances(tmp_path: Path) -> None:
    """A miner under ``ATEN_CPU_CAPABILITY=default`` (and MKL/oneDNN unconstrained) and one on the machine's
    best kernels each verify the other's honest update: every difference within its tolerance."""
    args = argparse.Namespace(
        out=str(tmp_path),
        settings="aten-default,native",
        specs="devnet,run",
        modes="moe,dipaco",
        steps=2,
        segments=2,
        device="cpu",
        jobs=2,
        keep=None,
        all_pairs=True,
    )
    res = run(args)
    assert not res["skipped"]
    assert all(s["error"] is None for s in res["settings"].values()), res["settings"]
    caps = {n: s["capability"] for n, s in res["settings"].items()}
    assert caps["aten-default"] == "DEFAULT"
    best = "AVX512" if all(f in cpu_flags() for f in AVX512) else "AVX2"
    assert caps["native"] == best
    assert len(res["pairs"]) == 8  # 2 settings x the other x (2 specs x 2 modes)
    for p in res["pairs"]:
        assert p["stage"] != "recompute", p
        for key, tol in res["tolerances"].items():
            assert p[key] is not None and p[key] <= tol, (key, p)
    assert res["refused_honest"] == 0
    assert not res["errors"]
    assert "honest updates refused: 0 of 8" in render(res)
