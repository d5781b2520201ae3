"""Run scenarios and the suite: each scenario's network, its all-honest reference, in order or in parallel.

The results (:mod:`tessera.attack.results`) and the report (:mod:`tessera.attack.report`) are in their own
modules; their public names are re-exported here.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from protocol.runspec import RunSpec
from protocol.wire.records import decode_record
from tessera.attack.casting import Scenario
from tessera.attack.harness import Fault, Network, NetworkRun, Participant, tiny_spec
from tessera.attack.results import (
    ScenarioResult,
    evaluate,
    rebase,
)
from tessera.attack.scenarios import get

log = logging.getLogger(__name__)

__all__ = [
    "reference",
    "reference_key",
    "run_scenario",
    "run_suite",
]


def _fill_board(sc: Scenario) -> Any:
    """An ``on_step`` hook that copies revealed updates and evidence onto the scenario's board."""

    def hook(net: Network) -> None:
        by_addr = {p.address: p for p in net.participants if p.role == "miner"}
        for (r, addr), data in list(net.board.items()):
            p = by_addr.get(addr)
            if p is None or (r, addr) in sc.board.updates:
                continue
            rec = decode_record(data)
            for kind, target in (("update", sc.board.updates), ("evidence", sc.board.evidence)):
                d = rec.digest_of(kind)
                if d is not None and p.node.public.has(d):
                    target[(r, addr)] = p.node.public.get(d)

    return hook


def run_scenario(
    sc: Scenario, rounds: int, spec: Any = None, timeout: float = 900.0, chain: str = "anvil"
) -> NetworkRun:
    """Run one scenario's network for ``rounds`` rounds on ``chain`` (``anvil``: a fresh anvil and
    deployment; ``memory``: the in-memory ledger)."""
    spec = spec or tiny_spec()
    net = Network(
        sc.build(),
        spec=sc.adapt_spec(spec) if sc.adapt_spec is not None else spec,
        on_step=_fill_board(sc),
        chain=chain,
        phase_blocks=sc.phase_blocks,
        audit_params=sc.audit_params,
    )
    net.faults = [Fault(*f) for f in sc.faults]
    net.start()
    try:
        return net.run(max(rounds, sc.min_rounds), timeout=max(timeout, sc.timeout_s))
    finally:
        net.stop()


def reference(sc: Scenario) -> Scenario:
    """The all-honest counterpart of ``sc``: the same participants, every adversary replaced by an honest
    node of its role and stake (built like the scenario's own honest nodes: TEE evidence included). With
    the harness's fixed entropy the two runs draw the same round seeds, so their held-out losses differ
    only by what the adversary did (and the work it did not contribute)."""

    def build() -> list[Participant]:
        parts = sc.build()
        template = {p.role: p for p in parts if p.label == "honest"}
        return [
            p
            if p.label == "honest"
            else Participant(
                p.role, "honest", p.stake, template[p.role].factory if p.role in template else None
            )
            for p in parts
        ]

    return Scenario(
        f"reference:{sc.name}", "baseline", f"all-honest counterpart of {sc.name}", build, tee=sc.tee,
        audit_params=dict(sc.audit_params), min_rounds=sc.min_rounds, adapt_spec=sc.adapt_spec,
    )  # fmt: skip


def reference_key(sc: Scenario) -> tuple[Any, ...]:
    """Scenarios with the same key share one reference run."""
    audits = tuple(sorted(sc.audit_params.items()))
    return (sc.tee, audits, sc.min_rounds, sc.adapt_spec, tuple((p.role, p.stake) for p in sc.build()))


def _failed(sc: Scenario, rounds: int, exc: BaseException) -> ScenarioResult:
    return ScenarioResult(
        sc.name, sc.kind, sc.description, rounds, 0.0, [], 0.0, [], [], 0.0,
        checks={"ran": False}, errors=[f"{type(exc).__name__}: {exc}"],
    )  # fmt: skip


def _run_one(
    name: str, rounds: int, spec_json: dict[str, Any], chain: str, as_reference: bool = False
) -> dict[str, Any]:
    """One scenario (or its all-honest reference) in a worker process; its result as JSON, without the
    held-out comparison (plain data crosses the process boundary)."""
    logging.basicConfig(level=logging.WARNING)
    for noisy in ("miner", "validator"):  # as the CLI sets them in the parent
        logging.getLogger(noisy).setLevel(logging.ERROR)
    sc = reference(get(name)) if as_reference else get(name)
    try:
        run = run_scenario(sc, rounds, RunSpec.from_json(spec_json), chain=chain)
        return evaluate(sc, run).to_json()
    except Exception as exc:  # a crashed scenario is a finding, not the end of the suite
        log.error("scenario %s failed: %s", sc.name, exc, exc_info=True)
        return _failed(sc, rounds, exc).to_json()


def run_suite(
    names: Sequence[str],
    rounds: int,
    out: Path | None = None,
    spec: Any = None,
    progress: Any = None,
    chain: str = "anvil",
    jobs: int = 1,
) -> list[ScenarioResult]:
    """Run the baseline, each named scenario and their all-honest references; write JSON to ``out`` (after
    every run) if given.

    Each scenario's held-out loss is compared with its all-honest reference (:func:`reference`: the same
    participants with the adversaries made honest, the same round seeds); scenarios of the same shape
    share one reference, and the all-honest ``baseline`` is its own. ``chain``: ``anvil`` (default: each
    run on a fresh anvil with freshly deployed contracts) or ``memory`` (the in-memory ledger; the report
    says so). ``jobs`` > 1 runs that many at once, each in its own process with its own anvil (a run spends
    most of its time waiting for blocks and peers, so this shortens the suite even on 2 cores); results
    are reported in the order given.

    A scenario whose network fails is reported with ``checks = {"ran": False}`` and the error; the
    suite goes on with the next one.
    """
    suite = _Suite(names, rounds, out, spec or tiny_spec(), progress, chain, jobs)
    if jobs <= 1:
        for name, as_ref in suite.runs:
            suite.finish(name, as_ref, _run_one(name, rounds, suite.spec.to_json(), chain, as_ref))
    else:
        _run_parallel(suite, jobs)
    return suite.close()


class _Suite:
    """The suite's plan (which reference each scenario is compared with, what runs) and its results so
    far, written to ``out`` after every run."""

    def __init__(
        self,
        names: Sequence[str],
        rounds: int,
        out: Path | None,
        spec: Any,
        progress: Any,
        chain: str,
        jobs: int,
    ) -> None:
        self.t0 = time.perf_counter()
        self.rounds, self.out, self.spec, self.progress, self.chain, self.jobs = (
            rounds, out, spec, progress, chain, jobs
        )  # fmt: skip
        self.order = ["baseline", *[n for n in names if n != "baseline"]]
        self.scenarios = {n: get(n) for n in self.order}
        # scenario -> reference run name ("baseline" for the all-honest shape)
        self.ref_of: dict[str, str] = {}
        refs: dict[tuple[Any, ...], str] = {reference_key(self.scenarios["baseline"]): "baseline"}
        for n in self.order:
            key = reference_key(self.scenarios[n])
            refs.setdefault(key, f"reference:{n}")
            self.ref_of[n] = refs[key]
        ref_runs = [r for r in dict.fromkeys(self.ref_of.values()) if r != "baseline"]
        self.runs: list[tuple[str, bool]] = [(r.removeprefix("reference:"), True) for r in ref_runs] + [
            (n, False) for n in self.order
        ]
        """(scenario name, whether it runs as its all-honest reference), references first."""
        self.ref_heldout: dict[str, list[float]] = {}
        self.done: dict[str, ScenarioResult] = {}
        self.waiting: list[str] = []
        """Scenarios run whose reference has not finished yet."""
        self.references: dict[str, Any] = {}

    def save(self) -> None:
        """Write the report so far to ``out`` (if given)."""
        if self.out is None:
            return
        self.out.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "chain": self.chain,
            "rounds": self.rounds,
            "jobs": self.jobs,
            "seconds": round(time.perf_counter() - self.t0, 1),
            "spec": self.spec.to_json(),
            "scenarios": [self.done[n].to_json() for n in self.order if n in self.done],
            "references": self.references,
        }
        self.out.write_text(json.dumps(doc, indent=1))

    def finish(self, name: str, as_reference: bool, doc: dict[str, Any]) -> None:
        """Take one run's result; compare every scenario whose reference is now known with it."""
        res = ScenarioResult.from_json(doc)
        if as_reference:
            ref = f"reference:{name}"
            self.ref_heldout[ref] = res.heldout
            self.references[ref] = {"seconds": res.seconds, "heldout": res.heldout, "checks": res.checks}
            if self.progress:
                self.progress(res)
        else:
            if name == "baseline":
                self.ref_heldout["baseline"] = res.heldout
            self.waiting.append(name)
            self.done[name] = res
        for n in list(self.waiting):
            if self.ref_of[n] in self.ref_heldout:
                self.waiting.remove(n)
                rebase(self.done[n], self.scenarios[n], self.ref_heldout[self.ref_of[n]], self.ref_of[n])
                if self.progress:
                    self.progress(self.done[n])
        self.save()

    def close(self) -> list[ScenarioResult]:
        """Report the scenarios whose reference failed (without the held-out comparison); the results in
        the order given."""
        for n in self.waiting:
            self.done[n].errors.append(f"reference {self.ref_of[n]} did not run")
            if self.progress:
                self.progress(self.done[n])
        self.save()
        return [self.done[n] for n in self.order if n in self.done]


def _run_parallel(suite: _Suite, jobs: int) -> None:
    """Every run of ``suite`` in ``jobs`` worker processes (fresh interpreters), results as they come."""
    ctx = multiprocessing.get_context("spawn")  # fresh interpreters: no forked threads, locks or torch
    spec_json = suite.spec.to_json()
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        futures = {
            pool.submit(_run_one, name, suite.rounds, spec_json, suite.chain, as_ref): (name, as_ref)
            for name, as_ref in suite.runs
        }
        for fut in as_completed(futures):
            name, as_ref = futures[fut]
            try:
                doc = fut.result()
            except Exception as exc:  # the worker process itself died
                sc = reference(suite.scenarios[name]) if as_ref else suite.scenarios[name]
                doc = _failed(sc, suite.rounds, exc).to_json()
            suite.finish(name, as_ref, doc)
