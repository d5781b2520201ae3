"""``tessera validator run``: run a validator node (see docs/operator-validator.md)."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    """Add ``tessera validator``."""
    from tessera.nodes import add_config_flags
    from validator.config import ValidatorConfig

    parser = subparsers.add_parser("validator", help="run a validator node")
    sub = parser.add_subparsers(dest="validator_command", metavar="ACTION")
    run = sub.add_parser(
        "run",
        help="verify, score, settle, merge and certify each round",
        description="Every setting is also read from the [validator] table of --config and from "
        "TESSERA_VALIDATOR_<SETTING> environment variables; flags win. The key comes from "
        "$TESSERA_VALIDATOR_KEY (or --key-env NAME) or an encrypted --keystore.",
    )
    add_config_flags(run, ValidatorConfig)
    run.set_defaults(handler=_run)
    parser.set_defaults(handler=lambda args: (parser.print_help(), 1)[1])


def _run(args: argparse.Namespace) -> int:
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
    from validator.config import ValidatorConfig, load_validator_config, load_validator_key
    from validator.node import ValidatorNode, dev_evidence_checker

    cfg = load_validator_config(args.config, overrides_from_args(args, ValidatorConfig))
    key = load_validator_key(cfg)
    spec = RunSpec.load(cfg.run_file)
    lock = lock_data_dir(cfg.data_dir)  # noqa: F841 - held until the process ends
    traffic = TrafficLedger()  # what this node moves, by round and kind (GET /traffic)
    coord = connect(cfg.deployment, cfg.rpc_url, key, traffic)
    check_genesis(coord, spec, cfg.run_file)
    dht = start_dht(
        cfg.dht, cfg.dht_peers, cfg.dht_port, data_dir=cfg.data_dir, chain_id=coord.chain_id, host=cfg.host
    )
    try:
        discovery = Discovery(coord.chain_id, key, dht, cfg.peer_urls)
        checker = dev_evidence_checker(coord.chain_id, dev_tee_seed()) if cfg.dangerous_dev_tee else None
        # the attack harness's entry point (tessera.attack.node) runs an adversarial subclass here
        cls = getattr(args, "node_class", None) or ValidatorNode
        node: ValidatorNode = cls(
            cfg, spec, coord, discovery, key, check_evidence=checker, traffic=traffic
        ).start()
        print(f"validator {coord.address} serving at {node.url} (live page: {node.url}/)", flush=True)
        run_until_signal(node)
    finally:
        if dht is not None:
            dht.shutdown()
    return 0
