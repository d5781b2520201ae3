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
    from tessera.nodes import dev_tee_seed, node_runtime, overrides_from_args, run_until_signal
    from validator.config import ValidatorConfig, load_validator_config, load_validator_key
    from validator.node import ValidatorNode, dev_evidence_checker

    cfg = load_validator_config(args.config, overrides_from_args(args, ValidatorConfig))
    key = load_validator_key(cfg)
    with node_runtime(cfg, key, cfg.peer_urls) as rt:
        chain_id = rt.coord.chain_id
        checker = dev_evidence_checker(chain_id, dev_tee_seed()) if cfg.dangerous_dev_tee else None
        # the attack harness's entry point (tessera.attack.node) runs an adversarial subclass here
        cls = getattr(args, "node_class", None) or ValidatorNode
        node: ValidatorNode = cls(
            cfg, rt.spec, rt.coord, rt.discovery, key, check_evidence=checker, traffic=rt.traffic
        ).start()
        print(f"validator {rt.coord.address} serving at {node.url} (live page: {node.url}/)", flush=True)
        run_until_signal(node)
    return 0
