"""``tessera devnet``'s driver: run R rounds with a live terminal view, then write the report.

The view (rich) shows the round, phase and block, the held-out loss, and each miner's state, score,
consensus and reward. The report (``report.json`` and ``report.png`` in the workdir) has per round: the
held-out loss before and after the merge, rewards per miner, every node's ledger by kind and in bits per
trained parameter per inner step, each node's fixed terms, verification cost
(validator compute against the miners' training compute), the wall time and its share outside training,
and samples: continuations of a fixed prompt from the round's certified checkpoint (fetched from a
validator, checked against the chain), shown under the live view as rounds certify. Last, it
exports the newest certified checkpoint to ``DIR/model`` (read by ``tessera model eval`` and ``sample``)."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.live import Live
from rich.table import Table

from protocol.runspec import RunSpec
from tessera import modelout
from tessera.devnet.config import DevnetConfig, DevnetError
from tessera.devnet.network import Devnet
from tessera.devnet.progress import printer
from tessera.devnet.report import build_report, write_report
from tessera.errors import TesseraError
from tessera.modelout import certified_digest, export, model_with, sample, theta_of
from training.errors import TrainingError
from training.model import all_paths

log = logging.getLogger(__name__)

PHASES = ["commit", "reveal", "score-commit", "score-reveal", "finalize"]


def checkpoint_samples(
    net: Any, round: int, spec: Any, count: int, prompt: str, max_new: int = 80
) -> dict[str, Any]:
    """``count`` continuations of ``prompt`` (seeds 0.., temperature 0.8; in DiPaCo mode path ``i`` of
    ``all_paths``) from theta_{r+1}, the checkpoint certified for ``round``: fetched from validator0 and
    checked against the digest on chain (``tessera.modelout``). Errors become ``{"error": ...}``."""
    raw = bytes(net.chain.checkpoint(round + 1))
    out: dict[str, Any] = {"round": round, "checkpoint": "0x" + raw.hex(), "prompt": prompt}
    if not any(raw):
        return out | {"error": "not certified"}
    try:
        params, _ = theta_of(
            modelout.fetch_checkpoint(net.nodes["validator0"].url, out["checkpoint"]), out["checkpoint"]
        )
        model = model_with(params, spec.model)
        tok = spec.load_tokenizer()
        paths = all_paths(spec.model)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the nodes have the cores
        try:
            texts = [
                sample(
                    model,
                    prompt,
                    max_new=max_new,
                    temperature=0.8,
                    seed=i,
                    path=paths[i % len(paths)] if spec.model.mode == "dipaco" else None,
                    tokenizer=tok,
                )
                for i in range(count)
            ]
        finally:
            torch.set_num_threads(threads)
    except (TesseraError, TrainingError, OSError) as exc:
        return out | {"error": str(exc)}
    return out | {"samples": texts}


def _view(net: Devnet, rounds: int, t0: float, samples: dict[int, dict[str, Any]] | None = None) -> Any:
    st = net.chain.round_state()
    block = net.chain.block_number()
    vsum = net.get("validator0", "/rounds") or []
    last = {r["round"]: r for r in vsum}
    table = Table(
        title=f"tessera devnet  round {st.round}/{rounds}  phase {PHASES[int(st.phase)]}  "
        f"block {block} (phase ends {st.deadline})  {time.time() - t0:.0f}s",
        expand=False,
    )
    table.add_column("node")
    table.add_column("state")
    table.add_column("loss (train)")
    prev = last.get(st.round - 1, {})
    cur = last.get(st.round, {})
    table.add_column(f"score r{st.round}")
    table.add_column(f"consensus r{st.round - 1}")
    table.add_column(f"reward r{st.round - 1}")
    for name, n in sorted(net.nodes.items()):
        s = net.get(name, "/status") or {}
        alive = "up" if n.alive() else "DOWN"
        if n.role == "miner":
            lr = s.get("last_round") or {}
            loss = f"{lr.get('loss_first', 0):.3f}->{lr.get('loss_last', 0):.3f}" if lr else ""
            score = cur.get("scores", {}).get(n.address, "")
            cons = prev.get("consensus", {}).get(n.address, "")
            rew = prev.get("rewards", {}).get(n.address)
            table.add_row(
                name, f"{alive} {s.get('phase', '')}", loss, str(score), str(cons),
                f"{int(rew) / 1e18:.1f}" if rew else "",
            )  # fmt: skip
        else:
            hb, ha = prev.get("heldout_before"), prev.get("heldout_after")
            loss = f"held-out {hb:.3f}->{ha:.3f}" if hb and ha else ""
            rew = prev.get("rewards", {}).get(n.address)
            table.add_row(
                name, f"{alive} {s.get('phase', '')}", loss, "", "", f"{int(rew) / 1e18:.1f}" if rew else ""
            )
    if samples:
        last = samples[max(samples)]
        texts = last.get("samples") or [f"({last.get('error', 'no sample')})"]
        table.caption = f"sample of theta_{last['round'] + 1}: " + " | ".join(
            repr(last["prompt"] + t.replace("\n", " ")[:70]) for t in texts
        )
    return table


def run_devnet(cfg: DevnetConfig, rounds: int, *, live: bool = True, timeout: float = 1800) -> dict[str, Any]:
    """Start a devnet, run ``rounds`` training rounds, write the report, stop everything.

    On a fresh chain round 1 is the join round: miners register while it is open, and a miner works from
    the first round that opens after its registration, so ``rounds`` training rounds are rounds 2..R+1.
    """
    net = Devnet(cfg)
    rounds = rounds + 1 if cfg.fresh else rounds
    t0 = time.time()
    round_marks: dict[int, float] = {}
    samples: dict[int, dict[str, Any]] = {}
    try:
        net.start()
        t_started = time.time()
        on_round = _sampler(net, samples) if cfg.samples > 0 else None
        live = live and sys.stdout.isatty()  # a pipe or a file: progress lines (rich draws once, at exit)
        if not live:
            on_round = printer(net, samples, t0, on_round)
        if live:
            with Live(_view(net, rounds, t0, samples), console=Console(), refresh_per_second=2) as lv:
                _drive(
                    net,
                    rounds,
                    t0,
                    timeout,
                    round_marks,
                    lambda: lv.update(_view(net, rounds, t0, samples)),
                    on_round,
                )
        else:
            _drive(net, rounds, t0, timeout, round_marks, lambda: None, on_round)
        report = build_report(net, rounds, t0, t_started, round_marks)
        for pr in report["per_round"]:
            if pr["round"] in samples:
                pr["samples"] = samples[pr["round"]]
        report["model"] = export_model(net, cfg.workdir / "model")
        write_report(report, cfg.workdir)
        return report
    finally:
        net.stop()


def export_model(net: Any, out: Path) -> dict[str, Any]:
    """Export the newest certified checkpoint to ``out`` as ``tessera model export`` does (fetched from
    validator0, its digest checked against the chain): what ``tessera model eval`` and ``model sample``
    read after the devnet stopped. Errors become ``{"error": ...}``."""
    try:
        spec = RunSpec.load(net.run_path)
        cert = certified_digest(net.chain, None)
        params, digest = theta_of(
            modelout.fetch_checkpoint(net.nodes["validator0"].url, cert.digest), cert.digest
        )
        export(params, spec, out, cert, digest)
    except (TesseraError, TrainingError, OSError) as exc:
        return {"error": str(exc)}
    return {"dir": str(out), "theta_round": cert.round, "checkpoint": digest}


def _sampler(net: Devnet, samples: dict[int, dict[str, Any]]) -> Any:
    """A callback that samples a round's certified checkpoint into ``samples`` (and logs it)."""
    spec = RunSpec.load(net.run_path)

    def on_round(round: int) -> None:
        got = checkpoint_samples(net, round, spec, net.cfg.samples, net.cfg.sample_prompt)
        samples[round] = got
        log.info("samples of theta_%d: %s", round + 1, got.get("samples") or got.get("error"))

    return on_round


def _drive(
    net: Devnet,
    rounds: int,
    t0: float,
    timeout: float,
    marks: dict[int, float],
    refresh: Any,
    on_round: Any = None,
) -> None:
    last_view = 0.0
    while True:
        net.check_alive()
        net.fast_forward()
        done = net.certified_rounds()
        for r in range(1, done + 1):
            if r not in marks and on_round is not None:
                marks[r] = time.time()
                on_round(r)
            marks.setdefault(r, time.time())
        if done >= rounds:
            return
        if time.time() - t0 > timeout:
            raise DevnetError(f"only {done}/{rounds} rounds certified after {timeout:.0f}s")
        if time.time() - last_view > 0.5:
            refresh()
            last_view = time.time()
        time.sleep(0.25)
