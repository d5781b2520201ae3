"""A node whose RPC is unreachable at start keeps trying, one clear line a try naming the limit, and gives
up with one error after it (issue 27 item 2: it gave up after about 4 s); a chain node that comes up in
time is used. Real anvil on a port chosen before it starts."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from protocol.rounds.anvil import Anvil, free_port
from tessera.errors import TesseraError
from tessera.nodes import wait_for_rpc

pytestmark = pytest.mark.chain


def test_an_unreachable_rpc_is_tried_with_one_line_a_try_then_one_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with caplog.at_level(logging.WARNING, logger="tessera.nodes"), pytest.raises(TesseraError) as got:
        wait_for_rpc(url, tries=3, wait_s=0.05)
    assert f"RPC {url} unreachable after 3 tries" in str(got.value)
    lines = [r.getMessage() for r in caplog.records if r.name == "tessera.nodes"]
    assert len(lines) == 2
    assert all(f"RPC {url} unreachable" in m and "giving up after 0 s" in m for m in lines)
    assert "try 1 of 3" in lines[0] and "try 2 of 3" in lines[1]


def test_a_chain_node_that_comes_up_within_the_limit_is_used(caplog: pytest.LogCaptureFixture) -> None:
    node = Anvil(port=free_port())
    starter = threading.Timer(1.0, node.start)
    t0 = time.monotonic()
    starter.start()
    try:
        with caplog.at_level(logging.WARNING, logger="tessera.nodes"):
            wait_for_rpc(node.rpc_url, tries=60, wait_s=0.5)
        assert time.monotonic() - t0 >= 1.0
        assert any("try 1 of 60" in r.getMessage() for r in caplog.records)
    finally:
        starter.join()
        node.stop()


def test_a_url_without_a_scheme_is_one_error_not_a_wait() -> None:
    with pytest.raises(Exception, match="must look like http://HOST:PORT"):
        wait_for_rpc("127.0.0.1:8545", tries=3, wait_s=10)
