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
    from tessera.nodes import dev_tee_seed, node_runtime, overrides_from_args, run_until_signal

    cfg = load_miner_config(args.config, overrides_from_args(args, MinerConfig))
    key = load_miner_key(cfg)
    with node_runtime(cfg, key, cfg.checkpoint_urls) as rt:
        chain_id = rt.coord.chain_id
        evidence = simulated_evidence(chain_id, dev_tee_seed()) if cfg.tee == "simulated" else None
        node = MinerNode(
            cfg, rt.spec, rt.coord, rt.discovery, evidence_fn=evidence, traffic=rt.traffic
        ).start()
        print(f"miner {rt.coord.address} serving at {node.url}", flush=True)
        run_until_signal(node)
    return 0
