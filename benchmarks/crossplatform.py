"""``tessera bench crossplatform``: honest replay differences across CPU instruction sets (and CUDA), against
the validator's tolerances.

torch picks its kernels by CPU: ATen by ``ATEN_CPU_CAPABILITY`` (``default``, ``avx2``, ``avx512``), MKL (the
fp32 matmuls) by ``MKL_ENABLE_INSTRUCTIONS`` and oneDNN (GELU here) by ``ONEDNN_MAX_CPU_ISA``; the bits of an
inner step differ between them. A *setting* is one such choice (environment variables, torch threads,
device). For each setting, in its own process, an honest miner trains with the miner's own code
(``miner.work.build_update``: two rounds, the second carrying the first's error-feedback residual, as a node
does) for each *case*: the devnet's run spec (``devnet``: H = 60, a transcript state every step) and the
default run spec (``run``, ``RunSpec()``: H = 30, a state every 10 steps, so a replayed segment is 10
steps), each in MoE and DiPaCo mode. The transcript states, the residuals, the checkpoint and the encoded
updates go to a temporary directory (safetensors, update bytes). Then, in a process per setting, a
validator verifies the round-2 update of every *other* setting with the validator's own
``validator.verify.verify_update`` (its default policy, ``--segments`` replayed segments per update), which
records the largest differences it measured: ``replay_param_rel_diff`` against ``param_rel_tol``,
``replay_moment_rel_diff`` (AdamW moments and counters) against ``replay_rel_tol``, ``ef_rel_err`` and
``ef_after_rel_err`` (the recomputed update and residual) against ``ef_rel_tol``. When a tolerance refuses
an honest update, it is verified again with infinite tolerances so that every difference is measured. The
margin of a tolerance is tolerance / largest difference (inf when it is 0: bit-identical).

Settings whose training gives bit-identical transcripts and updates in every case run the same kernels
(here ``native``, ``aten-avx2``, ``mkl-sse4_2``, ``all-avx2``): they form a group, and only the first
setting of a group replays and is replayed (``--all-pairs`` replays every pair anyway); within a group the
differences are 0 by construction. Settings the CPU cannot run are skipped and said so (``avx512`` needs
avx512f/bw/vl/dq in /proc/cpuinfo: forced elsewhere it dies with "illegal instruction"); ``--device cuda``
adds a ``cuda`` setting (a miner training on the GPU, a validator replaying there) when
``torch.cuda.is_available()``, and says so when not.

    tessera bench crossplatform [--out DIR] [--settings a,b,...] [--specs devnet,run]
                                [--modes moe,dipaco] [--steps H] [--segments K] [--device cuda]
                                [--jobs 2] [--all-pairs] [--keep DIR]

Writes ``<out>/crossplatform.json`` and prints the table (docs/benchmarks.md, "Cross-platform replay
tolerances"). This module's import is light; torch is imported inside the workers and ``run``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
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


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``tessera bench crossplatform``."""
    p.add_argument("--out", default="bench-crossplatform", help="output directory")
    p.add_argument(
        "--settings",
        default=",".join(DEFAULT_SETTINGS),
        help=f"comma-separated settings (default all CPU ones: {','.join(DEFAULT_SETTINGS)})",
    )
    p.add_argument(
        "--specs",
        default="devnet,run",
        help="run specs: devnet (H=60, a state every step), run (RunSpec(): H=30, every 10 steps)",
    )
    p.add_argument("--modes", default="moe,dipaco", help="model modes (default moe,dipaco)")
    p.add_argument("--steps", type=int, help="inner steps H per round (default: each spec's)")
    p.add_argument(
        "--segments", type=int, default=60, help="segments replayed per update (default 60: all, H <= 60)"
    )
    p.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="cuda: add the GPU as a setting (CUDA-trained vs CPU-replayed and back), if there is one",
    )
    p.add_argument("--jobs", type=int, default=2, help="worker processes at once (each on its own threads)")
    p.add_argument("--keep", type=Path, help="keep the miners' files in this directory (default: a temp dir)")
    p.add_argument(
        "--all-pairs", action="store_true", help="replay every pair, also between bit-identical settings"
    )


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


def _run_spec(spec: str, mode: str, steps: int | None) -> dict[str, Any]:
    """The run spec of a case: ``devnet`` is the one ``tessera devnet`` writes (``tessera.devnet.network``),
    ``run`` is ``RunSpec()``'s inner loop; both with ``mode``, H overridden by ``steps``."""
    from dataclasses import replace

    from protocol.runspec import RunSpec
    from tessera.devnet.network import DevnetConfig
    from training.config import InnerConfig, ModelConfig

    if spec == "devnet":
        d = DevnetConfig()
        inner = InnerConfig(steps=d.inner_steps, batch_size=d.batch_size, transcript_interval=1)
    elif spec == "run":
        inner = InnerConfig()
    else:
        raise SystemExit(f"unknown spec {spec!r}; choose from {', '.join(SPECS)}")
    if steps:
        inner = replace(inner, steps=steps)
    return RunSpec(model=ModelConfig(mode=mode), inner=inner).to_json()  # type: ignore[arg-type]


def _seed(case: str, setting: str) -> bytes:
    return hashlib.sha256(f"tessera.bench.crossplatform\0{case}\0{setting}".encode()).digest()


# -- workers (one process per setting) ------------------------------------------------------------------


def _kernel_probe(spec: Any, ds: Any, theta: Any) -> None:
    """One forward/backward with MKL's and oneDNN's verbose output on: the parent reads from the worker's
    stdout which kernels ran (oneDNN's ISA, MKL's calls)."""
    import torch

    from training.assignment import assign
    from training.data import miner_batches
    from training.model import build_model, lm_loss, load_params

    model = build_model(spec.model)
    load_params(model, theta)
    a = assign(b"\0" * 32, MINERS, spec.model)[MINERS[0]]
    batch = miner_batches(ds, b"\0" * 32, a, 1, 2, spec.model.seq_len)[0]
    sys.stdout.flush()
    with torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON):
        with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
            lm_loss(model, batch, a.path)[1].backward()
    sys.stdout.flush()


def _train(job: dict[str, Any]) -> dict[str, Any]:
    import torch

    from miner.behaviour import Behaviour
    from miner.work import build_update
    from protocol.runspec import RunSpec
    from protocol.tensorblob import decode_tensors, encode_tensors
    from protocol.update import UpdateCaps, decode_update
    from training.data import prepare
    from training.digest import state_digest
    from validator.sampling import segments_to_check

    out: dict[str, Any] = {"cases": {}, "genesis_here": {}}
    for case, mj in job["cases"].items():
        spec = RunSpec.from_json(mj["spec"])
        ds = prepare(spec.load_corpus(), spec.model)
        theta1 = decode_tensors(Path(mj["genesis"]).read_bytes())
        if not out["cases"]:
            _kernel_probe(spec, ds, theta1)
        out["genesis_here"][spec.model.mode] = state_digest(spec.genesis_params()).hex()
        d = Path(job["dir"]) / case
        (d / "blobs").mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        common = {"miner": MINERS[0], "registry": MINERS, "behaviour": Behaviour(), "device": job["device"]}
        b1 = build_update(
            spec,
            ds,
            round=1,
            checkpoint=theta1,
            checkpoint_digest=state_digest(theta1),
            assign_seed=hashlib.sha256(b"assign-1").digest(),
            ef_state={},
            **common,
        )
        delta = decode_update(b1.update, UpdateCaps()).pseudo_gradient()
        theta2 = {k: (v - delta[k]) if k in delta else v for k, v in theta1.items()}
        b2 = build_update(
            spec,
            ds,
            round=2,
            checkpoint=theta2,
            checkpoint_digest=state_digest(theta2),
            assign_seed=hashlib.sha256(b"assign-2").digest(),
            ef_state=b1.ef_state,
            ef_source=(1, b1.digest),
            **common,
        )
        seconds = time.perf_counter() - t0
        seed = _seed(case, job["setting"])
        segs = segments_to_check(seed, MINERS[0], len(b2.transcript_steps) - 1, job["segments"], slot=0)
        keep = {0, len(b2.transcript_steps) - 1} | set(segs) | {i + 1 for i in segs}
        for i in sorted(keep):
            st = b2.states[b2.transcript_steps[i]]
            (d / "blobs" / f"0x{b2.transcript_digests[i].hex()}.safetensors").write_bytes(encode_tensors(st))
        for b in (b1, b2):
            (d / "blobs" / f"0x{b.ef_after.hex()}.safetensors").write_bytes(encode_tensors(b.residual()))
        (d / "checkpoint.safetensors").write_bytes(encode_tensors(theta2))
        (d / "update-1.bin").write_bytes(b1.update)
        (d / "update-2.bin").write_bytes(b2.update)
        out["cases"][case] = {
            "seed": seed.hex(),
            "assign_seed": hashlib.sha256(b"assign-2").digest().hex(),
            "source": [1, b1.digest.hex()],
            "segments": segs,
            "transcript_digests": [x.hex() for x in b2.transcript_digests],
            "update_digest": b2.digest.hex(),
            "train_seconds": round(seconds, 2),
            "loss_first": b2.losses[0],
            "loss_last": b2.losses[-1],
        }
    out["capability"] = torch.backends.cpu.get_cpu_capability()
    return out


METRICS = ("replay_param_rel_diff", "replay_moment_rel_diff", "ef_rel_err", "ef_after_rel_err")
"""What ``validator.verify`` records of an honest update's differences (see the module doc)."""


def _verify(spec: Any, ds: Any, meta: dict[str, Any], d: Path, segments: int, device: str) -> dict[str, Any]:
    """Verify the round-2 update in ``d`` as a validator does; the verdict and the differences measured."""
    from protocol.coordinator import update_commitment
    from protocol.tensorblob import decode_tensors
    from protocol.update import update_digest
    from training.digest import state_digest
    from validator.errors import SourceMismatchError
    from validator.verify import RoundContext, VerifyPolicy, verify_update

    theta = decode_tensors((d / "checkpoint.safetensors").read_bytes())
    data = (d / "update-2.bin").read_bytes()
    source = (d / "update-1.bin").read_bytes()
    src_round, src_digest = meta["source"]

    def fetch_state(digest: str) -> dict[str, Any]:
        return decode_tensors((d / "blobs" / f"{digest}.safetensors").read_bytes())

    def fetch_source(s: int, digest: str) -> bytes:
        if s != src_round or digest != src_digest:
            raise SourceMismatchError(f"no update {digest[:8]} in round {s}")
        return source

    ctx = RoundContext(
        spec=spec,
        dataset=ds,
        round=2,
        chain_id=CHAIN_ID,
        contract=CONTRACT,
        validator=VALIDATOR,
        checkpoint=theta,
        checkpoint_digest=state_digest(theta),
        assign_seed=bytes.fromhex(meta["assign_seed"]),
        seed=bytes.fromhex(meta["seed"]),
        registry=MINERS,
        validators=[VALIDATOR],
    )
    commitment = update_commitment(CHAIN_ID, CONTRACT, 2, MINERS[0], update_digest(data))
    t0 = time.perf_counter()
    default = VerifyPolicy(segments_per_miner=segments, device=device)
    v, _ = verify_update(
        ctx, MINERS[0], commitment, lambda: data, fetch_state, default, fetch_source=fetch_source
    )
    row: dict[str, Any] = {"stage": v.stage, "reason": v.reason, "accepted": v.accepted}
    if v.stage == "recompute":  # refused: measure every difference again with the tolerances off
        off = VerifyPolicy(
            segments_per_miner=segments,
            replay_rel_tol=math.inf,
            param_rel_tol=math.inf,
            ef_rel_tol=math.inf,
            device=device,
        )
        v, _ = verify_update(
            ctx, MINERS[0], commitment, lambda: data, fetch_state, off, fetch_source=fetch_source
        )
        row["measured_stage"] = v.stage
    row["segments"] = v.evidence.get("segments", [])
    row["seconds"] = round(time.perf_counter() - t0, 2)
    row.update({k: v.metrics.get(k) for k in METRICS})
    return row


def _replay(job: dict[str, Any]) -> dict[str, Any]:
    from protocol.runspec import RunSpec
    from training.data import prepare

    results: dict[str, Any] = {}
    for case, mj in job["cases"].items():
        spec = RunSpec.from_json(mj["spec"])
        ds = prepare(spec.load_corpus(), spec.model)
        for trained, meta in mj["trained"].items():
            row = _verify(spec, ds, meta, Path(meta["dir"]) / case, job["segments"], job["device"])
            results.setdefault(trained, {})[case] = row
    return results


def _worker(job_file: str) -> int:
    """A worker process: apply the setting's threads and device, run the job, write its result."""
    import torch

    from training.device import use_deterministic

    job = json.loads(Path(job_file).read_text())
    torch.set_num_threads(job["threads"])
    use_deterministic(job["device"])
    t0 = time.perf_counter()
    result = _train(job) if job["kind"] == "train" else _replay(job)
    result["capability"] = torch.backends.cpu.get_cpu_capability()
    result["seconds"] = round(time.perf_counter() - t0, 2)
    Path(job["result"]).write_text(json.dumps(result))
    return 0


# -- parent ---------------------------------------------------------------------------------------------


def _launch(s: Setting, job: dict[str, Any], work: Path) -> dict[str, Any]:
    """Run one worker for setting ``s`` in a fresh process with the setting's environment."""
    tag = f"{job['kind']}-{s.name}"
    job = {**job, "setting": s.name, "threads": s.threads, "device": s.device}
    job["result"] = str(work / f"{tag}.result.json")
    job_file = work / f"{tag}.job.json"
    job_file.write_text(json.dumps(job))
    env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    env.update(s.env)
    env["OMP_NUM_THREADS"] = str(s.threads)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.crossplatform", "--worker", str(job_file)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    wall = round(time.perf_counter() - t0, 2)
    if proc.returncode != 0:
        return {
            "error": f"exit {proc.returncode}: {(proc.stderr or proc.stdout)[-2000:]}",
            "wall_seconds": wall,
        }
    res: dict[str, Any] = json.loads(Path(job["result"]).read_text())
    res["wall_seconds"] = wall
    if job["kind"] == "train":
        res["kernels"] = _kernels(proc.stdout)
    return res


def _kernels(stdout: str) -> dict[str, Any]:
    """What MKL's and oneDNN's verbose output says ran in the probe step."""
    onednn_isa = sorted(
        {ln.split("isa:", 1)[1].strip() for ln in stdout.splitlines() if ",info,cpu,isa:" in ln}
    )
    impls = sorted(  # primitive:implementation, e.g. eltwise:jit:avx2 (GELU)
        {
            ":".join(ln.split(",")[5:7])
            for ln in stdout.splitlines()
            if ln.startswith("onednn_verbose") and ",primitive,exec," in ln and len(ln.split(",")) > 6
        }
    )
    mkl_calls = sorted(
        {
            ln.split()[1].split("(")[0]
            for ln in stdout.splitlines()
            if ln.startswith("MKL_VERBOSE") and len(ln.split()) > 1 and "(" in ln.split()[1]
        }
    )
    mkl = [
        ln.removeprefix("MKL_VERBOSE ").strip() for ln in stdout.splitlines() if "MKL_VERBOSE oneMKL" in ln
    ]
    return {"onednn_isa": onednn_isa, "onednn_impls": impls, "mkl": mkl[:1], "mkl_calls": mkl_calls}


def _fmt(x: float | None) -> str:
    if x is None:
        return "n/a"
    return "0" if x == 0 else f"{x:.2e}"


def _margin(tol: float, diff: float | None) -> float | str | None:
    """tolerance / largest difference; ``"inf"`` when the difference is 0 (JSON has no infinity)."""
    if diff is None:
        return None
    return "inf" if diff == 0 else tol / diff


def _command(args: argparse.Namespace) -> str:
    parts = ["tessera bench crossplatform", f"--settings {args.settings}", f"--specs {args.specs}"]
    parts.append(f"--modes {args.modes}")
    if args.steps:
        parts.append(f"--steps {args.steps}")
    parts += [f"--segments {args.segments}", f"--jobs {args.jobs}"]
    if args.device != "cpu":
        parts.append(f"--device {args.device}")
    if args.all_pairs:
        parts.append("--all-pairs")
    return " ".join(parts)


def _largest(pairs: list[dict[str, Any]], tolerances: dict[str, float]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, tol in tolerances.items():
        vals = [(p[key], p) for p in pairs if p.get(key) is not None]
        worst = max(vals, key=lambda t: t[0]) if vals else None
        out[key] = {
            "tolerance": tol,
            "largest": worst[0] if worst else None,
            "where": f"{worst[1]['trained']} -> {worst[1]['replayed']} ({worst[1]['case']})"
            if worst
            else None,
            "margin": _margin(tol, worst[0] if worst else None),
            "nonzero": sum(1 for v, _ in vals if v > 0),
            "measured": len(vals),
        }
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Train under every setting, replay under every other, and collect the figures."""
    import torch

    from protocol.runspec import RunSpec
    from protocol.tensorblob import encode_tensors
    from training.digest import state_digest
    from validator.verify import VerifyPolicy

    t_start = time.perf_counter()
    names = [n.strip() for n in args.settings.split(",") if n.strip()]
    if args.device == "cuda" and "cuda" not in names:
        names.append("cuda")
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        raise SystemExit(f"unknown settings {unknown}; choose from {', '.join(SETTINGS)}")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    specs = {
        f"{sp}-{m}": _run_spec(sp, m, args.steps)
        for sp in (x.strip() for x in args.specs.split(",") if x.strip())
        for m in modes
    }
    flags = cpu_flags()
    skipped = {n: why for n in names if (why := unsupported(SETTINGS[n], flags)) is not None}
    for n, why in skipped.items():
        print(f"skipped {n}: {why}", flush=True)
    run_settings = [SETTINGS[n] for n in names if n not in skipped]
    policy = VerifyPolicy()
    tolerances = {
        "replay_param_rel_diff": policy.param_rel_tol,
        "replay_moment_rel_diff": policy.replay_rel_tol,
        "ef_rel_err": policy.ef_rel_tol,
        "ef_after_rel_err": policy.ef_rel_tol,
    }
    tmp = None
    if args.keep is not None:
        work = Path(args.keep)
        work.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="tessera-crossplatform-")
        work = Path(tmp.name)
    try:
        genesis: dict[str, str] = {}
        for case, sj in specs.items():  # one theta_0 for every setting (its init bits are platform-dependent)
            theta = RunSpec.from_json(sj).genesis_params()
            (work / f"genesis-{case}.safetensors").write_bytes(encode_tensors(theta))
            genesis[case] = state_digest(theta).hex()

        def train_job(s: Setting) -> dict[str, Any]:
            cases = {
                c: {"spec": sj, "genesis": str(work / f"genesis-{c}.safetensors")} for c, sj in specs.items()
            }
            job = {"kind": "train", "dir": str(work / s.name), "segments": args.segments, "cases": cases}
            return _launch(s, job, work)

        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            trained = dict(
                zip([s.name for s in run_settings], pool.map(train_job, run_settings), strict=True)
            )
        ok = {n: r for n, r in trained.items() if "error" not in r}
        groups: list[list[str]] = []
        for n in ok:  # settings whose transcripts and updates are bit-identical in every case
            sig = {c: (r["transcript_digests"], r["update_digest"]) for c, r in ok[n]["cases"].items()}
            for g in groups:
                if sig == {
                    c: (r["transcript_digests"], r["update_digest"]) for c, r in ok[g[0]]["cases"].items()
                }:
                    g.append(n)
                    break
            else:
                groups.append([n])
        for name, res in trained.items():
            if "error" in res:
                print(f"train {name}: FAILED {res['error'][-300:]}", flush=True)
                continue
            k = res.get("kernels", {})
            group = next(g for g in groups if name in g)
            same = f"  bit-identical to {group[0]}" if group[0] != name else ""
            print(
                f"train {name:<13} ATen {res['capability']:<8} oneDNN {','.join(k.get('onednn_impls', [])) or '-':<17}"
                f" {res['wall_seconds']:6.1f} s{same}",
                flush=True,
            )
        active = list(ok) if args.all_pairs else [g[0] for g in groups]

        def replay_job(s: Setting) -> dict[str, Any]:
            cases = {
                c: {
                    "spec": sj,
                    "trained": {
                        x: {**ok[x]["cases"][c], "dir": str(work / x)} for x in active if x != s.name
                    },
                }
                for c, sj in specs.items()
            }
            return _launch(s, {"kind": "replay", "segments": args.segments, "cases": cases}, work)

        replayers = [s for s in run_settings if s.name in active and len(active) > 1]
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            replayed = dict(zip([s.name for s in replayers], pool.map(replay_job, replayers), strict=True))
    finally:
        if tmp is not None:
            tmp.cleanup()

    pairs = []
    errors = {f"train {n}": r["error"] for n, r in trained.items() if "error" in r}
    for y, res in replayed.items():
        if "error" in res:
            errors[f"replay {y}"] = res["error"]
            print(f"replay {y}: FAILED {res['error'][-300:]}", flush=True)
            continue
        for x, by_case in res.items():
            if x in ("capability", "seconds", "wall_seconds"):
                continue
            for c, row in by_case.items():
                same = ok[x]["cases"][c]["transcript_digests"] == ok[y]["cases"][c]["transcript_digests"]
                pairs.append({"trained": x, "replayed": y, "case": c, "identical_transcripts": same, **row})
    spec_names = sorted({c.split("-", 1)[0] for c in specs})
    return {
        "command": _command(args),
        "commit": _commit(),
        "machine": {
            "cpu": _cpu_model(),
            "avx512": all(f in flags for f in AVX512),
            "flags": sorted(f for f in flags if f.startswith(("avx", "sse4", "fma"))),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cuda": torch.cuda.is_available(),
        },
        "run": {
            "cases": {c: {"inner": sj["inner"], "mode": sj["model"]["mode"]} for c, sj in specs.items()},
            "segments": args.segments,
            "round": "round 2 of the miner, carrying round 1's error-feedback residual",
        },
        "genesis_digest": genesis,
        "settings": {
            s.name: {
                **asdict(s),
                **{
                    k: trained[s.name].get(k)
                    for k in ("capability", "kernels", "genesis_here", "seconds", "wall_seconds", "error")
                },
            }
            for s in run_settings
        },
        "skipped": skipped,
        "groups": groups,
        "tolerances": tolerances,
        "largest": _largest(pairs, tolerances),
        "largest_by_spec": {
            sp: _largest([p for p in pairs if p["case"].startswith(sp + "-")], tolerances)
            for sp in spec_names
        },
        "refused_honest": sum(1 for p in pairs if p["stage"] == "recompute"),
        "errors": errors,
        "pairs": pairs,
        "wall_seconds": round(time.perf_counter() - t_start, 1),
    }


def _commit() -> str | None:
    """The git commit the code ran at (``+dirty`` with uncommitted changes); None outside a checkout."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def render(res: dict[str, Any]) -> str:
    """The printed figures: one row per (trained, replayed) pair (worst over the cases), then the margins."""
    lines = []
    groups = [g for g in res["groups"] if len(g) > 1]
    if groups:
        lines.append("bit-identical settings: " + "; ".join(" = ".join(g) for g in groups))
    lines.append(
        f"{'trained on':<14}{'replayed on':<14}{'params':>10}{'moments':>10}{'update':>10}{'residual':>10}"
    )
    by_pair: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for p in res["pairs"]:
        by_pair.setdefault((p["trained"], p["replayed"]), []).append(p)
    for (x, y), rows in by_pair.items():
        worst = [max((r[k] for r in rows if r.get(k) is not None), default=None) for k in METRICS]
        flag = "" if all(r["stage"] != "recompute" for r in rows) else "  REFUSED"
        lines.append(f"{x:<14}{y:<14}" + "".join(f"{_fmt(w):>10}" for w in worst) + flag)
    names = ("param_rel_tol", "replay_rel_tol", "ef_rel_tol (update)", "ef_rel_tol (residual)")
    for title, largest in [("all cases", res["largest"]), *sorted(res["largest_by_spec"].items())]:
        lines.append(f"\n{title}:")
        for k, name in zip(METRICS, names, strict=True):
            g = largest[k]
            margin = g["margin"]
            m = "n/a" if margin is None else ("inf (bit-identical)" if margin == "inf" else f"{margin:,.0f}x")
            where = f"  ({g['where']})" if g["largest"] else ""
            lines.append(
                f"  {name:<22} tolerance {g['tolerance']:.0e}  largest {_fmt(g['largest']):>8}  margin {m}{where}"
            )
    if res["skipped"]:
        lines.append("\nnot measured: " + "; ".join(f"{n} ({why})" for n, why in res["skipped"].items()))
    for what, err in res["errors"].items():
        lines.append(f"FAILED {what}: {err[-200:]}")
    lines.append(f"honest updates refused: {res['refused_honest']} of {len(res['pairs'])}")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    """Entry point of ``tessera bench crossplatform``: run, print the figures, write the JSON."""
    res = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "crossplatform.json"
    path.write_text(json.dumps(res, indent=1, default=str) + "\n")
    print(render(res))
    print(f"\nwrote {path} ({res['wall_seconds']} s)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        sys.exit(_worker(sys.argv[2]))
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.crossplatform", description=__doc__.splitlines()[0]
    )
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
