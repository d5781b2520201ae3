"""A real miner node for the API tests: started with its own ``start()`` on a free port, over an in-memory
chain that no round has started on (so nothing trains unless a test seeds a round in its state)."""

from __future__ import annotations

from pathlib import Path

from eth_account import Account

from miner.config import MinerConfig
from miner.node import MinerNode
from protocol.node.traffic import TrafficLedger
from protocol.p2p.discovery import Discovery
from protocol.rounds.memcoordinator import MemoryCoordinator, MemoryLedger
from protocol.runspec import RunSpec


def start_bare_miner(data_dir: Path, key: str, traffic: TrafficLedger | None = None) -> MinerNode:
    """A started :class:`MinerNode` with key ``key``; the caller stops it."""
    return MinerNode(
        MinerConfig(data_dir=data_dir, threads=1),
        RunSpec(),
        MemoryCoordinator(MemoryLedger(b"\x01" * 32), Account.from_key(key).address),
        Discovery(31337, key),
        traffic=traffic,
    ).start()
