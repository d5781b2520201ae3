"""Sums over traffic ledgers: what the devnet report and the benchmarks compute from nodes' ``GET /traffic``
(``protocol.node.traffic.TrafficLedger.to_json``), pure arithmetic over their JSON."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from protocol.node.traffic import FIELDS, Kind


def total_bytes(entry: dict[str, int]) -> int:
    """Bytes of one ledger entry, bodies and headers both ways."""
    return sum(int(entry.get(f, 0)) for f in FIELDS)


def merge_ledgers(ledgers: Iterable[dict[str, dict[str, dict[str, int]]]]) -> dict[int, dict[str, int]]:
    """Sum several nodes' :meth:`TrafficLedger.to_json` into ``{round: {kind: bytes}}`` (all fields)."""
    out: dict[int, dict[str, int]] = {}
    for led in ledgers:
        for r, kinds in led.items():
            row = out.setdefault(int(r), {})
            for k, entry in kinds.items():
                row[k] = row.get(k, 0) + total_bytes(entry)
    return out


FIXED_KINDS = (Kind.RPC, Kind.DHT, Kind.RECORD)
"""The terms that do not grow with the model ("fixed terms": at most 200 kB per node and round)."""


def fixed_bytes_by_node(
    ledgers: Mapping[str, dict[str, dict[str, dict[str, int]]]],
) -> dict[int, dict[str, dict[str, int]]]:
    """Each node's :data:`FIXED_KINDS` bytes per round and kind, ``{round: {node: {kind: bytes}}}``, from
    its :meth:`TrafficLedger.to_json` (a node counts the JSON-RPC it makes, the records it serves and what
    its DHT daemon received, so nothing is counted at two nodes)."""
    fixed = {k.value for k in FIXED_KINDS}
    out: dict[int, dict[str, dict[str, int]]] = {}
    for node, led in ledgers.items():
        for r, kinds in led.items():
            row = {k: total_bytes(e) for k, e in sorted(kinds.items()) if k in fixed}
            out.setdefault(int(r), {})[node] = row
    return out


def kind_totals(merged: Mapping[int, Mapping[str, int]]) -> dict[str, int]:
    """Bytes by kind over every round of a :func:`merge_ledgers` result."""
    out: dict[str, int] = {}
    for kinds in merged.values():
        for k, b in kinds.items():
            out[k] = out.get(k, 0) + b
    return dict(sorted(out.items()))


def bits_per_param_step(nbytes: int, trained_params: int, inner_steps: int) -> float:
    """``8 * nbytes / (trained_params * inner_steps)``: ``trained_params`` summed over the round's miners."""
    if trained_params <= 0 or inner_steps <= 0:
        raise ValueError("trained_params and inner_steps must be positive")
    return 8.0 * nbytes / (trained_params * inner_steps)
