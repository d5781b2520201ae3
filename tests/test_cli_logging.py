"""Per-request HTTP logs are debug output (issue 16: at ``-v`` they were 161 of a validator's 356 lines):
the HTTP client and web3 loggers stay at WARNING under ``-v`` and speak from ``-vv``."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tessera.cli import NOISY_LOGGERS, main


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
