"""``poison-dht``: a stranger (plain hivemind client, no key on chain, no stake) joins the devnet's DHT and
stores junk, forged and replayed records over every round key (see :mod:`tessera.devnet.poison`); every
honest participant must still be paid in every round."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tessera.devnet.faults.base import FaultContext, Scenario, Where


@dataclass
class PoisonDht(Scenario):
    """The stranger poisons every round key from the fault round to the round after the last, again once
    each round's honest records exist (forgeries and replays of them)."""

    name: str = "poison-dht"
    summary: str = (
        "a stranger's plain hivemind client stores junk, forged and replayed records over every round key "
        "(1-year expiry) and announces signed records with a bad and a dead URL"
    )
    target: str = "dht"
    points: tuple[str, ...] = ("commit",)
    log_patterns: tuple[tuple[str, str], ...] = (
        ("validator*", r"http://127\.0\.0\.1:9\b"),  # the stranger's dead URL tried and skipped
    )
    stranger: Any = field(default=None, init=False, repr=False, compare=False)
    """The stranger's hivemind node (None until the fault)."""
    poison: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    """What the stranger stored and what the DHT refused (the report's ``poison``)."""
    poisoned: set[int] = field(default_factory=set, init=False, repr=False, compare=False)
    """Rounds poisoned again once their honest records existed."""

    def inject(self, ctx: FaultContext, round: int, point: str, block: int) -> None:
        """Start the stranger and poison every round key from ``round`` to the round after the last."""
        from tessera.devnet.poison import start_stranger

        self.stranger = start_stranger(ctx.net.dht.visible_maddrs())
        self.poison["stranger_stores"] = {}
        for rr in range(round, ctx.last_round + 2):
            self.poison_round(ctx, rr)

    def poison_round(self, ctx: FaultContext, round: int) -> None:
        """Every store of :func:`tessera.devnet.poison.poison_round` against ``round``."""
        from tessera.devnet.poison import poison_round

        net = ctx.net
        nodes = list(net.nodes.values())
        cid = net.chain.chain_id
        honest = net.dht.lookup(cid, round).records  # the bootstrap node reads as any honest node does
        said = poison_round(
            self.stranger, cid, round, [n.address for n in nodes], [n.url for n in nodes], honest
        )
        total = self.poison["stranger_stores"]
        for k, n in said.items():
            total[k] = total.get(k, 0) + n
        ctx.note(f"stranger poisoned round {round}: {dict(sorted(said.items()))}")

    def restore(self, ctx: FaultContext, where: Where) -> None:
        """Poison again once each round's honest records exist (forgeries and replays of them), to the
        last round; then the fault is over."""
        r, point = where
        if point != "commit" and r >= ctx.fault_round and r not in self.poisoned:
            self.poisoned.add(r)
            self.poison_round(ctx, r)
            self.poison_round(ctx, r + 1)
            if r >= ctx.last_round:
                ctx.restored_now(round=r, point=point)

    def finish(self, ctx: FaultContext) -> None:
        """What the bootstrap node's record validator and each node's DHT refused."""
        net = ctx.net
        if self.stranger is None or not hasattr(net.dht, "validator_stats"):
            return
        self.poison["bootstrap_dht_validator"] = net.dht.validator_stats()
        ctx.note(f"bootstrap DHT node's record validator: {self.poison['bootstrap_dht_validator']}")
        self.poison["refused_at_node"] = {
            n: (net.get(n, "/status") or {}).get("dht_refused_at_node") for n in net.nodes
        }
        ctx.note(f"records each node's DHT refused: {self.poison['refused_at_node']}")

    def stop(self) -> None:
        """Shut the stranger down."""
        if self.stranger is not None:
            self.stranger.shutdown()

    def report(self) -> dict[str, Any]:
        """``poison``: what the stranger stored and what was refused."""
        return {"poison": self.poison} if self.poison else {}
