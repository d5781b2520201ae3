"""The ``tessera`` command line: one entry point, one subcommand per module in ``tessera.commands``."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import pkgutil
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import tessera.commands as commands
from tessera import __version__
from training.cudaenv import prepare_cuda_env

# CUBLAS_WORKSPACE_CONFIG into the environment before any command can touch CUDA, whatever it imports first
# (training.cudaenv says why); importing the command modules above does not initialise CUDA.
prepare_cuda_env()

# Every package's exception root: an error of one of these is a user-facing failure (exit 2, one line),
# anything else is a bug and keeps its traceback.
_ERROR_ROOTS: tuple[str, ...] = (
    "tessera.errors:TesseraError",
    "training.errors:TrainingError",
    "protocol.errors:ProtocolError",
    "attestation.errors:AttestationError",
    "miner.errors:MinerError",
    "validator.errors:ValidatorError",
)


#: Libraries that log every request at INFO; shown from -vv.
NOISY_LOGGERS = ("httpx", "httpcore", "urllib3", "web3.providers", "web3.manager")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
"""The names ``--log-level`` takes (``tessera miner run``, ``validator run``, ``devnet``)."""
LOG_LEVEL_ENV = "TESSERA_LOG_LEVEL"
"""The environment's ``--log-level``: the devnet passes its own to the nodes it starts this way."""


def add_log_level_flag(parser: argparse.ArgumentParser, default: str = "WARNING") -> None:
    """``--log-level LEVEL`` on a long-running command; it wins over ``-v`` and ``$TESSERA_LOG_LEVEL``.
    ``default`` is the command's level when none of them is given (a node: INFO, its line per round)."""
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default=None,
        help=f"log level: DEBUG, INFO (one line per round and action), WARNING (problems only), ERROR; "
        f"default from -v or ${LOG_LEVEL_ENV}, else {default}",
    )
    parser.set_defaults(log_level_default=default)


def log_level(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """The root log level: ``--log-level``, else ``$TESSERA_LOG_LEVEL``, else the command's default (WARNING
    where it declares none) lowered 10 per ``-v``."""
    named = getattr(args, "log_level", None) or environ.get(LOG_LEVEL_ENV, "").upper()
    if named in LOG_LEVELS:
        return int(getattr(logging, named))
    base = int(getattr(logging, getattr(args, "log_level_default", "WARNING")))
    return max(base - 10 * min(args.verbose, 2), logging.DEBUG)


def _error_roots() -> tuple[type[BaseException], ...]:
    roots: list[type[BaseException]] = []
    for spec in _ERROR_ROOTS:
        mod, _, name = spec.partition(":")
        try:
            roots.append(getattr(importlib.import_module(mod), name))
        except (ImportError, AttributeError):
            continue
    return tuple(roots)


def build_parser() -> argparse.ArgumentParser:
    """Build the parser with every subcommand found in ``tessera.commands``."""
    parser = argparse.ArgumentParser(
        prog="tessera",
        description="Tessera: train one model together, verify the work, pay on-chain.",
    )
    parser.add_argument("--version", action="version", version=f"tessera {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"tessera.commands.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def main(argv: Sequence[str] | None = None, *, extra: Mapping[str, Any] | None = None) -> int:
    """Run the CLI; returns the process exit status. ``extra``: attributes set on the parsed arguments
    (the attack harness's entry point passes the validator class it runs, ``tessera.attack.node``)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    for k, v in (extra or {}).items():
        setattr(args, k, v)
    level = log_level(args, os.environ)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(level)  # basicConfig leaves an already configured root as it was
    if level > logging.DEBUG:
        # one INFO line per HTTP request (httpx) was 161 of a validator's 356 lines at -v: debug (-vv) only
        for noisy in NOISY_LOGGERS:
            logging.getLogger(noisy).setLevel(logging.WARNING)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 1
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except _error_roots() as exc:  # a tuple of exception classes built at run time
        print(f"tessera: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
