"""Phase windows sized from the measured work each phase must hold.

A phase is a fixed number of blocks on-chain; the work in it is not fixed: it depends on the model, H, the
number of miners, the slowest participant's machine and the load on it. A window counted in blocks that
was right on an idle machine misses on a loaded one (measured: under load average 10-16 on 2 cores a
validator restarted after its score commitment did not reveal within a 10-block window). So the devnet
times the work on this machine before it deploys, under every node setting it will run (the slowest
wins), and derives each window from it:

``blocks(phase) = max(ceil(floor(phase) / block_time), ceil(safety * seconds(phase) / block_time))`` (plus
``RETRY_MARGIN_BLOCKS`` for the score commit, which a validator keeps free of verification, and the audit
window: an audited miner's serving window plus its checks, ``validator.roundschedule.AUDIT_CHECK_S``, not
multiplied by the safety factor since it is a wait, not work; a window shorter than that made every
audit whose miner hangs the member's own deadline, unreported), with

- ``seconds(commit)       = start + merge + heldout + train * ceil(miners * threads / cores)``: a miner
  (re)started in the phase loads, waits for the validators' merge of the last round and its certificate,
  then trains H inner steps, compresses and commits; every miner trains at once on ``cores`` cores;
- ``seconds(reveal)       = start``: a node (re)started in the phase reveals its seed share or serves its
  update (transactions and a few small fetches);
- ``seconds(score-commit) = start + (miners * verify + heldout) * ceil(validators * threads / cores)``:
  a validator fetches and checks every update, replaying its segments (the worst case: no TEE discount);
- ``seconds(score-reveal) = start``: a validator (re)started after committing its scores reveals them.

``start`` is a node process from launch to ready (imports, torch warm-up, a DHT peer), ``train`` one
miner's round (``miner.work.build_update``), ``verify`` one validator's full check of one update
(``validator.pipeline.VerificationPipeline.verify`` with the segment replay), ``heldout`` one held-out evaluation and
``merge`` the merge of ``miners`` updates. ``safety`` (:data:`LOAD_SAFETY`) covers load that arrives after
the measurement; the floors, in seconds (a window in blocks doubles on 2-s blocks), are the windows the
devnet had at 1-s blocks before it measured anything. The devnet
fast-forwards a phase once every node has done its part, so a generous window costs nothing unless a node
is down. ``python -m tessera.devnet.sizing --run-file run.json --miners N --validators V --block-time 12``
prints the derivation for a deployment (run it on the slowest machine that must keep up).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from protocol.node.settings import NodeConfig
from protocol.p2p.dht import DHTConfig, DHTNode
from protocol.runspec import RunSpec, warm_up_torch
from tessera.devnet.work import WorkTimes, measure_work
from tessera.errors import TesseraError
from validator.roundschedule import AUDIT_CHECK_S
from validator.stages import Stage

#: Multiplies the measured seconds of every phase: the work may run that much slower than measured (load
#: that arrives after the devnet measured, a node that restarts while the others compute). 4 covers the
#: failure that motivated the sizing: load average 10-16 on 2 cores, measured while that load was running.
LOAD_SAFETY = 4.0
#: Blocks a validator keeps free at the end of the score-commit phase (``validator.node.RETRY_MARGIN_BLOCKS``).
SCORE_COMMIT_MARGIN_BLOCKS = 4
PHASES = ("commit", "reveal", "score_commit", "score_reveal")


class SizingError(TesseraError):
    """The work could not be measured (a node setting crashed the measurement, or it timed out)."""


def slowest(measured: Sequence[WorkTimes]) -> WorkTimes:
    """Per unit of work, the largest of several measurements (one per node setting)."""
    if not measured:
        raise SizingError("nothing measured")
    return WorkTimes(
        train_s=max(w.train_s for w in measured),
        verify_s=max(w.verify_s for w in measured),
        heldout_s=max(w.heldout_s for w in measured),
        merge_s=max(w.merge_s for w in measured),
        start_s=max(w.start_s for w in measured),
        verify_stage=next((w.verify_stage for w in measured if w.verify_stage != Stage.OK), Stage.OK),
        setting={"slowest_of": ", ".join(_setting_name(w.setting) for w in measured)},
    )


def _setting_name(setting: Mapping[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(setting.items())) or "(no override)"


@dataclass(frozen=True)
class PhaseWindows:
    """Blocks per phase (the deployment's ``*_blocks``), the seconds of work behind them, the derivation."""

    commit: int
    reveal: int
    score_commit: int
    score_reveal: int
    seconds: dict[str, float]
    """Work per phase, before the safety factor."""
    derivation: list[str]
    """One line per phase saying how its blocks were derived (logged and reported)."""
    inputs: dict[str, Any] = field(default_factory=dict)
    """What the derivation used: the work measured, counts, cores, block time, safety, floors."""

    def blocks(self) -> dict[str, int]:
        """``{commit_blocks: ..., ...}``: the deployment parameters."""
        return {f"{p}_blocks": int(getattr(self, p)) for p in PHASES}

    def round_seconds(self, block_time: float) -> float:
        """The longest a round can last at ``block_time`` (every window waited out)."""
        return sum(self.blocks().values()) * max(block_time, 0.0)

    def to_json(self) -> dict[str, Any]:
        """JSON form (``phases.json``, reports)."""
        return {
            **self.blocks(),
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "derivation": list(self.derivation),
            "inputs": self.inputs,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> PhaseWindows:
        """Inverse of :meth:`to_json`."""
        return cls(
            commit=int(doc["commit_blocks"]),
            reveal=int(doc["reveal_blocks"]),
            score_commit=int(doc["score_commit_blocks"]),
            score_reveal=int(doc["score_reveal_blocks"]),
            seconds=dict(doc.get("seconds", {})),
            derivation=list(doc.get("derivation", [])),
            inputs=dict(doc.get("inputs", {})),
        )


def phase_windows(
    work: WorkTimes,
    *,
    miners: int,
    validators: int,
    block_time: float,
    floors: Mapping[str, float],
    cores: int | None = None,
    threads: int = 1,
    safety: float = LOAD_SAFETY,
    audit_window_s: float | None = None,
) -> PhaseWindows:
    """Each phase's blocks from the measured ``work`` (see the module docstring for the rule);
    ``audit_window_s``: what the score commit holds beside the work for one audit that waits out its
    serving window (default: the nodes' fetch timeout plus ``validator.roundschedule.AUDIT_CHECK_S``).

    ``floors`` maps each phase (``commit``, ``reveal``, ``score_commit``, ``score_reveal``) to its least
    seconds (its least blocks where ``block_time`` is 0: blocks then come with transactions, not time);
    ``cores`` defaults to the CPUs this process may use."""
    cores = max(1, cores or len(os.sched_getaffinity(0)))
    mc = math.ceil(max(1, miners) * max(1, threads) / cores)
    vc = math.ceil(max(1, validators) * max(1, threads) / cores)
    seconds, terms = _phase_work(work, miners, mc, vc, cores)
    audit_s = NodeConfig().fetch_timeout + AUDIT_CHECK_S if audit_window_s is None else audit_window_s
    out: dict[str, int] = {}
    lines: list[str] = []
    for p in PHASES:
        floor = math.ceil(floors[p] / block_time) if block_time > 0 else int(floors[p])
        wait = audit_s if p == "score_commit" else 0.0
        out[p], line = _phase_blocks(p, seconds[p], terms[p], floor, block_time, safety, wait)
        lines.append(line)
    return PhaseWindows(
        **out,
        seconds=seconds,
        derivation=lines,
        inputs={
            "work": work.to_json(),
            "miners": miners,
            "validators": validators,
            "cores": cores,
            "threads": threads,
            "block_time": block_time,
            "safety": safety,
            "floors": dict(floors),
            "audit_window_s": audit_s,
        },
    )


def _phase_work(
    w: WorkTimes, miners: int, mc: int, vc: int, cores: int
) -> tuple[dict[str, float], dict[str, str]]:
    """Each phase's seconds of work and the terms they add up from, for :func:`phase_windows`: ``mc``
    (``vc``) is how many miners' (validators') work runs one after another on ``cores`` cores."""
    seconds = {
        "commit": w.start_s + w.merge_s + w.heldout_s + w.train_s * mc,
        "reveal": w.start_s,
        "score_commit": w.start_s + (miners * w.verify_s + w.heldout_s) * vc,
        "score_reveal": w.start_s,
    }
    terms = {
        "commit": f"start {w.start_s:.2f} + merge {w.merge_s:.2f} + held-out {w.heldout_s:.2f} "
        f"+ train {w.train_s:.2f} x {mc} (miners sharing {cores} cores)",
        "reveal": f"start {w.start_s:.2f}",
        "score_commit": f"start {w.start_s:.2f} + ({miners} x verify {w.verify_s:.2f} + held-out "
        f"{w.heldout_s:.2f}) x {vc} (validators sharing {cores} cores)",
        "score_reveal": f"start {w.start_s:.2f}",
    }
    return seconds, terms


def _phase_blocks(
    phase: str, seconds: float, terms: str, floor: int, block_time: float, safety: float, wait_s: float = 0.0
) -> tuple[int, str]:
    """``phase``'s blocks from its ``seconds`` of work and ``wait_s`` of waiting (an audit's serving
    window; at least ``floor``) and the derivation's line."""
    margin = SCORE_COMMIT_MARGIN_BLOCKS if phase == "score_commit" else 0
    if block_time > 0:
        need = math.ceil((safety * seconds + wait_s) / block_time) + margin
    else:
        need = 0  # automine: blocks come with transactions, not with time; the floors stand
    blocks = max(floor, need)
    margin_txt = f" + {margin} margin blocks" if margin else ""
    wait_txt = f" + audit window {wait_s:g}s" if wait_s else ""
    if block_time > 0:
        return blocks, (
            f"{phase}: {terms} = {seconds:.2f}s of work; (x safety {safety:g}{wait_txt}) / block time "
            f"{block_time:g}s{margin_txt} = {need} blocks; floor {floor} blocks "
            f"({floor * block_time:g}s) -> {blocks} blocks"
        )
    return blocks, f"{phase}: not sized (fixed windows) -> {blocks} blocks"


# -- measurement -----------------------------------------------------------------------------------------


def measure_node_work(
    run_file: Path,
    *,
    miners: int,
    validators: int,
    segments: int = 2,
    merge_method: str = "mean",
    threads: int = 1,
    setting: Mapping[str, str] | None = None,
    timeout: float = 600,
) -> WorkTimes:
    """Measure in a fresh process started like a node (``OMP_NUM_THREADS``, the node's extra environment
    ``setting``): its start (imports, torch warm-up, a DHT peer) and then :func:`measure_work`.
    :class:`SizingError` if it crashes (e.g. an instruction set this CPU lacks) or times out."""
    setting = dict(setting or {})
    env = {**os.environ, **setting, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "tessera.devnet.sizing", "--measure-only", "--run-file", str(run_file),
           "--miners", str(miners), "--validators", str(validators), "--segments", str(segments),
           "--merge", merge_method, "--threads", str(threads)]  # fmt: skip
    launched = time.time()
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise SizingError(
            f"measuring the work under {_setting_name(setting)} took over {timeout:.0f}s"
        ) from exc
    if r.returncode != 0:
        why = f"signal {-r.returncode}" if r.returncode < 0 else f"exit {r.returncode}"
        raise SizingError(
            f"measuring the work under {_setting_name(setting)} failed ({why}); a node with this setting "
            f"would fail the same way: {r.stderr.strip()[-600:]}"
        )
    try:
        doc = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise SizingError(f"unreadable measurement: {r.stdout[-300:]!r}") from exc
    return WorkTimes(
        train_s=float(doc["train_s"]),
        verify_s=float(doc["verify_s"]),
        heldout_s=float(doc["heldout_s"]),
        merge_s=float(doc["merge_s"]),
        start_s=float(doc["ready_at"]) - launched,
        verify_stage=str(doc.get("verify_stage", "ok")),
        setting=setting,
    )


def _node_start() -> None:
    """What a node process does before it can act: import its code, warm torch up, start a DHT peer."""
    import miner.node  # noqa: F401
    import validator.node  # noqa: F401

    warm_up_torch()
    DHTNode(DHTConfig()).start().shutdown()


def main(argv: list[str] | None = None) -> int:
    """``python -m tessera.devnet.sizing``: measure the work here and print the phase windows."""
    p = argparse.ArgumentParser(
        prog="python -m tessera.devnet.sizing",
        description="Measure one miner's round, one validator's check, a held-out evaluation, the merge and "
        "a node's start on this machine, and print each phase's blocks: max(floor, ceil(safety x seconds / "
        "block time)). Run it on the slowest machine that must keep up.",
    )
    p.add_argument("--run-file", type=Path, required=True, help="the run's run.json")
    p.add_argument("--miners", type=int, default=4)
    p.add_argument("--validators", type=int, default=2)
    p.add_argument("--segments", type=int, default=2, help="segments each validator replays per miner")
    p.add_argument("--merge", default="mean", help="merge rule (mean or trimmed_mean)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per node")
    p.add_argument("--cores", type=int, default=0, help="cores the nodes share (0: this machine's)")
    p.add_argument("--block-time", type=float, default=1.0, help="seconds per block (default 1)")
    p.add_argument("--safety", type=float, default=LOAD_SAFETY, help=f"load safety factor ({LOAD_SAFETY:g})")
    p.add_argument(
        "--floors", default="60,10,30,10", help="least seconds of the four phases (default 60,10,30,10)"
    )
    p.add_argument("--measure-only", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.measure_only:
        _node_start()
        torch.set_num_threads(max(1, a.threads))
        ready_at = time.time()
        w = measure_work(
            RunSpec.load(a.run_file), miners=a.miners, validators=a.validators, segments=a.segments,
            merge_method=a.merge,
        )  # fmt: skip
        print(json.dumps({**w.to_json(), "ready_at": ready_at}))
        return 0
    work = measure_node_work(
        a.run_file, miners=a.miners, validators=a.validators, segments=a.segments, merge_method=a.merge,
        threads=a.threads,
    )  # fmt: skip
    floors = dict(zip(PHASES, (float(x) for x in a.floors.split(",")), strict=True))
    pw = phase_windows(
        work, miners=a.miners, validators=a.validators, block_time=a.block_time, floors=floors,
        cores=a.cores or None, threads=a.threads, safety=a.safety,
    )  # fmt: skip
    print("\n".join(pw.derivation))
    print(json.dumps(pw.blocks()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
