"""Issue 27's scenarios of ``tessera faults``: peers that are slow, frozen or unreachable, and a key run
twice, on a devnet with wall-clock phases (2-s blocks, no fast-forward), 3 validators and 4 honest miners
(:class:`SlowPeerScenario`).

- :class:`DripSybils` (``drip-sybils``): two more miners whose keys are ground to addresses below every
  honest one (validators that verify in address order meet them first) serve their transcript states
  :data:`DRIP_S` seconds late each (a :class:`~tessera.devnet.proxy.FaultProxy` in ``drip`` mode in
  front of their public port); they must earn nothing (:func:`cheats_earned_nothing`);
- :class:`FreezeAfterAnnounce` (``freeze-after-announce``): miner1's process group is SIGSTOPped the
  moment it serves its update in REVEAL and SIGCONTed :data:`FREEZE_S` seconds later;
- :class:`ValidatorRpcOutage` (``validator-rpc-outage``): validator1's chain RPC is a proxy closed for
  :data:`FREEZE_S` seconds from the start of SCORE_COMMIT (its verification); its verdicts must not be
  final for its own outage (:func:`own_errors_not_final`);
- :class:`SameKeyTwice` (``same-key-twice``): a second ``tessera miner run`` with miner1's key and its
  own data directory, which must stop with one clear error (:func:`twin_stopped`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eth_account import Account

from protocol.rounds.anvil import free_port
from tessera.devnet.faults.base import FaultContext, Scenario
from tessera.devnet.faults.checks import Check, Payouts, make_check
from tessera.devnet.faults.figures import node_name
from tessera.devnet.network import Devnet
from tessera.devnet.procs import signal_group
from tessera.devnet.proxy import ProxyMode
from validator.stages import Stage

SLOW_PEER_WINDOWS = (30, 10, 60, 8)
"""Issue 27's scenarios' phase windows in 2-s blocks: 60 s to train, 20 s to announce, 120 s to verify 6
miners on 3 validators sharing 2 loaded cores (about 7 s a miner each, measured by the sizing), 16 s to
reveal: a 216-s round."""
FREEZE_S = 30.0
"""Seconds ``freeze-after-announce`` keeps its miner stopped and ``validator-rpc-outage`` the RPC down."""
DRIP_S = 25.0
"""Seconds ``drip-sybils``' identities hold back each transcript state they serve."""
LOW_PREFIX = "0x00"
"""What a sybil's address starts with: below 7 random honest addresses but with odds of 1 in 37 (256
tries to grind, seconds; ``0x000`` took 2 minutes on this loaded machine)."""


def grind_key(seed: int, label: str, prefix: str = LOW_PREFIX) -> str:
    """A private key, drawn deterministically from ``seed`` and ``label``, whose address starts with
    ``prefix`` (about 256 tries for ``0x00``)."""
    for n in range(1 << 24):
        key = "0x" + hashlib.sha256(f"tessera.faults.sybil\0{seed}\0{label}\0{n}".encode()).hexdigest()
        if str(Account.from_key(key).address).lower().startswith(prefix):
            return key
    raise AssertionError("unreachable: no key in 2^24 tries")  # pragma: no cover


def seed_sybil_keys(workdir: Path, names: list[str], seed: int) -> None:
    """Start ``workdir`` (emptied) with a keys file holding the sybils' ground keys: the devnet keeps
    the keys it finds and draws the others (``tessera.devnet.network.Devnet`` with ``fresh=False``)."""
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    path = workdir / "devnet-keys.json"
    path.write_text(json.dumps({n: grind_key(seed, n) for n in names}, indent=1))
    os.chmod(path, 0o600)


def miner_served(net: Devnet, name: str, round: int) -> bool:
    """Whether miner ``name`` serves its update of ``round`` (its ``/rounds`` says ``served``)."""
    rec = (net.get(name, "/rounds") or {}).get(str(round)) or {}
    return bool(rec.get("status") == "served")


@dataclass
class SlowPeerScenario(Scenario):
    """Issue 27's devnet: 3 validators, 4 honest miners, 2-s blocks, wall-clock phases of
    :data:`SLOW_PEER_WINDOWS`."""

    validators: int = 3
    honest_miners: int | None = 4
    block_time: float = 2.0
    fast_forward: bool = False
    windows: tuple[int, int, int, int] | None = SLOW_PEER_WINDOWS


@dataclass
class DripSybils(SlowPeerScenario):
    """Two identities with low ground keys whose public ports drip their transcript states, audited
    every round (at the default stake their states are almost never asked for, and the sybils, training
    honestly, were paid: seed 107, b85a98f)."""

    name: str = "drip-sybils"
    summary: str = (
        f"two identities with keys ground to low addresses serve their transcript states {DRIP_S:.0f}s late"
    )
    target: str = "sybils"
    log_patterns: tuple[tuple[str, str], ...] = (
        ("validator*", r"over its budget|not served in time|stall|timed out"),
    )
    sybils: int = 2
    miner_stake: int | None = 100

    def set_up(self, net: Devnet, seed: int) -> None:
        """The sybils' ground keys in a devnet that is not wiped at start, and a proxy in front of each
        sybil's public port."""
        seed_sybil_keys(net.cfg.workdir, self.cheats, seed)
        net.cfg.fresh = False
        for name in self.cheats:
            self.front(net, name, "http", key=name)

    def inject(self, ctx: FaultContext, round: int, point: str, block: int) -> None:
        """Every sybil's public port holds back each transcript state from now on (to the end)."""
        for name, p in self.proxies.items():
            p.set_mode(ProxyMode.DRIP)
            ctx.note(f"{name}'s public port set to drip at round {round} {point}, block {block}")
        ctx.restored = True  # lasts the whole scenario: nothing to lift

    def extra_checks(self, ctx: FaultContext, paid: Payouts) -> list[Check]:
        """The sybils earned nothing."""
        return [cheats_earned_nothing(ctx.net, paid, self.cheats, ctx.fault_round, ctx.last_round)]


@dataclass
class FreezeAfterAnnounce(SlowPeerScenario):
    """miner1 stopped (SIGSTOP of its process group) right after it serves its update in REVEAL."""

    name: str = "freeze-after-announce"
    summary: str = (
        f"SIGSTOP miner1 (its process group) for {FREEZE_S:.0f}s right after it announces in REVEAL"
    )
    target: str = "miner1"
    points: tuple[str, ...] = ("reveal",)
    log_patterns: tuple[tuple[str, str], ...] = (
        ("validator*", r"over its budget|not served in time|stalled|timed out|unverified"),
    )

    def strikes_when_seen(self, point: str) -> bool:
        """Right after it announces: no drawn offset."""
        return True

    def ready(self, ctx: FaultContext, round: int) -> bool:
        """Once the target serves its update of ``round``."""
        return miner_served(ctx.net, self.target, round)

    def inject(self, ctx: FaultContext, round: int, point: str, block: int) -> None:
        """SIGSTOP the target's process group; SIGCONT it :data:`FREEZE_S` seconds later."""
        n = ctx.net.nodes[self.target]
        assert n.proc is not None
        signal_group(n.proc.pid, signal.SIGSTOP)
        ctx.note(f"SIGSTOP {self.target} (pid {n.proc.pid}) at round {round} {point}, block {block}")

        def thaw() -> None:
            assert n.proc is not None
            signal_group(n.proc.pid, signal.SIGCONT)
            ctx.restored_now(down_s=ctx.down_seconds())
            ctx.note(f"SIGCONT {self.target} after {ctx.run.restored['down_s']}s")

        ctx.later(FREEZE_S, thaw, f"SIGCONT {self.target}")


@dataclass
class ValidatorRpcOutage(SlowPeerScenario):
    """validator1's chain RPC, a proxy in front of anvil, closed for :data:`FREEZE_S` seconds during its
    verification."""

    name: str = "validator-rpc-outage"
    summary: str = (
        f"validator1's chain RPC (a proxy in front of anvil) closed for {FREEZE_S:.0f}s during verification"
    )
    target: str = "validator1"
    points: tuple[str, ...] = ("score-commit",)
    log_patterns: tuple[tuple[str, str], ...] = (("validator1", r"connection error|RPC unreachable"),)

    def set_up(self, net: Devnet, seed: int) -> None:
        """A proxy in front of the target's chain RPC."""
        self.front(net, self.target, "rpc")

    def inject(self, ctx: FaultContext, round: int, point: str, block: int) -> None:
        """Close the target validator's chain RPC port; open it again :data:`FREEZE_S` seconds later."""
        proxy = self.proxies["rpc"]
        proxy.set_mode(ProxyMode.BLOCK)
        ctx.note(f"{self.target}'s chain RPC closed at round {round} {point}, block {block}")

        def reopen() -> None:
            proxy.set_mode(ProxyMode.PASS)
            ctx.restored_now(down_s=ctx.down_seconds(), block=ctx.net.chain.block_number())
            ctx.note(f"{self.target}'s chain RPC open again after {ctx.run.restored['down_s']}s")

        ctx.later(FREEZE_S, reopen, f"reopen {self.target}'s RPC")

    def extra_checks(self, ctx: FaultContext, paid: Payouts) -> list[Check]:
        """Its verdicts are not final for its own outage."""
        return [own_errors_not_final(ctx.net, self.target, ctx.fault_round)]


@dataclass
class SameKeyTwice(SlowPeerScenario):
    """A second ``tessera miner run`` with miner1's key and its own data directory, port and log. The
    twin stops at its first check, before it commits: the original sees no conflict (no log pattern)."""

    name: str = "same-key-twice"
    summary: str = (
        "miner1's key started a second time with its own data dir: it must stop with one clear error"
    )
    target: str = "twin"
    twin: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False, compare=False)
    twin_log: Path | None = field(default=None, init=False, repr=False, compare=False)

    def inject(self, ctx: FaultContext, round: int, point: str, block: int) -> None:
        """Start the twin."""
        src = ctx.net.nodes["miner1"]
        cfg = ctx.net.cfg
        args = list(src.args)
        args[args.index("--data-dir") + 1] = str(cfg.workdir / "miner1-twin")
        args[args.index("--port") + 1] = str(free_port())
        self.twin_log = cfg.workdir / "logs" / "miner1-twin.log"
        env = {**os.environ, **src.env, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": str(cfg.threads)}
        with open(self.twin_log, "ab") as logf:
            self.twin = subprocess.Popen(
                [sys.executable, "-m", "tessera", "-v", "miner", "run", *args],
                env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        ctx.note(f"second miner1 started (pid {self.twin.pid}) at round {round} {point}, block {block}")
        ctx.restored = True

    def extra_checks(self, ctx: FaultContext, paid: Payouts) -> list[Check]:
        """The twin stopped with one clear error."""
        return [twin_stopped(self.twin, self.twin_log)]

    def stop(self) -> None:
        """Stop the twin if it still runs (it should have stopped itself)."""
        if self.twin is not None and self.twin.poll() is None:
            signal_group(self.twin.pid, signal.SIGKILL)
            self.twin.wait(timeout=30)


def cheats_earned_nothing(net: Devnet, paid: Payouts, cheats: list[str], first: int, last: int) -> Check:
    """Each cheat was paid nothing from the fault round on."""
    got = {c: sum(paid.miner(r, net.nodes[c].address) for r in range(first, last + 1)) for c in cheats}
    return make_check(
        "cheats_earned_nothing",
        not any(got.values()),
        ", ".join(f"{c} paid {v / 1e18:.2f} in rounds {first}..{last}" for c, v in got.items()),
    )


def own_errors_not_final(net: Devnet, target: str, round: int) -> Check:
    """The cut validator scored no miner 0 for its own outage: none of its verdicts of ``round`` ended
    at the ``error`` stage or with an RPC error as the reason."""
    verdicts = net.get(target, f"/verdicts/{round}") or {}
    bad = [
        f"{node_name(net, m)}: {v.get('stage')} ({str(v.get('reason', ''))[:80]})"
        for m, v in verdicts.items()
        if v.get("stage") == Stage.ERROR or re.search(r"RPC|connection", str(v.get("reason", "")))
    ]
    return make_check(
        "own_errors_not_final",
        bool(verdicts) and not bad,
        "; ".join(bad) or f"{target}: {len(verdicts)} verdicts in round {round}, none for its own outage",
    )


def twin_stopped(twin: Any, twin_log: Path | None) -> Check:
    """The second instance exited (status 2) with one line naming the key in use, and did not retry."""
    text = twin_log.read_text(errors="replace") if twin_log is not None else ""
    lines = [ln for ln in text.splitlines() if re.search(r"KeyInUse|key in use", ln, re.I)]
    code = None if twin is None else twin.poll()
    ok = code == 2 and 1 <= len(lines) <= 2  # the error, and the CLI's one-line report of it
    return make_check(
        "twin_stopped",
        ok,
        f"exit status {code}; {len(lines)} key-in-use lines: "
        + " | ".join(ln.strip()[:140] for ln in lines[:3]),
    )
