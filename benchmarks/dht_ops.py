"""What one DHT operation moves (fixed terms): ``python -m benchmarks.dht_ops [--nodes N]``.

Starts a bootstrap peer and N real hivemind DHT nodes (``protocol.p2p.dht.DHTNode``, each with its own
``p2pd``) on this machine, has each announce one signed record of the same round (4 miners' and the rest
validators', the devnet's shapes), then looks the round up as the nodes do (``DHTNode.lookup``: a ``get``
with ``latest=True``, which asks every peer holding the key). Bytes are the loopback interface's received
counter around each step (``/sys/class/net/lo``: payload and TCP/IP headers, every DHT peer on this
machine), so run it where nothing else talks over the loopback. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from eth_account import Account

from protocol.p2p.dht import DHTConfig, DHTNode
from protocol.wire.records import NodeRecord, Served, make_record

LOOPBACK_RX = Path("/sys/class/net/lo/statistics/rx_bytes")
CHAIN_ID, ROUND = 31337, 5


def _rx() -> int:
    return int(LOOPBACK_RX.read_text())


def _settled(t0: int) -> int:
    time.sleep(0.5)  # the last acknowledgements
    return _rx() - t0


def records(n: int, miners: int = 4) -> list[NodeRecord]:
    """``n`` signed records of one round, shaped as the devnet's (a miner serves its update and
    transcript, a validator a checkpoint)."""
    out = []
    for i in range(n):
        miner = i < miners
        serves = (
            (Served("update", f"0x{i:064x}", 30_000), Served("transcript", f"0x{i + 99:064x}", 4_000))
            if miner
            else (Served("checkpoint", f"0x{i:064x}", 900_000),)
        )
        key = Account.create().key.hex()
        role = "miner" if miner else "validator"
        url = f"http://127.0.0.1:{4000 + i}"
        out.append(
            make_record(key, chain_id=CHAIN_ID, role=role, round=ROUND, url=url, serves=serves, ttl=3600)
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print the bytes of a store and of a lookup."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument(
        "--nodes", type=int, default=6, help="DHT nodes besides the bootstrap peer (the devnet: 6)"
    )
    p.add_argument("--replicas", type=int, default=DHTConfig.num_replicas, help="peers storing a record")
    p.add_argument(
        "--cache-nearest", type=int, default=DHTConfig.cache_nearest, help="peers a lookup copies to"
    )
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    tune = {"num_replicas": args.replicas, "cache_nearest": args.cache_nearest, "validate_records": False}
    boot = DHTNode(DHTConfig(**tune))  # type: ignore[arg-type]
    boot.start()
    nodes = [
        DHTNode(DHTConfig(initial_peers=tuple(boot.visible_maddrs()), **tune))  # type: ignore[arg-type]
        for _ in range(args.nodes)
    ]
    try:
        for n in nodes:
            n.start()
        time.sleep(2)
        recs = records(args.nodes)
        time.sleep(1)
        stores = []
        for n, r in zip(nodes, recs, strict=True):
            t0 = _rx()
            n.announce(r)
            stores.append(_settled(t0))
        lookups = []
        for n in nodes:
            t0 = _rx()
            found = n.lookup(CHAIN_ID, ROUND).records
            lookups.append(_settled(t0))
            assert len(found) == args.nodes, f"a lookup found {len(found)} of {args.nodes} records"
        out = {
            "nodes": args.nodes + 1,
            "num_replicas": args.replicas,
            "cache_nearest": args.cache_nearest,
            "record_bytes": [len(r.encode()) for r in recs],
            "store_bytes": stores,
            "lookup_bytes": lookups,
            "store_mean": sum(stores) / len(stores),
            "lookup_mean": sum(lookups) / len(lookups),
        }
        print(json.dumps(out, indent=1))
    finally:
        for n in [*nodes, boot]:
            n.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
