"""The scenarios that ``kill -9`` a process and restart it after the drawn delay: the chain
(``kill-chain``, back from its last periodic state dump, so to the nodes it is a reorg) and a node
(``kill-miner``, ``kill-validator``, back from its data directory)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

import httpx

from tessera.devnet.faults.base import FAULT_ROUND, POINTS, STARTUP_HOLD_S, FaultContext, Scenario
from tessera.devnet.network import Devnet

EVENTS = (
    "UpdateCommitted",
    "SeedCommitted",
    "SeedRevealed",
    "ScoresCommitted",
    "ScoresRevealed",
    "RoundFinalized",
    "CheckpointCertified",
)
"""The events counted before and after a chain restart, to name the transactions the restart lost."""


def snapshot(net: Devnet) -> Counter[str]:
    """How many of each of :data:`EVENTS` the chain holds from the fault round on."""
    c: Counter[str] = Counter()
    for name in EVENTS:
        for e in net.chain.events(name):
            if int(getattr(e, "round", FAULT_ROUND)) >= FAULT_ROUND:
                c[name] += 1
    return c


@dataclass
class KillChain(Scenario):
    """``kill -9`` of anvil, down for the drawn delay, restarted from its last periodic state dump: blocks
    mined since the dump are gone, and the nodes must re-send their lost transactions while the phase
    allows."""

    name: str = "kill-chain"
    summary: str = (
        "kill -9 anvil at a random phase, restart it from its last periodic dump (lost blocks = a reorg)"
    )
    target: str = "anvil"
    points: tuple[str, ...] = POINTS
    log_patterns: tuple[tuple[str, str], ...] = (("*", r"connection error|RPC unreachable"),)

    def set_up(self, net: Devnet, seed: int) -> None:
        """Periodic state dumps every 5 s, for the restart to come back from."""
        net.cfg.state_interval = 5

    def inject(self, ctx: FaultContext, round: int, point: str, block: int) -> None:
        """``kill -9`` anvil; after the drawn delay restart it from its last dump and note what was lost."""
        net = ctx.net
        before = snapshot(net)
        pid = net.anvil.pid
        net.kill_chain()
        ctx.note(f"kill -9 anvil (pid {pid}) at round {round} {point}, block {block}")
        ctx.run.injected["events_before"] = dict(before)

        def back() -> None:
            net.restart_chain()
            after_block = net.chain.block_number()
            after = snapshot(net)
            lost = {k: before[k] - after.get(k, 0) for k in before if before[k] > after.get(k, 0)}
            ctx.restored_now(
                down_s=ctx.down_seconds(),
                block=after_block,
                blocks_lost=max(0, block - after_block),
                events_lost=lost,
            )
            ctx.note(
                f"anvil restarted from its last dump at block {after_block}: {block - after_block} blocks "
                f"and these transactions' events lost: {lost or 'none'}"
            )

        ctx.later(ctx.run.delay_s, back, "restart anvil")


@dataclass
class KillNode(Scenario):
    """``kill -9`` of the target node, restarted after the drawn delay from its data directory; the
    fast-forward waits while it starts (:meth:`holds_chain`)."""

    target: str = "miner1"
    points: tuple[str, ...] = POINTS

    def inject(self, ctx: FaultContext, round: int, point: str, block: int) -> None:
        """``kill -9`` the target node; after the drawn delay restart it from its data directory."""
        net, target = ctx.net, self.target
        proc = net.nodes[target].proc
        pid = proc.pid if proc is not None else None
        net.kill(target)
        ctx.note(f"kill -9 {target} (pid {pid}) at round {round} {point}, block {block}")

        def back() -> None:
            net.restart(target)
            ctx.restored_now(down_s=ctx.down_seconds())
            ctx.note(f"{target} restarted from its data directory")

        ctx.later(ctx.run.delay_s, back, f"restart {target}")

    def holds_chain(self, ctx: FaultContext) -> bool:
        """Whether the restarted node is still starting (its API not up yet, at most
        :data:`STARTUP_HOLD_S`): the fast-forward then waits, as a real phase (minutes) outlasts a restart;
        without it the devnet could mine past a whole commit phase while the node loads torch (seen with
        seed 7: ``kill-miner`` restarted during round 3's commit and missed it)."""
        restored = ctx.run.restored
        if not restored or time.time() - float(restored["at"]) > STARTUP_HOLD_S:
            return False
        node = ctx.net.nodes[self.target]
        try:
            ok = httpx.get(f"{node.url}/health", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            ok = False
        if ok and not restored.get("ready_s"):
            restored["ready_s"] = round(time.time() - float(restored["at"]), 1)
            ctx.note(f"{self.target} answers /health {restored['ready_s']}s after its restart")
        return not ok


def kill_miner() -> KillNode:
    """``kill-miner``: miner1, whose restart shows in its log as a second ``serving at``."""
    return KillNode(
        name="kill-miner",
        summary="kill -9 miner1 at a random phase, restart it after a delay",
        target="miner1",
        log_patterns=(("miner1", r"(?s)serving at.*serving at"),),
    )


def kill_validator() -> KillNode:
    """``kill-validator``: validator1, whose restart shows in its log as a second ``serving at``."""
    return KillNode(
        name="kill-validator",
        summary="kill -9 validator1 at a random phase, restart it after a delay",
        target="validator1",
        log_patterns=(("validator1", r"(?s)serving at.*serving at"),),
    )
