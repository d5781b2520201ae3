"""The scenario driver: one fault scenario on a fresh devnet, from start-up through injection and
recovery to the checks, always stopping every process it started.

The driver knows no scenario by name: it asks the :class:`~tessera.devnet.faults.base.Scenario` (a
fresh copy of the registry's) for its devnet, its set-up, when it may strike, its fault, its restore, its
checks and its report fields, and hands it a :class:`~tessera.devnet.faults.base.FaultContext`.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from protocol.errors import ProtocolError
from tessera.devnet.config import DevnetError
from tessera.devnet.faults.base import (
    CERTIFY_STALL_S,
    FAULT_ROUND,
    PHASE_ORDER,
    POINTS,
    FaultContext,
    FaultRun,
    FaultsError,
    Scenario,
    Where,
)
from tessera.devnet.faults.checks import Check
from tessera.devnet.faults.mixed import merged_digests, setting_text
from tessera.devnet.network import Devnet

log = logging.getLogger(__name__)


def draw_fault(sc: Scenario, seed: int) -> FaultRun:
    """The injection point, offset in it and downtime, drawn from the scenario's seed (in this order,
    so a seed names the same fault as before)."""
    rng = random.Random(f"{seed}/{sc.name}")
    point = rng.choice(sc.points)
    run = FaultRun(sc.name, seed, point, offset_s=round(rng.uniform(0.5, 3.0), 2), delay_s=0.0)
    run.delay_s = round(rng.uniform(3.0, 8.0), 2)
    if sc.strikes_when_seen(point):
        run.offset_s = 0.0
    return run


class Harness:
    """Runs one scenario on a fresh devnet."""

    def __init__(
        self,
        sc: Scenario,
        seed: int,
        rounds: int,
        workdir: Path,
        say: Callable[[str], None],
        timeout: float,
        miners: int,
        inner_steps: int,
    ) -> None:
        self.sc = sc.fresh()
        self.say = say
        self.timeout = timeout
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "faults.log"
        self.log_path.write_text("")
        run = draw_fault(self.sc, seed)
        net = Devnet(self.sc.devnet_config(workdir, miners, inner_steps))
        self.ctx = FaultContext(net, run, seed, rounds, self.note)
        self.sc.set_up(net, seed)
        self._entered: tuple[Where, float] | None = None
        self._stalled_since: tuple[Where, float] | None = None

    @property
    def run(self) -> FaultRun:
        """The fault's record."""
        return self.ctx.run

    # -- helpers ---------------------------------------------------------------------------------------
    def note(self, msg: str) -> None:
        """One line to the scenario's faults.log, the report and the terminal."""
        line = f"{time.strftime('%H:%M:%S')} [{self.sc.name}] {msg}"
        self.run.events.append(line)
        with open(self.log_path, "a") as fh:
            fh.write(line + "\n")
        self.say(line)

    def _where(self) -> Where:
        """(round, point) of the chain now; ``certify`` while theta of the round is not certified."""
        chain = self.ctx.net.chain
        st = chain.round_state()
        if chain.checkpoint(st.round) == b"\0" * 32:
            return st.round - 1, "certify"
        return st.round, POINTS[int(st.phase)] if int(st.phase) < 4 else "finalize"

    def _chain_up(self) -> bool:
        anvil = self.ctx.net.anvil
        return anvil is not None and anvil.pid is not None

    # -- main loop -------------------------------------------------------------------------------------
    def execute(self) -> dict[str, Any]:
        """Start the devnet, inject, recover, check; always stops everything."""
        t0 = time.time()
        net = self.ctx.net
        self._announce()
        error = ""
        try:
            net.start()
            self.note(f"devnet up in {time.time() - t0:.0f}s")
            for line in net.phases.derivation:
                self.note(f"phase window {line}")
            try:
                self._drive(t0)
            except FaultsError as exc:
                # still check what happened: the checks say which promise broke and why
                error = f"{type(exc).__name__}: {exc}"
                self.note(f"stopped driving: {exc}")
            checks, figures = self.sc.checks(self.ctx)
            self.sc.finish(self.ctx)
        finally:
            self._stop()
        return self._result(checks, figures, error, t0)

    def _announce(self) -> None:
        """The scenario's first lines: the drawn fault (or none) and each node's instruction set."""
        sc, run = self.sc, self.run
        if sc.injects:
            self.note(
                f"seed {run.seed}: fault at round {FAULT_ROUND} point {run.point} "
                f"(+{run.offset_s}s), delay {run.delay_s}s; target {sc.target}"
            )
        else:
            self.note(
                f"no fault injected; rounds {FAULT_ROUND}..{self.ctx.last_round} under the nodes' settings"
            )
        for name, env in sorted(self.ctx.net.cfg.node_env.items()):
            self.note(f"{name} runs under {setting_text(env)}")

    def _stop(self) -> None:
        """Stop what the scenario started, the devnet and the proxies."""
        self.sc.stop()
        self.ctx.net.stop()
        for p in self.sc.proxies.values():
            p.stop()

    def _result(self, checks: list[Check], figures: dict[str, Any], error: str, t0: float) -> dict[str, Any]:
        """The scenario's entry in the report."""
        sc, ctx, run = self.sc, self.ctx, self.run
        net = ctx.net
        return {
            "scenario": sc.name,
            "summary": sc.summary,
            "seed": run.seed,
            "target": sc.target,
            "fault_round": ctx.fault_round,
            "last_round": ctx.last_round,
            "point": run.point,
            "offset_s": run.offset_s,
            "delay_s": run.delay_s,
            "injected": run.injected,
            "restored": run.restored,
            "events": run.events,
            "checks": checks,
            "ok": all(c["ok"] for c in checks) and not error,
            **({"error": error} if error else {}),
            "wall_seconds": round(time.time() - t0, 1),
            "proxies": {k: vars(p.stats) for k, p in sc.proxies.items()},
            "node_env": {n: setting_text(e) for n, e in sorted(net.cfg.node_env.items())},
            "phases": net.phases.to_json() if net.phases is not None else {},
            **({"figures": figures} if figures else {}),
            **sc.report(),
        }

    def _drive(self, t0: float) -> None:
        """Fast-forward the chain round by round, injecting and restoring on the way, until every round
        through the last one is certified (:class:`FaultsError` past the timeout)."""
        ctx, net = self.ctx, self.ctx.net
        done = False
        # a round may last its every window when a node is down: give the scenario that long at least
        timeout = max(self.timeout, time.time() - t0 + (ctx.rounds + 2) * net.round_seconds())
        if not self.sc.injects:
            ctx.injected_at = time.time()
            ctx.restored = True
            self.run.injected = {"round": FAULT_ROUND, "point": "none", "at": ctx.injected_at}
        while not done:
            if time.time() - t0 > timeout:
                raise FaultsError(f"{self.sc.name}: not done after {timeout:.0f}s; see {self.log_path}")
            net.check_alive()
            self._run_due()
            if not self._chain_up():
                time.sleep(0.25)
                continue
            try:
                done = self._step()
            except (ProtocolError, DevnetError, httpx.HTTPError) as exc:
                log.info("chain not readable now: %s", exc)
            time.sleep(0.25)
        self.note(f"rounds 1..{ctx.last_round} certified")

    def _run_due(self) -> None:
        """Run the pending actions whose time has come."""
        for item in [p for p in self.ctx.pending if p[0] <= time.time()]:
            self.ctx.pending.remove(item)
            item[1]()

    def _step(self) -> bool:
        """One look at the chain: inject or restore when due, fast-forward unless holding; whether done."""
        ctx, sc = self.ctx, self.sc
        where = self._where()
        if not ctx.injected_at:
            self._maybe_inject(where)
        elif not ctx.restored:
            sc.restore(ctx, where)
        hold = not ctx.injected_at and where[1] == self.run.point and where[0] >= FAULT_ROUND
        hold = hold or sc.holds_chain(ctx)
        if not hold:
            ctx.net.fast_forward()
        done = ctx.restored and not ctx.pending and ctx.net.certified_rounds() >= ctx.last_round
        if not sc.injects and not done:
            self._watch_certification(where)
        return done

    def _watch_certification(self, where: Where) -> None:
        """Stop (:class:`FaultsError`) when a finalized round stays uncertified for
        :data:`CERTIFY_STALL_S`, naming each validator's merged digest and signature."""
        if where[1] != "certify":
            self._stalled_since = None
            return
        if self._stalled_since is None or self._stalled_since[0] != where:
            self._stalled_since = (where, time.time())
            return
        waited = time.time() - self._stalled_since[1]
        if waited < CERTIFY_STALL_S:
            return
        r, net = where[0], self.ctx.net
        raise FaultsError(
            f"theta_{r + 1} not certified {waited:.0f}s after round {r} was finalized: "
            + "; ".join(merged_digests(net, r, net.cfg.node_env))
        )

    def _maybe_inject(self, where: Where) -> None:
        """Inject once the chain has been at the drawn point for the drawn offset; if the point went by
        unseen, at the next point instead."""
        ctx, run = self.ctx, self.run
        r, point = where
        want = (FAULT_ROUND, run.point)
        if where != want and not run.injected.get("late"):
            late = r > FAULT_ROUND or (
                r == FAULT_ROUND and PHASE_ORDER.index(point) > PHASE_ORDER.index(run.point)
            )
            if not late:
                return
            # the drawn point was too short to catch: strike at the next one (the fault round moves with it)
            self.note(
                f"point {run.point} of round {FAULT_ROUND} passed unseen; injecting at round {r} {point}"
            )
            run.injected["late"] = True
            run.point = point
        if self._entered is None or self._entered[0] != where:
            self._entered = (where, time.time())
        if time.time() - self._entered[1] < run.offset_s or not self.sc.ready(ctx, r):
            return
        ctx.injected_at = time.time()
        block = ctx.net.chain.block_number()
        ctx.fault_round = r
        run.injected.update({"round": r, "point": point, "block": block, "at": time.time()})
        self.sc.inject(ctx, r, point, block)
