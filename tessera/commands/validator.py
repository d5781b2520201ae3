"""``tessera validator run``: run a validator node (see docs/operator-validator.md)."""

from __future__ import annotations

import argparse
from typing import Any

from tessera.nodes import NodeRuntime, add_run_command, dev_tee_seed, overrides_from_args, serve_node
from validator.config import ValidatorConfig, load_validator_config, load_validator_key


def register(subparsers: Any) -> None:
    """Add ``tessera validator``."""
    add_run_command(
        subparsers,
        ValidatorConfig,
        _run,
        help="run a validator node",
        run_help="verify, score, settle, merge and certify each round",
    )


def _run(args: argparse.Namespace) -> int:
    from validator.devtee import dev_evidence_checker
    from validator.node import ValidatorNode

    cfg = load_validator_config(args.config, overrides_from_args(args, ValidatorConfig))
    key = load_validator_key(cfg)
    # the attack harness's entry point (tessera.attack.node) runs an adversarial subclass here
    cls = getattr(args, "node_class", None) or ValidatorNode

    def build(rt: NodeRuntime) -> ValidatorNode:
        checker = dev_evidence_checker(rt.coord.chain_id, dev_tee_seed()) if cfg.dangerous_dev_tee else None
        node: ValidatorNode = cls(
            cfg, rt.spec, rt.coord, rt.discovery, key, check_evidence=checker, traffic=rt.traffic
        )
        return node

    banner = "validator {address} serving at {url} (live page: {url}/)"
    return serve_node(cfg, key, cfg.peer_urls, build, banner)
