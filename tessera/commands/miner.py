"""``tessera miner run``: run a miner node (see docs/operator-miner.md)."""

from __future__ import annotations

import argparse
from typing import Any

from miner.config import MinerConfig, load_miner_config, load_miner_key
from tessera.nodes import NodeRuntime, add_run_command, dev_tee_seed, overrides_from_args, serve_node


def register(subparsers: Any) -> None:
    """Add ``tessera miner``."""
    add_run_command(
        subparsers,
        MinerConfig,
        _run,
        help="run a miner node",
        run_help="join the run, train each round, commit, serve",
    )


def _run(args: argparse.Namespace) -> int:
    from miner.node import MinerNode, simulated_evidence

    cfg = load_miner_config(args.config, overrides_from_args(args, MinerConfig))

    def build(rt: NodeRuntime) -> MinerNode:
        evidence = simulated_evidence(rt.coord.chain_id, dev_tee_seed()) if cfg.tee == "simulated" else None
        return MinerNode(cfg, rt.spec, rt.coord, rt.discovery, evidence_fn=evidence, traffic=rt.traffic)

    return serve_node(
        cfg, load_miner_key(cfg), cfg.checkpoint_urls, build, "miner {address} serving at {url}"
    )
