"""What every fault scenario is: the :class:`Scenario` base class (the devnet it runs on, and its
behaviour: set-up, inject, restore, checks, each a method a scenario overrides), the narrow
:class:`FaultContext` its behaviour works on, the phase constants the driver times faults by, and the
record of what happened (:class:`FaultRun`).

A scenario never reaches into the driver: it is given the devnet, the fault's record, the rounds the
checks cover and two verbs (``note``, ``later``), and it owns whatever it starts (proxies, processes).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

from tessera.devnet.config import DevnetConfig
from tessera.devnet.faults.checks import (
    Check,
    Payouts,
    check_run,
    read_payouts,
    target_paid_if_it_completed,
)
from tessera.devnet.faults.figures import rounds_lost, slowest_honest, verification_times
from tessera.devnet.network import Devnet
from tessera.devnet.proxy import FaultProxy
from tessera.errors import TesseraError

#: Where in the fault round a fault may be injected: the four timed phases, and ``certify`` (round F was
#: finalized, theta_{F+1} not certified yet: validators are merging and gathering signatures).
POINTS = ("commit", "reveal", "score-commit", "score-reveal", "certify")
PHASE_ORDER = ("commit", "reveal", "score-commit", "score-reveal", "finalize", "certify")
"""Every point of a round in time order (``finalize``: finalized, between score-reveal and certify)."""
FAULT_ROUND = 2
"""Chain round of the fault on a fresh devnet (round 1 is the join round)."""
STARTUP_HOLD_S = 120.0
"""Seconds the fast-forward waits, at most, for a restarted node's API to come up."""
CERTIFY_STALL_S = 180.0
"""Seconds a round may stay finalized and uncertified in a scenario without a fault (``mixed-hardware``)
before the harness stops and reports why (merging and signing take seconds)."""

Where = tuple[int, str]
"""(round, point) of the chain: a point of :data:`PHASE_ORDER`."""
Pending = tuple[float, Callable[[], None], str]
"""(when, action, what): an action the driver runs once its time has come (a restart)."""


class FaultsError(TesseraError):
    """A fault scenario could not be run (the devnet failed or a deadline passed)."""


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


@dataclass
class FaultContext:
    """What a scenario's behaviour works on: the devnet, the fault's record, the rounds its checks cover,
    and two verbs, :attr:`note` (a line to the log and report) and :meth:`later` (an action the driver
    runs when due). The driver (:class:`tessera.devnet.faults.harness.Harness`) owns it."""

    net: Devnet
    run: FaultRun
    seed: int
    rounds: int
    """Training rounds from the fault round on."""
    note: Callable[[str], None]
    fault_round: int = FAULT_ROUND
    """Chain round of the fault (moves when the drawn point went by unseen)."""
    injected_at: float = 0.0
    """When the fault was injected (0: not yet)."""
    restored: bool = False
    """Whether the fault is over (lifted, or lasting the whole scenario and nothing left to do)."""
    pending: list[Pending] = field(default_factory=list)

    @property
    def last_round(self) -> int:
        """The last round the scenario runs and checks."""
        return self.fault_round + self.rounds - 1

    def later(self, delay_s: float, action: Callable[[], None], what: str) -> None:
        """Run ``action`` ``delay_s`` seconds from now (the driver polls about every 0.25 s)."""
        self.pending.append((time.time() + delay_s, action, what))

    def down_seconds(self) -> float:
        """Seconds since the fault was injected (to 0.1 s)."""
        return round(time.time() - float(self.run.injected["at"]), 1)

    def restored_now(self, **record: Any) -> None:
        """The fault is over: ``record`` (with the time) is the report's ``restored``."""
        self.run.restored = {"at": time.time(), **record}
        self.restored = True


@dataclass
class Scenario:
    """One fault: the devnet it runs on (the fields) and its behaviour (the methods). A subclass declares
    its name and settings as field defaults and overrides the behaviour it has; the registry
    (:data:`tessera.devnet.faults.scenarios.SCENARIOS`) holds one instance per name, and the driver runs
    a :meth:`fresh` copy of it, so per-run state lives on the copy."""

    name: str = ""
    summary: str = ""
    target: str = "none"
    """Node name, or what else the fault strikes (``anvil``, ``dht``, ``sybils``, ``validators``)."""
    points: tuple[str, ...] = ("commit",)
    """Where it may be injected (drawn with the seed)."""
    log_patterns: tuple[tuple[str, str], ...] = ()
    """(node name or ``*`` for any node, regex) that must occur in the logs after the fault."""
    validators: int = 2
    """Validator processes of its devnet."""
    honest_miners: int | None = None
    """Honest miner processes (None: ``--miners``)."""
    sybils: int = 0
    """Extra miners, the scenario's cheats (``sybil0``.. in the report), started after the honest ones."""
    block_time: float = 1.0
    """Seconds between anvil's blocks."""
    fast_forward: bool = True
    """False: every phase lasts its whole window (wall-clock deadlines, as on a real chain)."""
    windows: tuple[int, int, int, int] | None = None
    """Blocks of COMMIT, REVEAL, SCORE_COMMIT and SCORE_REVEAL as they are (None: sized from the work
    measured on this machine, which on a loaded one makes a round of 2-s blocks last half an hour)."""
    miner_stake: int | None = None
    """Tokens the devnet's miners bond, its minimum (None: the deployment default). The audit rate follows
    from it (issue 26's deterrence formula): 100 tokens audits every miner, so every miner's transcript
    states are fetched; at the default stake (0.40%) almost none are."""
    proxies: dict[str, FaultProxy] = field(default_factory=dict, init=False, repr=False, compare=False)
    """The proxies this run put in front of nodes (by role: ``rpc``, ``http`` or a node name)."""
    cheats: list[str] = field(default_factory=list, init=False, repr=False, compare=False)
    """This run's sybils' node names (not honest participants; checked by the scenario)."""

    injects: ClassVar[bool] = True
    """False: nothing is injected; the scenario is the devnet's set-up (``mixed-hardware``)."""

    def fresh(self) -> Self:
        """A copy for one run, its per-run state empty."""
        return dataclasses.replace(self)

    # -- set-up ----------------------------------------------------------------------------------------
    def devnet_config(self, workdir: Path, miners: int, inner_steps: int) -> DevnetConfig:
        """The devnet of this scenario under ``workdir/devnet`` (``miners``: ``--miners``)."""
        honest = self.honest_miners or miners
        self.cheats = [f"miner{honest + i}" for i in range(self.sybils)]
        cfg = DevnetConfig(
            workdir=workdir / "devnet",
            miners=honest + self.sybils,
            validators=self.validators,
            inner_steps=inner_steps,
            block_time=self.block_time,
            fast_forward=self.fast_forward,
            miner_stake=self.miner_stake,
        )
        if self.windows is not None:
            cfg.size_phases = False
            cfg.commit_blocks, cfg.reveal_blocks, cfg.score_commit_blocks, cfg.score_reveal_blocks = (
                self.windows
            )
        return cfg

    def set_up(self, net: Devnet, seed: int) -> None:
        """Before the devnet starts: change its configuration, put proxies in front of its nodes."""

    def front(self, net: Devnet, node: str, port: str, key: str | None = None) -> FaultProxy:
        """A started proxy in front of ``node``'s chain RPC (``port`` ``rpc``) or public HTTP API
        (``http``), kept in :attr:`proxies` under ``key`` (default: ``port``)."""
        proxy = FaultProxy(f"{node}-{port}").start()
        (net.rpc_fronts if port == "rpc" else net.http_fronts)[node] = proxy
        self.proxies[key or port] = proxy
        return proxy

    # -- timing ----------------------------------------------------------------------------------------
    def strikes_when_seen(self, point: str) -> bool:
        """Whether the fault strikes as soon as ``point`` is seen (no drawn offset): merging and
        signing (``certify``) take seconds."""
        return point == "certify"

    def ready(self, ctx: FaultContext, round: int) -> bool:
        """Whether the fault may strike now, at its point of ``round``."""
        return True

    def holds_chain(self, ctx: FaultContext) -> bool:
        """Whether the fast-forward must wait now (a node the fault restarted is still starting)."""
        return False

    # -- the fault -------------------------------------------------------------------------------------
    def inject(self, ctx: FaultContext, round: int, point: str, block: int) -> None:
        """Put the fault in, now (``round``, ``point``, ``block``: where the chain is)."""
        raise NotImplementedError(f"{type(self).__name__} injects nothing")

    def restore(self, ctx: FaultContext, where: Where) -> None:
        """Lift a lasting fault when its time has come (``where``: the chain now); a fault that lifts
        itself (a scheduled restart) or lasts the whole scenario does nothing here."""

    # -- checks ----------------------------------------------------------------------------------------
    def checks(self, ctx: FaultContext) -> tuple[list[Check], dict[str, Any]]:
        """The scenario's checks and figures: the money checks of :func:`check_run`, the scenario's own
        (:meth:`extra_checks`), and the verification times and rounds lost."""
        net, first, last = ctx.net, ctx.fault_round, ctx.last_round
        checks = check_run(net, self, first, last, cheats=self.cheats)
        paid = read_payouts(net)
        checks += self.extra_checks(ctx, paid)
        times = {r: verification_times(net, r) for r in range(first, last + 1)}
        figures = {
            "rounds_lost": rounds_lost(paid, first, last),
            "slowest_honest_verification": slowest_honest(times, {*self.cheats, self.target}),
            "verification": times,
        }
        return checks, figures

    def extra_checks(self, ctx: FaultContext, paid: Payouts) -> list[Check]:
        """The scenario's checks beside the money checks."""
        return []

    def target_check(self, net: Devnet, paid: Payouts, fault_round: int) -> Check:
        """The target node's outcome in the fault round (see :func:`target_paid_if_it_completed`)."""
        return target_paid_if_it_completed(net, paid, self.target, fault_round)

    # -- the end ---------------------------------------------------------------------------------------
    def finish(self, ctx: FaultContext) -> None:
        """After the checks, while the devnet still runs: read what the report adds (:meth:`report`)."""

    def stop(self) -> None:
        """Stop the processes the scenario started; the driver then stops the devnet and the proxies."""

    def report(self) -> dict[str, Any]:
        """The scenario's own fields in its report entry (e.g. ``poison``)."""
        return {}
