"""Per-request HTTP logs are debug output (issue 16: at ``-v`` they were 161 of a validator's 356 lines):
the HTTP client and web3 loggers stay at WARNING under ``-v`` and speak from ``-vv``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tessera.cli import LOG_LEVEL_ENV, NOISY_LOGGERS, build_parser, log_level, main


@pytest.fixture
def restore_levels() -> Iterator[dict[str, int]]:
    saved = {name: logging.getLogger(name).level for name in NOISY_LOGGERS}
    yield saved
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)


def test_request_logs_only_at_debug(
    restore_levels: dict[str, int], capsys: pytest.CaptureFixture[str]
) -> None:
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
    assert main(["-v", "account"]) == 1  # prints the subcommands; logging is configured first
    assert {logging.getLogger(n).level for n in NOISY_LOGGERS} == {logging.WARNING}
    assert "httpx" in NOISY_LOGGERS and "web3.providers" in NOISY_LOGGERS
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
    assert main(["-vv", "account"]) == 1
    assert {logging.getLogger(n).level for n in NOISY_LOGGERS} == {logging.NOTSET}
    capsys.readouterr()


@pytest.fixture
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    level = root.level
    yield
    root.setLevel(level)


def test_log_level_flag_wins_over_verbose_and_the_environment(
    restore_root: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--log-level`` on ``miner run`` / ``validator run`` / ``devnet`` (issue 27 item 4): the flag, else
    ``$TESSERA_LOG_LEVEL`` (how the devnet hands its level to its nodes), else ``-v``."""
    parser = build_parser()
    for cmd in (["miner", "run"], ["validator", "run"], ["devnet"]):
        args = parser.parse_args(["-v", *cmd, "--log-level", "info"])
        assert log_level(args, {LOG_LEVEL_ENV: "ERROR"}) == logging.INFO
    args = parser.parse_args(["-vv", "miner", "run"])
    assert log_level(args, {LOG_LEVEL_ENV: "error"}) == logging.ERROR
    assert log_level(args, {}) == logging.DEBUG
    # a node logs its line per round by default; other commands only problems
    assert log_level(parser.parse_args(["miner", "run"]), {}) == logging.INFO
    assert log_level(parser.parse_args(["validator", "run"]), {}) == logging.INFO
    assert log_level(parser.parse_args(["devnet"]), {}) == logging.WARNING
    assert log_level(parser.parse_args(["runspec", "show"]), {}) == logging.WARNING
    with pytest.raises(SystemExit):
        parser.parse_args(["miner", "run", "--log-level", "chatty"])
    # the level reaches the root logger of a real run (here one that stops at its missing config file)
    assert (
        main(["-vv", "validator", "run", "--log-level", "error", "--config", str(tmp_path / "no.toml")]) == 2
    )
    assert logging.getLogger().level == logging.ERROR
    capsys.readouterr()
