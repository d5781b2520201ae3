"""The scenarios that spoil a node's ports at a :class:`~tessera.devnet.proxy.FaultProxy` in front of
them for about a round: ``cut-validator`` (its chain RPC and HTTP ports closed, a blocked port),
``stall-miner`` and ``corrupt-miner`` (its public port stalls, or flips a byte of what it serves)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from tessera.devnet.faults.base import POINTS, FaultContext, Scenario, Where
from tessera.devnet.faults.checks import Check, Payouts, bad_peer_earned_nothing
from tessera.devnet.network import Devnet
from tessera.devnet.proxy import ProxyMode


@dataclass
class PortFault(Scenario):
    """A fault at the proxies in front of the target's ports, lifted (every proxy back to ``pass``) once
    the fault round is finalized (:meth:`lifts`)."""

    def lifts(self, finalized: bool, elapsed: float) -> bool:
        """Whether to open the ports again: the fault round is ``finalized``, ``elapsed`` seconds after the
        fault."""
        return finalized

    def restore(self, ctx: FaultContext, where: Where) -> None:
        """Open the proxies again once :meth:`lifts` says so."""
        r, point = where
        elapsed = time.time() - ctx.injected_at
        finalized = r > ctx.fault_round or (r == ctx.fault_round and point == "certify")
        if not self.lifts(finalized, elapsed):
            return
        for p in self.proxies.values():
            p.set_mode(ProxyMode.PASS)
        ctx.restored_now(down_s=round(elapsed, 1), round=r, point=point)
        ctx.note(f"{self.target}'s ports open again after {elapsed:.0f}s (round {r} {point})")


@dataclass
class CutValidator(PortFault):
    """validator1's chain RPC and HTTP API behind proxies that close ("blocked port") from the fault
    until the fault round is finalized and 30 s have passed (or 120 s in any case)."""

    name: str = "cut-validator"
    summary: str = "close validator1's chain RPC and HTTP ports (a blocked port) for about a round"
    target: str = "validator1"
    points: tuple[str, ...] = POINTS[:4]
    log_patterns: tuple[tuple[str, str], ...] = (("validator1", r"connection error|RPC unreachable"),)

    def set_up(self, net: Devnet, seed: int) -> None:
        """Proxies in front of the target's chain RPC and HTTP API."""
        self.front(net, self.target, "rpc")
        self.front(net, self.target, "http")

    def inject(self, ctx: FaultContext, round: int, point: str, block: int) -> None:
        """Close the target validator's chain RPC and HTTP ports."""
        for p in self.proxies.values():
            p.set_mode(ProxyMode.BLOCK)
        ctx.note(
            f"{self.target} cut off (chain RPC and HTTP ports closed) at round {round} {point}, block {block}"
        )

    def lifts(self, finalized: bool, elapsed: float) -> bool:
        """After the fault round is finalized and 30 s at least, or after 120 s in any case."""
        return (finalized and elapsed >= 30) or elapsed >= 120


@dataclass
class SpoilPeer(PortFault):
    """The target miner's public port in :attr:`mode` (``stall`` or ``corrupt``) for the fault round;
    the target must earn nothing for that round (``bad_peer_earned_nothing``)."""

    target: str = "miner1"
    points: tuple[str, ...] = POINTS[:2]
    mode: ProxyMode = ProxyMode.STALL

    def set_up(self, net: Devnet, seed: int) -> None:
        """A proxy in front of the target's public HTTP API."""
        self.front(net, self.target, "http")

    def inject(self, ctx: FaultContext, round: int, point: str, block: int) -> None:
        """Make the target miner's public port stall or corrupt."""
        self.proxies["http"].set_mode(self.mode)
        ctx.note(
            f"{self.target}'s public port set to {self.mode.value} at round {round} {point}, block {block}"
        )

    def target_check(self, net: Devnet, paid: Payouts, fault_round: int) -> Check:
        """A stalling or corrupting peer earned nothing for the fault round."""
        return bad_peer_earned_nothing(net, paid, self.target, fault_round)


def stall_miner() -> SpoilPeer:
    """``stall-miner``: the validators must log the stalled fetch."""
    return SpoilPeer(
        name="stall-miner",
        summary="miner1's public port accepts, then trickles a byte a second and never answers, for a round",
        log_patterns=(("validator*", r"stalling peer|stalled a fetch"),),
        mode=ProxyMode.STALL,
    )


def corrupt_miner() -> SpoilPeer:
    """``corrupt-miner``: the validators must log the bad blob."""
    return SpoilPeer(
        name="corrupt-miner",
        summary="miner1's public port flips a byte of what it serves, for a round",
        log_patterns=(("validator*", r"served a bad blob|hash to"),),
        mode=ProxyMode.CORRUPT,
    )
