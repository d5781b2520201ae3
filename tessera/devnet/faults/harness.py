"""The scenario driver: one fault scenario on a fresh devnet, from start-up through injection and
recovery to the checks, always stopping every process it started."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from protocol.errors import ProtocolError
from tessera.devnet.config import DevnetConfig, DevnetError
from tessera.devnet.faults.checks import Check, check_run, read_payouts
from tessera.devnet.faults.inject import inject, maybe_restore
from tessera.devnet.faults.mixed import check_mixed_hardware, merged_digests
from tessera.devnet.faults.scenarios import (
    CERTIFY_STALL_S,
    FAULT_ROUND,
    PHASE_ORDER,
    POINTS,
    STARTUP_HOLD_S,
    FaultRun,
    FaultsError,
    Scenario,
    cpu_flags,
    mixed_hardware_env,
    setting_text,
)
from tessera.devnet.faults.slowpeers import (
    extra_checks,
    miner_served,
    rounds_lost,
    seed_sybil_keys,
    slowest_honest,
    stop_twin,
    sybil_names,
    verification_times,
)
from tessera.devnet.network import Devnet
from tessera.devnet.proxy import FaultProxy

log = logging.getLogger(__name__)

Pending = tuple[float, Callable[[], None], str]
"""(when, action, what): an action the driver runs once its time has come (a restart)."""


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
        self.sc = sc
        self.seed = seed
        self.rng = random.Random(f"{seed}/{sc.name}")
        self.rounds = rounds
        self.fault_round = FAULT_ROUND
        self.last_round = FAULT_ROUND + rounds - 1
        self.say = say
        self.timeout = timeout
        self.run = self._draw_fault()
        self.cheats = sybil_names(sc, sc.honest_miners or miners)
        """The scenario's cheating miners (``drip-sybils``)."""
        self.twin: Any = None  # same-key-twice: the second process with miner1's key
        self.twin_log = Path()
        self.cfg = self._devnet_config(workdir, miners, inner_steps)
        self.net = Devnet(self.cfg)
        self.proxies = self._front_proxies()
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "faults.log"
        self.log_path.write_text("")
        self._entered: tuple[int, str] | None = None
        self._entered_at = 0.0
        self.injected_at = 0.0
        self.pending: list[Pending] = []
        self.restored = False
        self._stalled_since: tuple[tuple[int, str], float] | None = None
        self.figures: dict[str, Any] = {}
        self.stranger: Any = None  # poison-dht: the stranger's hivemind node
        self.poison: dict[str, Any] = {}  # poison-dht: what the stranger stored and what the DHT refused
        self.poisoned: set[int] = set()

    # -- set-up ----------------------------------------------------------------------------------------
    def _draw_fault(self) -> FaultRun:
        """The injection point, offset in it and downtime, drawn from the scenario's seed (in this order,
        so a seed names the same fault as before)."""
        point = self.rng.choice(self.sc.points)
        run = FaultRun(
            self.sc.name, self.seed, point, offset_s=round(self.rng.uniform(0.5, 3.0), 2), delay_s=0.0
        )
        run.delay_s = round(self.rng.uniform(3.0, 8.0), 2)
        if point == "certify" or self.sc.name == "freeze-after-announce":
            run.offset_s = 0.0  # strike when seen (merging takes seconds; freeze: right after announcing)
        return run

    def _devnet_config(self, workdir: Path, miners: int, inner_steps: int) -> DevnetConfig:
        """The devnet of this scenario: periodic chain dumps for ``kill-chain``, per-node instruction sets
        and no TEE for ``mixed-hardware``."""
        sc = self.sc
        cfg = DevnetConfig(
            workdir=workdir / "devnet",
            miners=(sc.honest_miners or miners) + sc.sybils,
            validators=sc.validators,
            inner_steps=inner_steps,
            state_interval=5 if sc.target == "anvil" else None,
            block_time=sc.block_time,
            fast_forward=sc.fast_forward,
            miner_stake=sc.miner_stake,
        )
        if sc.windows is not None:
            cfg.size_phases = False
            cfg.commit_blocks, cfg.reveal_blocks, cfg.score_commit_blocks, cfg.score_reveal_blocks = (
                sc.windows
            )
        if self.cheats:  # their keys ground to low addresses, kept by a devnet that is not wiped at start
            seed_sybil_keys(cfg.workdir, self.cheats, self.seed)
            cfg.fresh = False
        if self.sc.name == "mixed-hardware":
            cfg.node_env = mixed_hardware_env(cfg.validators, miners, cpu_flags())
            # no TEE evidence: every validator replays every update (an attested one only in a share of
            # rounds), so every honest replay crosses instruction sets
            cfg.tee = "none"
        return cfg

    def _front_proxies(self) -> dict[str, FaultProxy]:
        """The proxies put in front of the target's ports by the scenarios that cut or spoil them."""
        sc, proxies = self.sc, {}
        if sc.name == "validator-rpc-outage":
            proxies["rpc"] = FaultProxy(f"{sc.target}-rpc").start()
            self.net.rpc_fronts[sc.target] = proxies["rpc"]
        for name in self.cheats:
            proxies[name] = FaultProxy(f"{name}-http").start()
            self.net.http_fronts[name] = proxies[name]
        if sc.name == "cut-validator":
            proxies["rpc"] = FaultProxy(f"{sc.target}-rpc").start()
            proxies["http"] = FaultProxy(f"{sc.target}-http").start()
            self.net.rpc_fronts[sc.target] = proxies["rpc"]
            self.net.http_fronts[sc.target] = proxies["http"]
        elif sc.name in ("stall-miner", "corrupt-miner"):
            proxies["http"] = FaultProxy(f"{sc.target}-http").start()
            self.net.http_fronts[sc.target] = proxies["http"]
        return proxies

    # -- helpers ---------------------------------------------------------------------------------------
    def note(self, msg: str) -> None:
        """One line to the scenario's faults.log, the report and the terminal."""
        line = f"{time.strftime('%H:%M:%S')} [{self.sc.name}] {msg}"
        self.run.events.append(line)
        with open(self.log_path, "a") as fh:
            fh.write(line + "\n")
        self.say(line)

    def _where(self) -> tuple[int, str]:
        """(round, point) of the chain now; ``certify`` while theta of the round is not certified."""
        st = self.net.chain.round_state()
        if self.net.chain.checkpoint(st.round) == b"\0" * 32:
            return st.round - 1, "certify"
        return st.round, POINTS[int(st.phase)] if int(st.phase) < 4 else "finalize"

    def _chain_up(self) -> bool:
        return self.net.anvil is not None and self.net.anvil.pid is not None

    # -- main loop -------------------------------------------------------------------------------------
    def execute(self) -> dict[str, Any]:
        """Start the devnet, inject, recover, check; always stops everything."""
        t0 = time.time()
        self._announce()
        error = ""
        try:
            self.net.start()
            self.note(f"devnet up in {time.time() - t0:.0f}s")
            for line in self.net.phases.derivation:
                self.note(f"phase window {line}")
            try:
                self._drive(t0)
            except FaultsError as exc:
                # still check what happened: the checks say which promise broke and why
                error = f"{type(exc).__name__}: {exc}"
                self.note(f"stopped driving: {exc}")
            checks = self.check()
            if self.stranger is not None and hasattr(self.net.dht, "validator_stats"):
                self.poison["bootstrap_dht_validator"] = self.net.dht.validator_stats()
                self.note(f"bootstrap DHT node's record validator: {self.poison['bootstrap_dht_validator']}")
                self.poison["refused_at_node"] = {
                    n: (self.net.get(n, "/status") or {}).get("dht_refused_at_node") for n in self.net.nodes
                }
                self.note(f"records each node's DHT refused: {self.poison['refused_at_node']}")
        finally:
            self._stop()
        return self._result(checks, error, t0)

    def _announce(self) -> None:
        """The scenario's first lines: the drawn fault (or none) and each node's instruction set."""
        if self.sc.inject:
            self.note(
                f"seed {self.seed}: fault at round {FAULT_ROUND} point {self.run.point} "
                f"(+{self.run.offset_s}s), delay {self.run.delay_s}s; target {self.sc.target}"
            )
        else:
            self.note(f"no fault injected; rounds {FAULT_ROUND}..{self.last_round} under the nodes' settings")
        for name, env in sorted(self.cfg.node_env.items()):
            self.note(f"{name} runs under {setting_text(env)}")

    def _stop(self) -> None:
        """Stop the stranger, the devnet and the proxies."""
        stop_twin(self)
        if self.stranger is not None:
            self.stranger.shutdown()
        self.net.stop()
        for p in self.proxies.values():
            p.stop()

    def _result(self, checks: list[Check], error: str, t0: float) -> dict[str, Any]:
        """The scenario's entry in the report."""
        return {
            "scenario": self.sc.name,
            "summary": self.sc.summary,
            "seed": self.seed,
            "target": self.sc.target,
            "fault_round": self.fault_round,
            "last_round": self.last_round,
            "point": self.run.point,
            "offset_s": self.run.offset_s,
            "delay_s": self.run.delay_s,
            "injected": self.run.injected,
            "restored": self.run.restored,
            "events": self.run.events,
            "checks": checks,
            "ok": all(c["ok"] for c in checks) and not error,
            **({"error": error} if error else {}),
            "wall_seconds": round(time.time() - t0, 1),
            "proxies": {k: vars(p.stats) for k, p in self.proxies.items()},
            "node_env": {n: setting_text(e) for n, e in sorted(self.cfg.node_env.items())},
            "phases": self.net.phases.to_json() if self.net.phases is not None else {},
            **({"figures": self.figures} if self.figures else {}),
            **({"poison": self.poison} if self.poison else {}),
        }

    def _drive(self, t0: float) -> None:
        """Fast-forward the chain round by round, injecting and restoring on the way, until every round
        through the last one is certified (:class:`FaultsError` past the timeout)."""
        done = False
        # a round may last its every window when a node is down: give the scenario that long at least
        timeout = max(self.timeout, time.time() - t0 + (self.rounds + 2) * self.net.round_seconds())
        if not self.sc.inject:
            self.injected_at = time.time()
            self.restored = True
            self.run.injected = {"round": FAULT_ROUND, "point": "none", "at": self.injected_at}
        while not done:
            if time.time() - t0 > timeout:
                raise FaultsError(f"{self.sc.name}: not done after {timeout:.0f}s; see {self.log_path}")
            self.net.check_alive()
            self._run_due()
            if not self._chain_up():
                time.sleep(0.25)
                continue
            try:
                done = self._step()
            except (ProtocolError, DevnetError, httpx.HTTPError) as exc:
                log.info("chain not readable now: %s", exc)
            time.sleep(0.25)
        self.note(f"rounds 1..{self.last_round} certified")

    def _run_due(self) -> None:
        """Run the pending actions whose time has come."""
        for item in [p for p in self.pending if p[0] <= time.time()]:
            self.pending.remove(item)
            item[1]()

    def _step(self) -> bool:
        """One look at the chain: inject or restore when due, fast-forward unless holding; whether done."""
        where = self._where()
        if not self.injected_at:
            self._maybe_inject(where)
        elif not self.restored:
            maybe_restore(self, where)
        hold = not self.injected_at and where[1] == self.run.point and where[0] >= FAULT_ROUND
        hold = hold or self._target_starting()
        if not hold:
            self.net.fast_forward()
        done = self.restored and not self.pending and self.net.certified_rounds() >= self.last_round
        if not self.sc.inject and not done:
            self._watch_certification(where)
        return done

    def _watch_certification(self, where: tuple[int, str]) -> None:
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
        r = where[0]
        raise FaultsError(
            f"theta_{r + 1} not certified {waited:.0f}s after round {r} was finalized: "
            + "; ".join(merged_digests(self.net, r, self.cfg.node_env))
        )

    def _target_starting(self) -> bool:
        """Whether a restarted node is still starting (its API not up yet, at most
        :data:`STARTUP_HOLD_S`): the fast-forward then waits, as a real phase (minutes) outlasts a restart;
        without it the devnet could mine past a whole commit phase while the node loads torch (seen with
        seed 7: ``kill-miner`` restarted during round 3's commit and missed it)."""
        if self.sc.name not in ("kill-miner", "kill-validator") or not self.run.restored:
            return False
        if time.time() - float(self.run.restored["at"]) > STARTUP_HOLD_S:
            return False
        node = self.net.nodes[self.sc.target]
        try:
            ok = httpx.get(f"{node.url}/health", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            ok = False
        if ok and not self.run.restored.get("ready_s"):
            self.run.restored["ready_s"] = round(time.time() - float(self.run.restored["at"]), 1)
            self.note(f"{self.sc.target} answers /health {self.run.restored['ready_s']}s after its restart")
        return not ok

    def _maybe_inject(self, where: tuple[int, str]) -> None:
        """Inject once the chain has been at the drawn point for the drawn offset; if the point went by
        unseen, at the next point instead."""
        r, point = where
        want = (FAULT_ROUND, self.run.point)
        if where != want and not self.run.injected.get("late"):
            late = r > FAULT_ROUND or (
                r == FAULT_ROUND and PHASE_ORDER.index(point) > PHASE_ORDER.index(self.run.point)
            )
            if not late:
                return
            # the drawn point was too short to catch: strike at the next one (the fault round moves with it)
            self.note(
                f"point {self.run.point} of round {FAULT_ROUND} passed unseen; injecting at round {r} {point}"
            )
            self.run.injected["late"] = True
            self.run.point = point
        if self._entered != where:
            self._entered, self._entered_at = where, time.time()
        if time.time() - self._entered_at < self.run.offset_s:
            return
        if self.sc.name == "freeze-after-announce" and not miner_served(self.net, self.sc.target, r):
            return  # freeze it right after it announces its update
        self.injected_at = time.time()
        inject(self, r, point)

    # -- checks ----------------------------------------------------------------------------------------
    def check(self) -> list[Check]:
        """The scenario's checks against the chain's events, the validators' verdicts and the logs."""
        if self.sc.name == "mixed-hardware":
            checks, self.figures = check_mixed_hardware(self.net, self.sc, self.fault_round, self.last_round)
            return checks
        checks = check_run(self.net, self.sc, self.fault_round, self.last_round, cheats=self.cheats)
        paid = read_payouts(self.net)
        checks += extra_checks(self, paid)
        times = {r: verification_times(self.net, r) for r in range(self.fault_round, self.last_round + 1)}
        exclude = {*self.cheats, self.sc.target}
        self.figures = {
            "rounds_lost": rounds_lost(self.net, paid, self.fault_round, self.last_round),
            "slowest_honest_verification": slowest_honest(times, exclude),
            "verification": times,
        }
        return checks
