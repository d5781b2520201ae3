"""A miner measures its upload link before it stakes (``miner.linkcheck``), against a real validator node
over real HTTP: a link slower than an audit needs (a throttling TCP proxy in front of the validator) stops
the start with ``LinkTooSlowError`` before ``ensure_registered``; a fast one stakes with one INFO line;
``skip_link_check`` stakes with a warning; no validator answering and no declared rate logs one warning and
stakes; a declared rate is judged without probing; a registered miner only warns."""

from __future__ import annotations

import argparse
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from eth_account import Account

from miner.config import MinerConfig, load_miner_config
from miner.errors import LinkTooSlowError
from miner.linkcheck import probe_bytes, required_link
from miner.node import MinerNode
from protocol.p2p.discovery import Discovery
from protocol.p2p.linkprobe import probe_upload
from protocol.rounds.memcoordinator import MemoryCoordinator, MemoryLedger
from protocol.runspec import RunSpec
from training.presets import get_preset
from validator.config import ValidatorConfig
from validator.node import ValidatorNode

V_KEY = "0x" + f"{71:064x}"
M_KEY = "0x" + f"{72:064x}"
SPEC_1M = RunSpec(model=get_preset("1m").model("moe", 256))  # 2.79 Mbit/s needed (runspec estimate)


class RecordingCoordinator(MemoryCoordinator):
    """An in-memory coordinator that records ``ensure_registered`` calls."""

    def __init__(self, ledger: MemoryLedger, address: str) -> None:
        super().__init__(ledger, address)
        self.registrations: list[tuple[str, int]] = []

    def ensure_registered(self, role: str, stake: int) -> bool:
        self.registrations.append((role, stake))
        return super().ensure_registered(role, stake)


class ThrottlingProxy:
    """A TCP proxy to ``target`` that forwards what the client sends at ``rate`` bytes a second (answers
    unthrottled): a slow uplink in front of a real server."""

    def __init__(self, target: str, rate: float) -> None:
        host, port = target.removeprefix("http://").split(":")
        self.target = (host, int(port))
        self.rate = rate
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stopped = threading.Event()
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.conns += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, self.rate), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, None), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, rate: float | None) -> None:
        t0, n = time.monotonic(), 0
        try:
            while True:
                data = src.recv(4096)
                if not data:
                    break
                n += len(data)
                if rate is not None:  # hold each piece until the rate allows it
                    while time.monotonic() < t0 + n / rate and not self.stopped.is_set():
                        time.sleep(max(0.0, min(0.05, t0 + n / rate - time.monotonic())))
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.stopped.set()
        self.sock.close()
        for s in self.conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture
def validator(tmp_path: Path) -> Iterator[ValidatorNode]:
    v = ValidatorNode(
        ValidatorConfig(data_dir=tmp_path / "v", threads=1, dht=False),
        RunSpec(),
        MemoryCoordinator(MemoryLedger(b"\x01" * 32), Account.from_key(V_KEY).address),
        Discovery(31337, V_KEY),
        V_KEY,
    ).start()
    try:
        yield v
    finally:
        v.stop()


def miner(
    tmp_path: Path, spec: RunSpec, urls: tuple[str, ...], **cfg: object
) -> tuple[MinerNode, RecordingCoordinator]:
    coord = RecordingCoordinator(MemoryLedger(b"\x01" * 32), Account.from_key(M_KEY).address)
    node = MinerNode(
        MinerConfig(data_dir=tmp_path / "m", threads=1, dht=False, **cfg),  # type: ignore[arg-type]
        spec,
        coord,
        Discovery(31337, M_KEY, fallback_urls=urls),
    )
    return node, coord


def throttled_below_need(validator: ValidatorNode) -> tuple[ThrottlingProxy, float]:
    """A proxy to ``validator`` at a third of what the 1m preset's audits need, and that need (Mbit/s)."""
    needed = float(required_link(SPEC_1M)["upload_mbit_s_needed"])
    return ThrottlingProxy(validator.url, needed * 1e6 / 8 / 3), needed


def test_a_link_too_slow_refuses_to_stake(
    tmp_path: Path, validator: ValidatorNode, caplog: pytest.LogCaptureFixture
) -> None:
    proxy, needed = throttled_below_need(validator)
    node, coord = miner(tmp_path, SPEC_1M, (proxy.url,))
    try:
        t0 = time.monotonic()
        with pytest.raises(LinkTooSlowError) as exc:
            node.start()
        took = time.monotonic() - t0
    finally:
        proxy.close()
        node.stop()
    msg = str(exc.value)
    assert coord.registrations == [] and coord.ledger.miners == [], "nothing staked"
    assert f"vs {needed:g} Mbit/s needed" in msg and "MB" in msg
    assert "--upload-mbit" in msg and "--skip-link-check" in msg
    measured = float(msg.split(" Mbit/s upload")[0].rsplit(" ", 1)[-1])
    assert needed / 5 < measured < needed / 2, f"measured {measured} through a proxy at {needed / 3:.2f}"
    assert took < 1 + probe_bytes(needed) * 8 / (needed * 1e6 / 3) * 1.5


def test_a_probe_cut_off_at_its_limit_is_an_upper_bound(validator: ValidatorNode) -> None:
    """Bytes handed to this host's socket buffers are not bytes uploaded: a probe the peer has not answered
    by its limit counts as at most what it sent over the time it took, never as unreachable."""
    proxy = ThrottlingProxy(validator.url, 64_000)
    try:
        t0 = time.monotonic()
        r = probe_upload(proxy.url, 256 << 10, wall_s=1.0)
        took = time.monotonic() - t0
    finally:
        proxy.close()
    assert r.timed_out and r.mbit_s <= 8 * (256 << 10) / 1.0 / 1e6
    assert took < 3.5


def test_a_fast_link_stakes_with_one_info_line(
    tmp_path: Path, validator: ValidatorNode, caplog: pytest.LogCaptureFixture
) -> None:
    node, coord = miner(tmp_path, SPEC_1M, ("http://127.0.0.1:9/", validator.url))  # the first refuses
    with caplog.at_level(logging.INFO, logger="miner.linkcheck"):
        node.start()
    node.stop()
    assert coord.registrations == [("miner", node.cfg.stake)]
    (line,) = [r for r in caplog.records if r.name == "miner.linkcheck"]
    assert line.levelno == logging.INFO and line.getMessage().startswith("link check passed: ")
    assert f"measured to {validator.url}" in line.getMessage()


def test_skip_link_check_stakes_with_a_warning(
    tmp_path: Path, validator: ValidatorNode, caplog: pytest.LogCaptureFixture
) -> None:
    proxy, _needed = throttled_below_need(validator)
    node, coord = miner(tmp_path, SPEC_1M, (proxy.url,), skip_link_check=True)
    try:
        with caplog.at_level(logging.INFO, logger="miner.linkcheck"):
            node.start()
    finally:
        node.stop()
        proxy.close()
    assert coord.registrations == [("miner", node.cfg.stake)]
    (line,) = [r for r in caplog.records if r.name == "miner.linkcheck"]
    assert line.levelno == logging.WARNING and "--skip-link-check" in line.getMessage()


def test_no_validator_and_no_declared_rate_warns_once_and_stakes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    node, coord = miner(tmp_path, SPEC_1M, ("http://127.0.0.1:9/",))
    with caplog.at_level(logging.INFO, logger="miner.linkcheck"):
        node.start()
    node.stop()
    assert coord.registrations == [("miner", node.cfg.stake)]
    (line,) = [r for r in caplog.records if r.name == "miner.linkcheck"]
    assert line.levelno == logging.WARNING
    assert "no validator answered a probe (tried 1)" in line.getMessage()
    assert "--upload-mbit" in line.getMessage()


def test_a_declared_rate_is_judged_without_probing(tmp_path: Path) -> None:
    node, coord = miner(tmp_path, SPEC_1M, (), upload_mbit=1.0)
    with pytest.raises(LinkTooSlowError, match=r"1.00 Mbit/s upload \(declared with --upload-mbit\)"):
        node.start()
    assert coord.registrations == []
    node2, coord2 = miner(tmp_path / "b", SPEC_1M, (), upload_mbit=100.0)
    node2.start()
    node2.stop()
    assert coord2.registrations == [("miner", node2.cfg.stake)]


def test_a_registered_miner_only_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    node, coord = miner(tmp_path, SPEC_1M, (), upload_mbit=1.0)
    coord.ledger.miners.append(coord.address)  # staked by an earlier run of this key
    coord.ledger.reg_block[coord.address] = 1
    with caplog.at_level(logging.INFO, logger="miner.linkcheck"):
        node.start()
    node.stop()
    (line,) = [r for r in caplog.records if r.name == "miner.linkcheck"]
    assert line.levelno == logging.WARNING and "already registered" in line.getMessage()


def test_the_flags() -> None:
    from tessera.nodes import add_run_command, overrides_from_args

    parser = argparse.ArgumentParser()
    add_run_command(parser.add_subparsers(), MinerConfig, lambda a: 0, help="", run_help="")
    args = parser.parse_args(["miner", "run", "--skip-link-check", "--upload-mbit", "50"])
    cfg = load_miner_config(None, overrides_from_args(args, MinerConfig), env={})
    assert cfg.skip_link_check is True and cfg.upload_mbit == 50.0
    args = parser.parse_args(["miner", "run", "--skip-link-check", "false", "--dht", "false"])
    cfg = load_miner_config(None, overrides_from_args(args, MinerConfig), env={})
    assert cfg.skip_link_check is False and cfg.dht is False
