"""The figures a fault scenario reports beside its checks: rounds lost and how long each verification
took against its budget (issue 27's slow peers)."""

from __future__ import annotations

from typing import Any

from tessera.devnet.faults.checks import Payouts
from tessera.devnet.network import Devnet


def rounds_lost(paid: Payouts, first: int, last: int) -> list[int]:
    """Rounds from ``first`` to ``last`` in which no miner was paid (no scores committed, or none
    finalized)."""
    return [r for r in range(first, last + 1) if not any(x[0] == r and x[3] for x in paid.miner_paid)]


def node_name(net: Devnet, address: str) -> str:
    """The devnet name of the node at ``address`` (else the address's first characters)."""
    return next((n for n, p in net.nodes.items() if p.address.lower() == address.lower()), address[:10])


def verification_times(net: Devnet, round: int) -> dict[str, Any]:
    """Each validator's verdicts of ``round`` as ``/verdicts`` shows them: stage, wall seconds to the
    verdict and the miner's budget (``metrics.verify_wall_seconds`` and ``metrics.budget_s``, where the
    validator schedules against the deadline), else the sum of its stage timings."""
    out: dict[str, Any] = {}
    for v in (n for n in net.nodes if n.startswith("validator")):
        for m, vd in (net.get(v, f"/verdicts/{round}") or {}).items():
            metrics, timings = vd.get("metrics") or {}, vd.get("timings") or {}
            out[f"{v}/{node_name(net, m)}"] = {
                "stage": vd.get("stage"),
                "seconds": metrics.get("verify_wall_seconds", float(f"{sum(timings.values()):.3f}")),
                "budget_s": metrics.get("budget_s"),
            }
    return out


def slowest_honest(times: dict[int, dict[str, Any]], exclude: set[str]) -> dict[str, Any]:
    """The longest verification of an honest miner (not in ``exclude``) over ``times`` (round ->
    :func:`verification_times`), with its budget: ``{"round", "who", "stage", "seconds", "budget_s"}``."""
    best: dict[str, Any] = {}
    for r, per in times.items():
        for who, t in per.items():
            if who.split("/")[1] in exclude or t.get("seconds") is None:
                continue
            if not best or t["seconds"] > best["seconds"]:
                best = {"round": r, "who": who, **t}
    return best
