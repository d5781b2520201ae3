"""``tessera miner run``: run a miner node (see docs/operator-miner.md)."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    """Add ``tessera miner``."""
    from miner.config import MinerConfig
    from tessera.nodes import add_config_flags

    parser = subparsers.add_parser("miner", help="run a miner node")
    sub = parser.add_subparsers(dest="miner_command", metavar="ACTION")
    run = sub.add_parser(
        "run",
        help="join the run, train each round, commit, serve",
        description="Every setting is also read from the [miner] table of --config and from "
        "TESSERA_MINER_<SETTING> environment variables; flags win. The key comes from "
        "$TESSERA_MINER_KEY (or --key-env NAME) or an encrypted --keystore.",
    )
    add_config_flags(run, MinerConfig)
    run.set_defaults(handler=_run)
    parser.set_defaults(handler=lambda args: (parser.print_help(), 1)[1])


def _run(args: argparse.Namespace) -> int:
    from miner.config import MinerConfig, load_miner_config, load_miner_key
    from miner.node import MinerNode, simulated_evidence
    from protocol.discovery import Discovery
    from protocol.runspec import RunSpec
    from protocol.traffic import TrafficLedger
    from tessera.nodes import (
        check_genesis,
        connect,
        dev_tee_seed,
        lock_data_dir,
        overrides_from_args,
        run_until_signal,
        start_dht,
    )

    cfg = load_miner_config(args.config, overrides_from_args(args, MinerConfig))
    key = load_miner_key(cfg)
    spec = RunSpec.load(cfg.run_file)
    lock = lock_data_dir(cfg.data_dir)  # noqa: F841 - held until the process ends
    traffic = TrafficLedger()  # what this node moves, by round and kind (GET /traffic)
    coord = connect(cfg.deployment, cfg.rpc_url, key, traffic)
    check_genesis(coord, spec, cfg.run_file)
    dht = start_dht(
        cfg.dht, cfg.dht_peers, cfg.dht_port, data_dir=cfg.data_dir, chain_id=coord.chain_id, host=cfg.host
    )
    try:
        discovery = Discovery(coord.chain_id, key, dht, cfg.checkpoint_urls)
        evidence = simulated_evidence(coord.chain_id, dev_tee_seed()) if cfg.tee == "simulated" else None
        node = MinerNode(cfg, spec, coord, discovery, evidence_fn=evidence, traffic=traffic).start()
        print(f"miner {coord.address} serving at {node.url}", flush=True)
        run_until_signal(node)
    finally:
        if dht is not None:
            dht.shutdown()
    return 0
