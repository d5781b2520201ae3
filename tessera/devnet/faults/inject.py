"""Injecting each scenario's fault into a running devnet and taking it away again.

:func:`inject` dispatches on the scenario's name to one injector; a kill schedules its restart on the
harness's pending list, a proxy fault is lifted by :func:`maybe_restore` once the fault round is over.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from tessera.devnet.faults.scenarios import FAULT_ROUND
from tessera.devnet.faults.slowpeers import inject_drip, inject_freeze, inject_rpc_outage, inject_twin
from tessera.devnet.network import Devnet
from tessera.devnet.proxy import ProxyMode

if TYPE_CHECKING:
    from tessera.devnet.faults.harness import Harness

_EVENTS = (
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
    """How many of each of :data:`_EVENTS` the chain holds from the fault round on."""
    c: Counter[str] = Counter()
    for name in _EVENTS:
        for e in net.chain.events(name):
            if int(getattr(e, "round", FAULT_ROUND)) >= FAULT_ROUND:
                c[name] += 1
    return c


def inject(h: Harness, round: int, point: str) -> None:
    """Inject ``h``'s fault now, at ``round`` and ``point`` (the fault round moves to ``round``)."""
    block = h.net.chain.block_number()
    h.fault_round, h.last_round = round, round + h.rounds - 1
    h.run.injected.update({"round": round, "point": point, "block": block, "at": time.time()})
    _INJECTORS.get(h.sc.name, _spoil_peer)(h, round, point, block)


def _down_seconds(h: Harness) -> float:
    """Seconds since the fault was injected (to 0.1 s): how long the killed process was down."""
    return round(time.time() - h.run.injected["at"], 1)


def _kill_chain(h: Harness, round: int, point: str, block: int) -> None:
    """``kill -9`` anvil; after the drawn delay restart it from its last dump and note what was lost."""
    net = h.net
    before = snapshot(net)
    pid = net.anvil.pid
    net.kill_chain()
    h.note(f"kill -9 anvil (pid {pid}) at round {round} {point}, block {block}")
    h.run.injected["events_before"] = dict(before)

    def back() -> None:
        net.restart_chain()
        after_block = net.chain.block_number()
        after = snapshot(net)
        lost = {k: before[k] - after.get(k, 0) for k in before if before[k] > after.get(k, 0)}
        h.run.restored = {
            "at": time.time(),
            "down_s": _down_seconds(h),
            "block": after_block,
            "blocks_lost": max(0, block - after_block),
            "events_lost": lost,
        }
        h.note(
            f"anvil restarted from its last dump at block {after_block}: {block - after_block} blocks "
            f"and these transactions' events lost: {lost or 'none'}"
        )
        h.restored = True

    h.pending.append((time.time() + h.run.delay_s, back, "restart anvil"))


def _kill_node(h: Harness, round: int, point: str, block: int) -> None:
    """``kill -9`` the target node; after the drawn delay restart it from its data directory."""
    net, target = h.net, h.sc.target
    proc = net.nodes[target].proc
    pid = proc.pid if proc is not None else None
    net.kill(target)
    h.note(f"kill -9 {target} (pid {pid}) at round {round} {point}, block {block}")

    def back() -> None:
        net.restart(target)
        h.run.restored = {"at": time.time(), "down_s": _down_seconds(h)}
        h.note(f"{target} restarted from its data directory")
        h.restored = True

    h.pending.append((time.time() + h.run.delay_s, back, f"restart {target}"))


def _poison_dht(h: Harness, round: int, point: str, block: int) -> None:
    """Start the stranger and poison every round key from ``round`` to the round after the last."""
    from tessera.devnet.poison import start_stranger

    h.stranger = start_stranger(h.net.dht.visible_maddrs())
    h.poison["stranger_stores"] = {}
    for rr in range(round, h.last_round + 2):
        poison(h, rr)


def _cut_validator(h: Harness, round: int, point: str, block: int) -> None:
    """Close the target validator's chain RPC and HTTP ports."""
    for p in h.proxies.values():
        p.set_mode(ProxyMode.BLOCK)
    h.note(f"{h.sc.target} cut off (chain RPC and HTTP ports closed) at round {round} {point}, block {block}")


def _spoil_peer(h: Harness, round: int, point: str, block: int) -> None:
    """Make the target miner's public port stall (``stall-miner``) or corrupt (``corrupt-miner``)."""
    mode = ProxyMode.STALL if h.sc.name == "stall-miner" else ProxyMode.CORRUPT
    h.proxies["http"].set_mode(mode)
    h.note(f"{h.sc.target}'s public port set to {mode.value} at round {round} {point}, block {block}")


_INJECTORS: dict[str, Callable[[Harness, int, str, int], None]] = {
    "drip-sybils": inject_drip,
    "freeze-after-announce": inject_freeze,
    "validator-rpc-outage": inject_rpc_outage,
    "same-key-twice": inject_twin,
    "kill-chain": _kill_chain,
    "kill-miner": _kill_node,
    "kill-validator": _kill_node,
    "poison-dht": _poison_dht,
    "cut-validator": _cut_validator,
}
"""Each scenario's injector; the others (``stall-miner``, ``corrupt-miner``) spoil the peer's port."""


def poison(h: Harness, round: int) -> None:
    """poison-dht: every store of :func:`tessera.devnet.poison.poison_round` against ``round``."""
    from tessera.devnet.poison import poison_round

    nodes = list(h.net.nodes.values())
    cid = h.net.chain.chain_id
    honest = h.net.dht.lookup(cid, round).records  # the bootstrap node reads as any honest node does
    said = poison_round(h.stranger, cid, round, [n.address for n in nodes], [n.url for n in nodes], honest)
    total = h.poison["stranger_stores"]
    for k, n in said.items():
        total[k] = total.get(k, 0) + n
    h.note(f"stranger poisoned round {round}: {dict(sorted(said.items()))}")


def maybe_restore(h: Harness, where: tuple[int, str]) -> None:
    """Lift a lasting fault when its time has come: re-poison each new round through the last one
    (``poison-dht``), or open the proxies again once the fault round is finalized (a cut validator also
    after 30 s at least, or after 120 s in any case). Kills restore themselves (pending restarts)."""
    if h.sc.name == "poison-dht":
        _repoison(h, where)
        return
    if h.sc.name not in ("cut-validator", "stall-miner", "corrupt-miner"):
        return
    r, point = where
    elapsed = time.time() - h.injected_at
    finalized = r > h.fault_round or (r == h.fault_round and point == "certify")
    if h.sc.name == "cut-validator":
        ready = (finalized and elapsed >= 30) or elapsed >= 120
    else:
        ready = finalized
    if not ready:
        return
    for p in h.proxies.values():
        p.set_mode(ProxyMode.PASS)
    h.run.restored = {"at": time.time(), "down_s": round(elapsed, 1), "round": r, "point": point}
    h.note(f"{h.sc.target}'s ports open again after {elapsed:.0f}s (round {r} {point})")
    h.restored = True


def _repoison(h: Harness, where: tuple[int, str]) -> None:
    """poison-dht: again once each round's honest records exist (forgeries and replays of them), to the
    last round."""
    r, point = where
    if point != "commit" and r >= h.fault_round and r not in h.poisoned:
        h.poisoned.add(r)
        poison(h, r)
        poison(h, r + 1)
        if r >= h.last_round:
            h.run.restored = {"at": time.time(), "round": r, "point": point}
            h.restored = True
