"""``tessera faults``: crash, cut off and corrupt real node processes of a devnet, then check the money.

Each scenario starts a fresh devnet (real anvil, contracts, DHT, miner and validator OS processes; see
:mod:`tessera.devnet.network`), lets round 1 be the join round, injects one fault in the first training
round (the *fault round*, chain round 2) at a phase drawn from a named seed, and runs one or more rounds
after it. Faults:

- ``kill-chain``: ``kill -9`` of anvil, down for a few seconds, restarted from its last periodic state
  dump (``--state-interval``): blocks mined since the dump are gone, so to the nodes it is a reorg; their
  lost transactions must be re-sent while the phase allows.
- ``kill-miner`` / ``kill-validator``: ``kill -9`` of a node process, restarted after a delay from its
  data directory.
- ``cut-validator``: a validator's chain RPC and its HTTP API are behind :class:`FaultProxy` ports that are
  closed ("blocked port") from the fault until about a round later.
- ``stall-miner`` / ``corrupt-miner``: a miner's public URL is a proxy that, for the fault round, accepts and
  trickles a byte a second without ever answering, or flips a byte of every body it serves.

- ``poison-dht``: a stranger (plain hivemind client, no key on chain, no stake) joins the DHT and, from the
  fault round on, stores over every round key a non-dictionary value, forged and replayed records under
  the honest nodes' subkeys (all with a one-year expiry), and records it signed with a bad and a dead URL
  (also pushed to every node's ``/records``); see :mod:`tessera.devnet.poison`. Every honest participant
  must be paid in every round, as in every scenario.

- ``mixed-hardware``: no fault is injected; the devnet's node processes run under different CPU
  instruction sets for torch's kernels (``ATEN_CPU_CAPABILITY`` default/avx2/avx512, the last only where
  ``/proc/cpuinfo`` shows AVX-512 F/BW/VL/DQ; ``MKL_ENABLE_INSTRUCTIONS`` and ``ONEDNN_MAX_CPU_ISA`` caps
  on some), and every round must be certified with no honest miner refused or slashed
  (:func:`mixed_hardware_env`, :func:`check_mixed_hardware`).

After each scenario the chain's events are checked against the issue's promises: nothing paid twice;
payouts equal what the revealed scores settle to (:func:`protocol.consensus.settle`, the contract's
arithmetic); every honest participant that was not the fault's target is paid in every round; the target
is paid for the fault round when it completed it (its update was fetched / its scores revealed) and earns
nothing when it served stalls or corrupt bytes; the round after the fault is finalized and its checkpoint
certified, with the target taking part and paid (recovery within one round); nobody is slashed; and the
node logs contain a line saying what happened (grep patterns per scenario).
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from protocol.errors import ProtocolError
from tessera.devnet.network import Devnet, DevnetConfig, DevnetError
from tessera.devnet.proxy import FaultProxy, ProxyMode
from tessera.errors import TesseraError

log = logging.getLogger(__name__)

#: Where in the fault round a fault may be injected: the four timed phases, and ``certify`` (round F was
#: finalized, theta_{F+1} not certified yet: validators are merging and gathering signatures).
POINTS = ("commit", "reveal", "score-commit", "score-reveal", "certify")
_ORDER = ("commit", "reveal", "score-commit", "score-reveal", "finalize", "certify")
FAULT_ROUND = 2
"""Chain round of the fault on a fresh devnet (round 1 is the join round)."""
STARTUP_HOLD_S = 120.0
"""Seconds the fast-forward waits, at most, for a restarted node's API to come up."""
CERTIFY_STALL_S = 180.0
"""Seconds a round may stay finalized and uncertified in a scenario without a fault (``mixed-hardware``)
before the harness stops and reports why (merging and signing take seconds)."""
AVX512_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq")
"""The CPU flags ATen's ``avx512`` kernels need (without them torch dies of an illegal instruction)."""


class FaultsError(TesseraError):
    """A fault scenario could not be run (the devnet failed or a deadline passed)."""


@dataclass(frozen=True)
class Scenario:
    """One fault."""

    name: str
    summary: str
    target: str
    """Node name, or ``anvil``."""
    points: tuple[str, ...]
    """Where it may be injected (drawn with the seed)."""
    log_patterns: tuple[tuple[str, str], ...]
    """(node name or ``*`` for any node, regex) that must occur in the logs after the fault."""
    inject: bool = True
    """False: nothing is injected; the scenario is the devnet's set-up (``mixed-hardware``)."""


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "kill-chain",
            "kill -9 anvil at a random phase, restart it from its last periodic dump (lost blocks = a reorg)",
            "anvil",
            POINTS,
            (("*", r"connection error|RPC unreachable"),),
        ),
        Scenario(
            "kill-miner",
            "kill -9 miner1 at a random phase, restart it after a delay",
            "miner1",
            POINTS,
            (("miner1", r"(?s)serving at.*serving at"),),
        ),
        Scenario(
            "kill-validator",
            "kill -9 validator1 at a random phase, restart it after a delay",
            "validator1",
            POINTS,
            (("validator1", r"(?s)serving at.*serving at"),),
        ),
        Scenario(
            "cut-validator",
            "close validator1's chain RPC and HTTP ports (a blocked port) for about a round",
            "validator1",
            POINTS[:4],
            (("validator1", r"connection error|RPC unreachable"),),
        ),
        Scenario(
            "stall-miner",
            "miner1's public port accepts, then trickles a byte a second and never answers, for a round",
            "miner1",
            POINTS[:2],
            (("validator*", r"stalling peer|stalled a fetch"),),
        ),
        Scenario(
            "corrupt-miner",
            "miner1's public port flips a byte of what it serves, for a round",
            "miner1",
            POINTS[:2],
            (("validator*", r"served a bad blob|hash to"),),
        ),
        Scenario(
            "poison-dht",
            "a stranger's plain hivemind client stores junk, forged and replayed records over every round key "
            "(1-year expiry) and announces signed records with a bad and a dead URL",
            "dht",
            ("commit",),
            (("validator*", r"http://127\.0\.0\.1:9\b"),),  # the stranger's dead URL tried and skipped
        ),
        Scenario(
            "mixed-hardware",
            "nodes on different CPU instruction sets (ATen default/avx2/avx512, MKL/oneDNN caps); no fault",
            "none",
            ("commit",),
            (),
            inject=False,
        ),
    )
}


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU's feature flags (empty if ``/proc/cpuinfo`` cannot be read)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def mixed_hardware_env(validators: int, miners: int, flags: set[str]) -> dict[str, dict[str, str]]:
    """Each node's instruction-set environment for ``mixed-hardware``.

    validator0 runs the oldest x86-64 setting (ATen ``default``: no SIMD kernels; MKL capped at SSE4.2,
    oneDNN at SSE4.1), validator1 the best this CPU has (no caps), further validators alternate; miners
    cycle through ATen ``default``, ``avx2`` with MKL and oneDNN capped at AVX2, and ``avx512`` with MKL
    at AVX-512 where ``flags`` has :data:`AVX512_FLAGS` (else ATen ``default`` with MKL and oneDNN capped
    at AVX)."""
    avx512 = all(f in flags for f in AVX512_FLAGS)
    best = "avx512" if avx512 else "avx2" if "avx2" in flags else "default"
    oldest = {
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
    }
    vsettings = [oldest, {"ATEN_CPU_CAPABILITY": best}]
    msettings: list[dict[str, str]] = [{"ATEN_CPU_CAPABILITY": "default"}]
    if "avx2" in flags:
        msettings.append(
            {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
        )
    if avx512:
        msettings.append(
            {
                "ATEN_CPU_CAPABILITY": "avx512",
                "MKL_ENABLE_INSTRUCTIONS": "AVX512",
                "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
            }
        )
    else:
        msettings.append(
            {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "AVX", "ONEDNN_MAX_CPU_ISA": "AVX"}
        )
    env = {f"validator{i}": dict(vsettings[i % len(vsettings)]) for i in range(validators)}
    env.update({f"miner{i}": dict(msettings[i % len(msettings)]) for i in range(miners)})
    return env


def setting_text(env: dict[str, str]) -> str:
    """``ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ...`` (or ``machine default``)."""
    return " ".join(f"{k}={v}" for k, v in sorted(env.items())) or "machine default"


@dataclass
class FaultRun:
    """What happened in one scenario (the report's raw material)."""

    scenario: str
    seed: int
    point: str
    offset_s: float
    delay_s: float
    injected: dict[str, Any] = field(default_factory=dict)
    restored: dict[str, Any] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)


# -- scenario driver -----------------------------------------------------------------------------------


class _Harness:
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
        point = self.rng.choice(sc.points)
        self.run = FaultRun(sc.name, seed, point, offset_s=round(self.rng.uniform(0.5, 3.0), 2), delay_s=0.0)
        self.run.delay_s = round(self.rng.uniform(3.0, 8.0), 2)
        if point == "certify":
            self.run.offset_s = 0.0  # merging and signing take a second or two: strike when seen
        self.cfg = DevnetConfig(
            workdir=workdir / "devnet",
            miners=miners,
            validators=2,
            inner_steps=inner_steps,
            state_interval=5 if sc.target == "anvil" else None,
        )
        if sc.name == "mixed-hardware":
            self.cfg.node_env = mixed_hardware_env(self.cfg.validators, miners, cpu_flags())
            # no TEE evidence: every validator replays every update (an attested one only in a share of
            # rounds), so every honest replay crosses instruction sets
            self.cfg.tee = "none"
        self.net = Devnet(self.cfg)
        self.proxies: dict[str, FaultProxy] = {}
        if sc.name == "cut-validator":
            self.proxies["rpc"] = FaultProxy(f"{sc.target}-rpc").start()
            self.proxies["http"] = FaultProxy(f"{sc.target}-http").start()
            self.net.rpc_fronts[sc.target] = self.proxies["rpc"]
            self.net.http_fronts[sc.target] = self.proxies["http"]
        elif sc.name in ("stall-miner", "corrupt-miner"):
            self.proxies["http"] = FaultProxy(f"{sc.target}-http").start()
            self.net.http_fronts[sc.target] = self.proxies["http"]
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "faults.log"
        self.log_path.write_text("")
        self._entered: tuple[int, str] | None = None
        self._entered_at = 0.0
        self._injected_at = 0.0
        self._pending: list[tuple[float, Callable[[], None], str]] = []
        self._restored = False
        self._stalled_since: tuple[tuple[int, str], float] | None = None
        self.figures: dict[str, Any] = {}
        self.stranger: Any = None  # poison-dht: the stranger's hivemind node
        self.poison: dict[str, Any] = {}  # poison-dht: what the stranger stored and what the DHT refused
        self._poisoned: set[int] = set()

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
        if self.sc.inject:
            self.note(
                f"seed {self.seed}: fault at round {FAULT_ROUND} point {self.run.point} "
                f"(+{self.run.offset_s}s), delay {self.run.delay_s}s; target {self.sc.target}"
            )
        else:
            self.note(f"no fault injected; rounds {FAULT_ROUND}..{self.last_round} under the nodes' settings")
        for name, env in sorted(self.cfg.node_env.items()):
            self.note(f"{name} runs under {setting_text(env)}")
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
        finally:
            if self.stranger is not None:
                self.stranger.shutdown()
            self.net.stop()
            for p in self.proxies.values():
                p.stop()
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
        done = False
        # a round may last its every window when a node is down: give the scenario that long at least
        timeout = max(self.timeout, time.time() - t0 + (self.rounds + 2) * self.net.round_seconds())
        if not self.sc.inject:
            self._injected_at = time.time()
            self._restored = True
            self.run.injected = {"round": FAULT_ROUND, "point": "none", "at": self._injected_at}
        while not done:
            if time.time() - t0 > timeout:
                raise FaultsError(f"{self.sc.name}: not done after {timeout:.0f}s; see {self.log_path}")
            self.net.check_alive()
            for item in [p for p in self._pending if p[0] <= time.time()]:
                self._pending.remove(item)
                item[1]()
            if not self._chain_up():
                time.sleep(0.25)
                continue
            try:
                where = self._where()
                if not self._injected_at:
                    self._maybe_inject(where)
                elif not self._restored:
                    self._maybe_restore(where)
                hold = not self._injected_at and where[1] == self.run.point and where[0] >= FAULT_ROUND
                hold = hold or self._target_starting()
                if not hold:
                    self.net.fast_forward()
                done = self._restored and not self._pending and self.net.certified_rounds() >= self.last_round
                if not self.sc.inject and not done:
                    self._watch_certification(where)
            except (ProtocolError, DevnetError, httpx.HTTPError) as exc:
                log.info("chain not readable now: %s", exc)
            time.sleep(0.25)
        self.note(f"rounds 1..{self.last_round} certified")

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
            + "; ".join(_merged_digests(self.net, r, self.cfg.node_env))
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
        r, point = where
        want = (FAULT_ROUND, self.run.point)
        if where != want and not self.run.injected.get("late"):
            late = r > FAULT_ROUND or (
                r == FAULT_ROUND and _ORDER.index(point) > _ORDER.index(self.run.point)
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
        self._injected_at = time.time()
        self._inject(r, point)

    def _snapshot(self) -> Counter[str]:
        c: Counter[str] = Counter()
        for name in ("UpdateCommitted", "SeedCommitted", "SeedRevealed", "ScoresCommitted", "ScoresRevealed",
                     "RoundFinalized", "CheckpointCertified"):  # fmt: skip
            for e in self.net.chain.events(name):
                if int(getattr(e, "round", FAULT_ROUND)) >= FAULT_ROUND:
                    c[name] += 1
        return c

    def _inject(self, r: int, point: str) -> None:
        sc, net = self.sc, self.net
        block = net.chain.block_number()
        self.fault_round, self.last_round = r, r + self.rounds - 1
        self.run.injected.update({"round": r, "point": point, "block": block, "at": time.time()})
        if sc.name == "kill-chain":
            before = self._snapshot()
            pid = net.anvil.pid
            net.kill_chain()
            self.note(f"kill -9 anvil (pid {pid}) at round {r} {point}, block {block}")
            self.run.injected["events_before"] = dict(before)

            def back() -> None:
                net.restart_chain()
                after_block = net.chain.block_number()
                after = self._snapshot()
                lost = {k: before[k] - after.get(k, 0) for k in before if before[k] > after.get(k, 0)}
                self.run.restored = {
                    "at": time.time(),
                    "down_s": round(time.time() - self.run.injected["at"], 1),
                    "block": after_block,
                    "blocks_lost": max(0, block - after_block),
                    "events_lost": lost,
                }
                self.note(
                    f"anvil restarted from its last dump at block {after_block}: {block - after_block} blocks "
                    f"and these transactions' events lost: {lost or 'none'}"
                )
                self._restored = True

            self._pending.append((time.time() + self.run.delay_s, back, "restart anvil"))
        elif sc.name in ("kill-miner", "kill-validator"):
            proc = net.nodes[sc.target].proc
            pid = proc.pid if proc is not None else None
            net.kill(sc.target)
            self.note(f"kill -9 {sc.target} (pid {pid}) at round {r} {point}, block {block}")

            def back() -> None:
                net.restart(sc.target)
                self.run.restored = {
                    "at": time.time(),
                    "down_s": round(time.time() - self.run.injected["at"], 1),
                }
                self.note(f"{sc.target} restarted from its data directory")
                self._restored = True

            self._pending.append((time.time() + self.run.delay_s, back, f"restart {sc.target}"))
        elif sc.name == "poison-dht":
            from tessera.devnet.poison import start_stranger

            self.stranger = start_stranger(net.dht.visible_maddrs())
            self.poison["stranger_stores"] = {}
            for rr in range(r, self.last_round + 2):
                self._poison(rr)
        elif sc.name == "cut-validator":
            for p in self.proxies.values():
                p.set_mode(ProxyMode.BLOCK)
            self.note(
                f"{sc.target} cut off (chain RPC and HTTP ports closed) at round {r} {point}, block {block}"
            )
        else:
            mode = ProxyMode.STALL if sc.name == "stall-miner" else ProxyMode.CORRUPT
            self.proxies["http"].set_mode(mode)
            self.note(f"{sc.target}'s public port set to {mode.value} at round {r} {point}, block {block}")

    def _poison(self, r: int) -> None:
        """poison-dht: every store of :func:`tessera.devnet.poison.poison_round` against round ``r``."""
        from tessera.devnet.poison import poison_round

        nodes = list(self.net.nodes.values())
        cid = self.net.chain.chain_id
        honest = self.net.dht.lookup(cid, r).records  # the bootstrap node reads as any honest node does
        said = poison_round(self.stranger, cid, r, [n.address for n in nodes], [n.url for n in nodes], honest)
        total = self.poison["stranger_stores"]
        for k, n in said.items():
            total[k] = total.get(k, 0) + n
        self.note(f"stranger poisoned round {r}: {dict(sorted(said.items()))}")

    def _maybe_restore(self, where: tuple[int, str]) -> None:
        if self.sc.name == "poison-dht":
            # again once each round's honest records exist (forgeries and replays of them), to the last round
            r, point = where
            if point != "commit" and r >= self.fault_round and r not in self._poisoned:
                self._poisoned.add(r)
                self._poison(r)
                self._poison(r + 1)
                if r >= self.last_round:
                    self.run.restored = {"at": time.time(), "round": r, "point": point}
                    self._restored = True
            return
        if self.sc.name not in ("cut-validator", "stall-miner", "corrupt-miner"):
            return
        r, point = where
        elapsed = time.time() - self._injected_at
        finalized = r > self.fault_round or (r == self.fault_round and point == "certify")
        if self.sc.name == "cut-validator":
            ready = (finalized and elapsed >= 30) or elapsed >= 120
        else:
            ready = finalized
        if not ready:
            return
        for p in self.proxies.values():
            p.set_mode(ProxyMode.PASS)
        self.run.restored = {"at": time.time(), "down_s": round(elapsed, 1), "round": r, "point": point}
        self.note(f"{self.sc.target}'s ports open again after {elapsed:.0f}s (round {r} {point})")
        self._restored = True

    # -- checks ----------------------------------------------------------------------------------------
    def check(self) -> list[dict[str, Any]]:
        """The scenario's checks against the chain's events, the validators' verdicts and the logs."""
        if self.sc.name == "mixed-hardware":
            checks, self.figures = check_mixed_hardware(self.net, self.sc, self.fault_round, self.last_round)
            return checks
        return check_run(self.net, self.sc, self.fault_round, self.last_round)


# -- checks --------------------------------------------------------------------------------------------


def _check(name: str, ok: bool, detail: str = "") -> dict[str, Any]:
    return {"name": name, "ok": bool(ok), "detail": detail}


def check_run(net: Devnet, sc: Scenario, fault_round: int, last_round: int) -> list[dict[str, Any]]:
    """Every check of one scenario (see the module docstring)."""
    from protocol.consensus import settle

    chain = net.chain
    names = {n.address.lower(): name for name, n in net.nodes.items()}
    miners = sorted(n.address for n in net.nodes.values() if n.role == "miner")
    validators = sorted(n.address for n in net.nodes.values() if n.role == "validator")
    rounds = list(range(fault_round, last_round + 1))
    bps = chain.params().validator_share_bps
    target = sc.target if sc.target != "anvil" else None
    checks: list[dict[str, Any]] = []

    finalized = Counter(int(e.round) for e in chain.events("RoundFinalized"))
    mpaid = [
        (int(e.round), e.miner.lower(), int(e.consensus), int(e.amount))
        for e in chain.events("MinerRewarded")
    ]
    vpaid = [(int(e.round), e.validator.lower(), int(e.amount)) for e in chain.events("ValidatorRewarded")]
    twice = [f"round {r} finalized {c}x" for r, c in finalized.items() if c > 1]
    twice += [
        f"{names.get(a, a)} paid {c}x in round {r}"
        for (r, a), c in Counter((x[0], x[1]) for x in mpaid).items()
        if c > 1
    ]
    twice += [
        f"{names.get(a, a)} paid {c}x in round {r}"
        for (r, a), c in Counter((x[0], x[1]) for x in vpaid).items()
        if c > 1
    ]
    earned: Counter[str] = Counter()
    for x in mpaid:
        earned[x[1]] += x[3]
    for y in vpaid:
        earned[y[1]] += y[2]
    for e in chain.events("Claimed"):
        if (
            int(e.amount)
            and sum(int(c.amount) for c in chain.events("Claimed") if c.account == e.account)
            > earned[e.account.lower()]
        ):
            twice.append(f"{names.get(e.account.lower(), e.account)} claimed more than it earned")
    checks.append(
        _check(
            "nothing_paid_twice",
            not twice,
            "; ".join(sorted(set(twice)))
            or "each round finalized once, each payout once, claims <= earnings",
        )
    )

    # payouts = the contract's settlement of the revealed scores (recomputed here)
    bad: list[str] = []
    for r in sorted(finalized):
        order = [e.miner for e in chain.committed_miners(r)]
        reveals = chain.revealed_scores(r)
        budget = next(int(e.budget) for e in chain.events("RoundFinalized", round=r))
        st = settle(
            [list(x.scores) for x in reveals],
            [x.weight for x in reveals],
            budget,
            bps,
            n_miners=len(order),
        )
        got_m = {a: (c, amt) for rr, a, c, amt in mpaid if rr == r}
        for m, med, pay in zip(order, st.medians, st.miner_pay, strict=True):
            c, amt = got_m.get(m.lower(), (0, 0))
            if (pay and (c, amt) != (med, pay)) or (not pay and amt):
                bad.append(
                    f"round {r} {names.get(m.lower(), m)}: paid {amt} at consensus {c}, settlement says {pay} at {med}"
                )
        got_v = {a: amt for rr, a, amt in vpaid if rr == r}
        for x, pay in zip(reveals, st.validator_pay, strict=True):
            if got_v.get(x.validator.lower(), 0) != pay:
                bad.append(
                    f"round {r} {names.get(x.validator.lower())}: paid {got_v.get(x.validator.lower(), 0)}, settlement says {pay}"
                )
    checks.append(
        _check(
            "payouts_match_consensus",
            not bad,
            "; ".join(bad) or f"rounds {sorted(finalized)} settled exactly as the revealed scores say",
        )
    )

    # every honest participant that was not the target is paid in every round
    def paid_m(r: int, a: str) -> int:
        return sum(amt for rr, aa, _c, amt in mpaid if rr == r and aa == a.lower())

    def paid_v(r: int, a: str) -> int:
        return sum(amt for rr, aa, amt in vpaid if rr == r and aa == a.lower())

    missing: list[str] = []
    for r in rounds:
        committed = {e.miner.lower() for e in chain.committed_miners(r)}
        revealed = {e.validator.lower() for e in chain.revealed_scores(r)}
        for m in miners:
            if names[m.lower()] == target and r == fault_round:
                continue
            if m.lower() not in committed:
                missing.append(f"{names[m.lower()]} did not commit in round {r}")
            elif not paid_m(r, m):
                missing.append(f"{names[m.lower()]} committed but was not paid in round {r}")
        for v in validators:
            if names[v.lower()] == target and r == fault_round:
                continue
            if v.lower() not in revealed:
                missing.append(f"{names[v.lower()]} did not reveal in round {r}")
            elif not paid_v(r, v):
                missing.append(f"{names[v.lower()]} revealed but was not paid in round {r}")
    checks.append(
        _check(
            "honest_paid_every_round",
            not missing,
            "; ".join(missing) or f"every non-target participant paid in rounds {rounds}",
        )
    )

    tnode = net.nodes.get(target) if target else None
    if tnode is not None:
        a = tnode.address.lower()
        committed = {e.miner.lower() for e in chain.committed_miners(fault_round)}
        if sc.name in ("stall-miner", "corrupt-miner"):
            amt = paid_m(fault_round, a)
            checks.append(
                _check("bad_peer_earned_nothing", amt == 0, f"{target} paid {amt} in round {fault_round}")
            )
        elif tnode.role == "miner":
            fetched = False
            for v in (n for n in net.nodes if n.startswith("validator")):
                vd = (net.get(v, f"/verdicts/{fault_round}") or {}).get(tnode.address) or {}
                fetched |= bool(vd) and vd.get("stage") not in ("commit", "fetch", "digest")
            completed = a in committed and fetched
            amt = paid_m(fault_round, a)
            checks.append(_check("target_paid_if_it_completed", amt > 0 if completed else True,
                                 f"{target} {'completed' if completed else 'did not complete'} round {fault_round} "
                                 f"(committed: {a in committed}, update fetched: {fetched}); paid {amt}"))  # fmt: skip
        else:
            revealed = {e.validator.lower() for e in chain.revealed_scores(fault_round)}
            amt = paid_v(fault_round, a)
            ok = amt > 0 if a in revealed else True
            checks.append(_check("target_paid_if_it_completed", ok,
                                 f"{target} {'revealed' if a in revealed else 'did not reveal'} in round "
                                 f"{fault_round}; paid {amt}"))  # fmt: skip

    # recovery within one round: the round after the fault settled and certified, the target in it and paid
    nxt = fault_round + 1
    certified = chain.checkpoint(nxt + 1) != b"\0" * 32
    rec_ok = finalized.get(nxt, 0) == 1 and certified
    detail = f"round {nxt} finalized: {finalized.get(nxt, 0) == 1}, theta_{nxt + 1} certified: {certified}"
    if tnode is not None:
        amt = paid_m(nxt, tnode.address) if tnode.role == "miner" else paid_v(nxt, tnode.address)
        rec_ok = rec_ok and amt > 0
        detail += f", {target} paid {amt / 1e18:.2f} in round {nxt}"
    checks.append(_check("recovered_within_one_round", rec_ok, detail))

    slashed = [
        f"{names.get(e.target.lower(), e.target)} ({int(e.amount) / 1e18:.1f})"
        for e in chain.events("Slashed")
    ]
    checks.append(_check("nobody_slashed", not slashed, ", ".join(slashed) or "no Slashed event"))

    found: list[str] = []
    lost: list[str] = []
    for who, pattern in sc.log_patterns:
        hits = []
        for name, n in sorted(net.nodes.items()):
            if not re.fullmatch(who.replace("*", ".*"), name):
                continue
            text = n.log_path.read_text(errors="replace") if n.log_path.exists() else ""
            m = re.search(pattern, text)
            if m:
                line = text[text.rfind("\n", 0, m.start()) + 1 : text.find("\n", m.start())]
                hits.append(f"{name}: {line.strip()[:160]}")
        (found if hits else lost).append(hits[0] if hits else f"{who}: no line matching /{pattern}/")
    checks.append(_check("logs_say_what_happened", not lost, "; ".join(found + lost)))
    return checks


#: Verdict metrics of the largest honest differences a validator measured (``validator.verify``).
REPLAY_METRICS = ("replay_param_rel_diff", "replay_moment_rel_diff", "ef_rel_err", "ef_after_rel_err")


def _validator_names(net: Devnet) -> list[str]:
    return sorted(n for n, node in net.nodes.items() if node.role == "validator")


def _merged_digests(net: Devnet, r: int, node_env: dict[str, dict[str, str]]) -> list[str]:
    """Each validator's merged theta_{r+1} digest and whether it signed it, for a report line; the first
    line says whether they differ."""
    got: dict[str, str | None] = {}
    lines = []
    for v in _validator_names(net):
        summary = {int(x.get("round", -1)): x for x in (net.get(v, "/rounds") or []) if isinstance(x, dict)}
        digest = (summary.get(r) or {}).get("checkpoint")
        got[v] = digest
        signed = net.get(v, f"/signatures/{r}") is not None
        what = f"merged {digest}" if digest else "has not merged"
        lines.append(f"{v} ({setting_text(node_env.get(v, {}))}) {what}{', signed' if signed else ''}")
    digests = {d for d in got.values() if d}
    head = (
        "validators' checkpoint digests differ"
        if len(digests) > 1
        else "validators' checkpoint digests agree"
        if len(digests) == 1 and all(got.values())
        else "not every validator merged"
    )
    return [head + ": " + "; ".join(lines)]


def check_mixed_hardware(
    net: Devnet, sc: Scenario, first: int, last: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The checks of ``mixed-hardware`` and its figures: the money checks of :func:`check_run` (nothing
    paid twice, payouts as settled, every miner and validator paid every round, nobody slashed), then
    every round certified, the validators' merged digests equal, no honest verdict other than ``ok``, and
    every node's log naming the instruction set it ran under."""
    chain = net.chain
    env = net.cfg.node_env
    rounds = list(range(first, last + 1))
    checks = [
        c
        for c in check_run(net, sc, first, last)
        if c["name"] not in ("recovered_within_one_round", "logs_say_what_happened")
    ]

    certified = [r for r in rounds if chain.checkpoint(r + 1) != b"\0" * 32]
    missing = [r for r in rounds if r not in certified]
    detail = f"rounds certified / rounds run: {len(certified)}/{len(rounds)}"
    for r in missing:
        detail += f"; round {r} not certified: " + "; ".join(_merged_digests(net, r, env))
    checks.append(_check("every_round_certified", not missing, detail))

    differ = []
    agreed = []
    for r in rounds:
        line = _merged_digests(net, r, env)[0]
        if not line.startswith("validators' checkpoint digests agree"):
            differ.append(f"round {r}: {line}")
        else:
            summary = net.get(_validator_names(net)[0], "/rounds") or []
            agreed.append(next((str(x.get("checkpoint"))[:18] for x in summary if x.get("round") == r), "?"))
    checks.append(
        _check(
            "validators_merged_the_same_digest",
            not differ,
            "; ".join(differ)
            or f"rounds {rounds}: every validator merged the same digest ({', '.join(agreed)})",
        )
    )

    names = {n.address.lower(): name for name, n in net.nodes.items()}
    refused = []
    judged = replayed = 0
    worst: dict[str, tuple[float, str]] = {}
    for r in rounds:
        committed = [e.miner for e in chain.committed_miners(r)]
        for v in _validator_names(net):
            verdicts = {k.lower(): x for k, x in (net.get(v, f"/verdicts/{r}") or {}).items()}
            for m in committed:
                who = names.get(m.lower(), m)
                vd = verdicts.get(m.lower())
                if vd is None:
                    refused.append(f"{who} has no verdict of {v} in round {r}")
                    continue
                judged += 1
                metrics = vd.get("metrics") or {}
                replayed += bool(metrics.get("replayed_steps"))
                for k in REPLAY_METRICS:
                    x = metrics.get(k)
                    if isinstance(x, int | float) and x >= worst.get(k, (-1.0, ""))[0]:
                        worst[k] = (float(x), f"{who} by {v} in round {r}")
                if vd.get("stage") != "ok":
                    refused.append(
                        f"{who} ({setting_text(env.get(who, {}))}) refused at stage {vd.get('stage')} by {v} "
                        f"({setting_text(env.get(v, {}))}) in round {r}: {str(vd.get('reason'))[:200]}"
                    )
    checks.append(
        _check(
            "honest_miners_refused_0",
            not refused,
            "; ".join(refused)
            or f"honest miners refused: 0 ({judged} verdicts, all ok, {replayed} with a segment replay)",
        )
    )

    platforms: dict[str, str] = {}
    wrong = []
    for name, n in sorted(net.nodes.items()):
        text = n.log_path.read_text(errors="replace") if n.log_path.exists() else ""
        m = re.search(r"\((torch [^)]*CPU capability (\w+)[^)]*)\)", text)
        platforms[name] = m.group(1) if m else "not logged"
        want = env.get(name, {})
        if m is None:
            wrong.append(f"{name}: no CPU capability line in its log")
            continue
        if "ATEN_CPU_CAPABILITY" in want and m.group(2).lower() != want["ATEN_CPU_CAPABILITY"].lower():
            wrong.append(f"{name}: ran under {m.group(2)}, set {want['ATEN_CPU_CAPABILITY']}")
        for k in ("MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA"):
            if k in want and f"{k}={want[k]}" not in m.group(1):
                wrong.append(f"{name}: {k} not {want[k]}")
    checks.append(
        _check(
            "nodes_ran_under_their_setting",
            not wrong,
            "; ".join(wrong) or "; ".join(f"{k}: {v}" for k, v in platforms.items()),
        )
    )
    from validator.config import ValidatorConfig

    tolerances = {
        "replay_param_rel_diff": ValidatorConfig.param_rel_tol,
        "replay_moment_rel_diff": ValidatorConfig.replay_rel_tol,
        "ef_rel_err": ValidatorConfig.ef_rel_tol,
        "ef_after_rel_err": ValidatorConfig.ef_rel_tol,
    }
    figures = {
        "rounds_run": len(rounds),
        "rounds_certified": len(certified),
        "honest_refused": len(refused),
        "slashed": len(chain.events("Slashed")),
        "verdicts": judged,
        "replayed_verdicts": replayed,
        "largest_honest_differences": {
            k: {"value": x, "where": where, "tolerance": tolerances[k]}
            for k, (x, where) in sorted(worst.items())
        },
        "node_platforms": platforms,
    }
    return checks, figures


# -- entry point ---------------------------------------------------------------------------------------


def run_faults(
    names: list[str],
    *,
    seed: int,
    rounds: int,
    workdir: Path,
    timeout: float = 900,
    miners: int = 3,
    inner_steps: int = 8,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the named scenarios one after another (each on a fresh devnet under ``workdir/NAME``) and
    write ``workdir/faults-report.json`` (the devnet's files under ``workdir/NAME/devnet``). Raises :class:`FaultsError` for an unknown name."""
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise FaultsError(f"unknown fault scenario(s) {unknown}; choose from {sorted(SCENARIOS)}")
    if rounds < 2:
        raise FaultsError("--rounds must be at least 2: the fault round and the round that must recover")
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    results: list[dict[str, Any]] = []
    for name in names:
        h = _Harness(SCENARIOS[name], seed, rounds, workdir / name, say, timeout, miners, inner_steps)
        try:
            results.append(h.execute())
        except (TesseraError, ProtocolError) as exc:
            h.note(f"scenario failed to run: {type(exc).__name__}: {exc}")
            results.append({"scenario": name, "seed": seed, "ok": False, "error": f"{type(exc).__name__}: {exc}",
                            "events": h.run.events, "checks": [], "point": h.run.point,
                            "wall_seconds": round(time.time() - t0, 1)})  # fmt: skip
        r = results[-1]
        say(f"== {name}: {'PASS' if r['ok'] else 'FAIL'} in {r['wall_seconds']:.0f}s")
    report = {
        "seed": seed,
        "rounds": rounds,
        "scenarios": results,
        "ok": all(r["ok"] for r in results),
        "wall_seconds": round(time.time() - t0, 1),
    }
    (workdir / "faults-report.json").write_text(json.dumps(report, indent=1, sort_keys=True, default=str))
    return report


def table(report: dict[str, Any]) -> str:
    """The report as a plain-text table (one row per scenario, failed checks spelled out)."""
    rows = [("scenario", "injected at", "down", "recovered", "checks", "wall")]
    notes: list[str] = []
    for r in report["scenarios"]:
        checks = r.get("checks", [])
        rec = next((c["ok"] for c in checks if c["name"] == "recovered_within_one_round"), None)
        inj = r.get("injected") or {}
        rows.append(
            (
                r["scenario"],
                f"r{inj.get('round', '?')} {inj.get('point', r.get('point', '?'))}",
                f"{(r.get('restored') or {})['down_s']}s" if "down_s" in (r.get("restored") or {}) else "-",
                "-" if rec is None else "yes" if rec else "NO",
                f"{sum(c['ok'] for c in checks)}/{len(checks)}" + ("" if r["ok"] else " FAIL"),
                f"{r['wall_seconds']:.0f}s",
            )
        )
        if r.get("poison"):
            notes.append(f"  {r['scenario']}: {json.dumps(r['poison'], sort_keys=True)}")
        fig = r.get("figures")
        if fig:
            notes.append(
                f"  {r['scenario']}: rounds certified {fig['rounds_certified']}/{fig['rounds_run']}, "
                f"honest miners refused {fig['honest_refused']}, slashed {fig['slashed']}; "
                f"{fig['replayed_verdicts']}/{fig['verdicts']} verdicts replayed segments"
            )
            for k, d in fig.get("largest_honest_differences", {}).items():
                notes.append(
                    f"  {r['scenario']}: largest honest {k} {d['value']:.3g} (tolerance {d['tolerance']:g}; {d['where']})"
                )
            for node, platform in fig.get("node_platforms", {}).items():
                notes.append(f"  {r['scenario']}: {node}: {platform}")
        for c in checks:
            if not c["ok"]:
                notes.append(f"  {r['scenario']}: {c['name']}: {c['detail']}")
        if r.get("error"):
            notes.append(f"  {r['scenario']}: {r['error']}")
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join([*lines, *notes])
