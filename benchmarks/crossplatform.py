"""``tessera bench crossplatform``: honest replay differences across CPU instruction sets (and CUDA), against
the validator's tolerances.

torch picks its kernels by CPU: ATen by ``ATEN_CPU_CAPABILITY`` (``default``, ``avx2``, ``avx512``), MKL (the
fp32 matmuls) by ``MKL_ENABLE_INSTRUCTIONS`` and oneDNN (GELU here) by ``ONEDNN_MAX_CPU_ISA``; the bits of an
inner step differ between them. A *setting* is one such choice (environment variables, torch threads,
device). For each setting, in its own process, an honest miner trains with the miner's own code
(``miner.work.build_update``: two rounds, the second carrying the first's error-feedback residual, as a node
does) for each *case*: the devnet's run spec (``devnet``: H = 60, a transcript state every step) and the
default run spec (``run``, ``InnerConfig()``: H = 30, a state every 10 steps, so a replayed segment is 10
steps), each in MoE and DiPaCo mode. The transcript states, the residuals, the checkpoint and the encoded
updates go to a temporary directory (safetensors, update bytes). Then, in a process per setting, a
validator verifies the round-2 update of every *other* setting with the validator's own
``validator.pipeline.VerificationPipeline.verify`` (its default policy, ``--segments`` replayed segments per update), which
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

The rooms: :mod:`benchmarks.crossplatform_settings` (settings, cases, chain identities),
:mod:`benchmarks.crossplatform_worker` (the miner and validator workers) and
:mod:`benchmarks.crossplatform_report` (figures and table); this module runs the workers and holds the
command's arguments and ``main``, re-exporting the names callers import from it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.crossplatform_report import command_line, commit, default_tolerances, largest, machine, render
from benchmarks.crossplatform_settings import (
    DEFAULT_SETTINGS,
    ENV_KEYS,
    ROOT,
    SETTINGS,
    Setting,
    cpu_flags,
    run_spec,
    unsupported,
)
from benchmarks.crossplatform_worker import kernels, train, verify, worker
from validator.stages import Stage

# the names the tests import from this module
_kernels, _run_spec, _train, _verify = kernels, run_spec, train, verify

__all__ = [
    "add_arguments",
    "main",
    "run",
]


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
        help="run specs: devnet (the recipe: H=60, a state every step), run (InnerConfig(): H=30, every 10 steps)",
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
        res["kernels"] = kernels(proc.stdout)
    return res


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Train under every setting, replay under every other, and collect the figures."""
    t_start = time.perf_counter()
    names, specs = _settings_and_specs(args)
    flags = cpu_flags()
    skipped = {n: why for n in names if (why := unsupported(SETTINGS[n], flags)) is not None}
    for n, why in skipped.items():
        print(f"skipped {n}: {why}", flush=True)
    run_settings = [SETTINGS[n] for n in names if n not in skipped]
    with _workdir(args.keep) as work:
        genesis = _write_genesis(specs, work)
        trained = _train_all(run_settings, specs, work, args)
        ok = {n: r for n, r in trained.items() if "error" not in r}
        groups = _identical_groups(ok)
        _print_trained(trained, groups)
        active = list(ok) if args.all_pairs else [g[0] for g in groups]
        replayed = _replay_all(run_settings, active, ok, specs, work, args)
    errors = {f"train {n}": r["error"] for n, r in trained.items() if "error" in r}
    pairs = _pairs(replayed, ok, errors)
    outcome = RunOutcome(
        args=args, flags=flags, specs=specs, genesis=genesis, settings=run_settings, trained=trained,
        skipped=skipped, groups=groups, pairs=pairs, errors=errors, started=t_start,
    )  # fmt: skip
    return _figures(outcome)


def _settings_and_specs(args: argparse.Namespace) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """The settings asked for (``cuda`` added with ``--device cuda``) and each case's run spec."""
    names = [n.strip() for n in args.settings.split(",") if n.strip()]
    if args.device == "cuda" and "cuda" not in names:
        names.append("cuda")
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        raise SystemExit(f"unknown settings {unknown}; choose from {', '.join(SETTINGS)}")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    specs = {
        f"{sp}-{m}": run_spec(sp, m, args.steps)
        for sp in (x.strip() for x in args.specs.split(",") if x.strip())
        for m in modes
    }
    return names, specs


@contextmanager
def _workdir(keep: Path | None) -> Iterator[Path]:
    """``keep`` (created), or a temporary directory removed afterwards."""
    if keep is not None:
        work = Path(keep)
        work.mkdir(parents=True, exist_ok=True)
        yield work
        return
    with tempfile.TemporaryDirectory(prefix="tessera-crossplatform-") as tmp:
        yield Path(tmp)


def _write_genesis(specs: dict[str, dict[str, Any]], work: Path) -> dict[str, str]:
    """One theta_0 per case for every setting (its init bits are platform-dependent); their digests."""
    from protocol.runspec import RunSpec
    from protocol.wire.tensorblob import encode_tensors
    from training.digest import state_digest

    genesis: dict[str, str] = {}
    for case, sj in specs.items():
        theta = RunSpec.from_json(sj).genesis_params()
        (work / f"genesis-{case}.safetensors").write_bytes(encode_tensors(theta))
        genesis[case] = state_digest(theta).hex()
    return genesis


def _train_all(
    run_settings: list[Setting], specs: dict[str, dict[str, Any]], work: Path, args: argparse.Namespace
) -> dict[str, dict[str, Any]]:
    """Every setting's train worker (``--jobs`` at once); results by setting."""

    def train_job(s: Setting) -> dict[str, Any]:
        cases = {
            c: {"spec": sj, "genesis": str(work / f"genesis-{c}.safetensors")} for c, sj in specs.items()
        }
        job = {"kind": "train", "dir": str(work / s.name), "segments": args.segments, "cases": cases}
        return _launch(s, job, work)

    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        return dict(zip([s.name for s in run_settings], pool.map(train_job, run_settings), strict=True))


def _identical_groups(ok: dict[str, dict[str, Any]]) -> list[list[str]]:
    """The settings whose transcripts and updates are bit-identical in every case, grouped (first seen
    first)."""

    def signature(n: str) -> dict[str, Any]:
        return {c: (r["transcript_digests"], r["update_digest"]) for c, r in ok[n]["cases"].items()}

    groups: list[list[str]] = []
    for n in ok:
        for g in groups:
            if signature(n) == signature(g[0]):
                g.append(n)
                break
        else:
            groups.append([n])
    return groups


def _print_trained(trained: dict[str, dict[str, Any]], groups: list[list[str]]) -> None:
    """One line per setting: its ATen capability, oneDNN kernels, time and group (or its failure)."""
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


def _replay_all(
    run_settings: list[Setting],
    active: list[str],
    ok: dict[str, dict[str, Any]],
    specs: dict[str, dict[str, Any]],
    work: Path,
    args: argparse.Namespace,
) -> dict[str, dict[str, Any]]:
    """Each active setting's replay worker over every other active setting's updates; results by
    replaying setting."""

    def replay_job(s: Setting) -> dict[str, Any]:
        cases = {
            c: {
                "spec": sj,
                "trained": {x: {**ok[x]["cases"][c], "dir": str(work / x)} for x in active if x != s.name},
            }
            for c, sj in specs.items()
        }
        return _launch(s, {"kind": "replay", "segments": args.segments, "cases": cases}, work)

    replayers = [s for s in run_settings if s.name in active and len(active) > 1]
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        return dict(zip([s.name for s in replayers], pool.map(replay_job, replayers), strict=True))


def _pairs(
    replayed: dict[str, dict[str, Any]], ok: dict[str, dict[str, Any]], errors: dict[str, str]
) -> list[dict[str, Any]]:
    """One row per (trained, replayed, case); a failed replay worker goes to ``errors`` instead."""
    pairs = []
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
    return pairs


@dataclass(frozen=True)
class RunOutcome:
    """What one run collected, which :func:`_figures` writes as its JSON result."""

    args: argparse.Namespace
    """The command's arguments (its command line and ``--segments`` are recorded)."""
    flags: set[str]
    """This machine's CPU flags (:func:`cpu_flags`)."""
    specs: dict[str, dict[str, Any]]
    """Each case's run spec, by case name (``<spec>-<mode>``)."""
    genesis: dict[str, str]
    """Each case's genesis checkpoint digest."""
    settings: list[Setting]
    """The settings that ran (the unsupported ones left out)."""
    trained: dict[str, dict[str, Any]]
    """Each setting's training result (or its ``error``), by setting name."""
    skipped: dict[str, str]
    """Settings this machine cannot run, and why."""
    groups: list[list[str]]
    """Settings whose trained bits are identical, grouped."""
    pairs: list[dict[str, Any]]
    """One row per (trained under, replayed under) pair and case: differences and the verdict's stage."""
    errors: dict[str, str]
    """Workers that failed, and their errors."""
    started: float
    """``time.perf_counter()`` when the run started."""


def _figures(o: RunOutcome) -> dict[str, Any]:
    """The JSON result of a run."""
    tolerances = default_tolerances()
    keys = ("capability", "kernels", "genesis_here", "seconds", "wall_seconds", "error")
    return {
        "command": command_line(o.args),
        "commit": commit(),
        "machine": machine(o.flags),
        "run": {
            "cases": {c: {"inner": sj["inner"], "mode": sj["model"]["mode"]} for c, sj in o.specs.items()},
            "segments": o.args.segments,
            "round": "round 2 of the miner, carrying round 1's error-feedback residual",
        },
        "genesis_digest": o.genesis,
        "settings": {
            s.name: {**asdict(s), **{k: o.trained[s.name].get(k) for k in keys}} for s in o.settings
        },
        "skipped": o.skipped,
        "groups": o.groups,
        "tolerances": tolerances,
        "largest": largest(o.pairs, tolerances),
        "largest_by_spec": {
            sp: largest([p for p in o.pairs if p["case"].startswith(sp + "-")], tolerances)
            for sp in sorted({c.split("-", 1)[0] for c in o.specs})
        },
        "refused_honest": sum(1 for p in o.pairs if p["stage"] == Stage.RECOMPUTE),
        "errors": o.errors,
        "pairs": o.pairs,
        "wall_seconds": round(time.perf_counter() - o.started, 1),
    }


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
        sys.exit(worker(sys.argv[2]))
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.crossplatform", description=__doc__.splitlines()[0]
    )
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
