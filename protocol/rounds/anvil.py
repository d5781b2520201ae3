"""Start and stop a local anvil (from contracts/node_modules) for the devnet, the tests and the benchmark.

anvil runs with ``--hardfork prague``, pinned together with ``evm_version = "prague"`` in
contracts/foundry.toml: the checkpoint certificates need the BLS12-381 precompiles of EIP-2537.
``state`` persists the chain across restarts (``--state FILE``). anvil writes that file only on a clean
exit unless ``state_interval`` is set (``--state-interval SECONDS``): then it also dumps every that many
seconds, so a ``kill -9`` loses at most the blocks mined since the last dump (the devnet's fault harness
restarts from there: to the nodes, a chain reorganisation).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from protocol.errors import ProtocolError

HARDFORK = "prague"
PERSISTED_STATES = 128
"""States anvil may write to its disk cache (``~/.foundry/anvil/tmp``): left alone it writes one state of
about 1 MB a block once its in-memory history is full and keeps them all, and deletes none of a process
that was killed, so a devnet on 1-s blocks left 3.4 GB an hour (a session's fault and attack runs filled a
252-GB disk). Nodes read recent blocks only."""
REPO_ROOT = Path(__file__).resolve().parents[2]
ANVIL_BIN = REPO_ROOT / "contracts" / "node_modules" / "@foundry-rs" / "anvil-linux-amd64" / "bin" / "anvil"


class AnvilError(ProtocolError):
    """anvil is missing, failed to start or did not answer in time."""


def find_anvil() -> Path:
    """The anvil binary: contracts/node_modules first, then ``$TESSERA_ANVIL``, then ``PATH``."""
    env = os.environ.get("TESSERA_ANVIL")
    for cand in (Path(env) if env else None, ANVIL_BIN):
        if cand is not None and cand.is_file() and os.access(cand, os.X_OK):
            return cand
    which = shutil.which("anvil")
    if which:
        return Path(which)
    raise AnvilError(
        f"anvil not found at {ANVIL_BIN}: run `cd contracts && npm ci` (or `make setup-contracts`)"
    )


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Anvil:
    """A local anvil process. Use as a context manager or call :meth:`start` / :meth:`stop`."""

    def __init__(
        self,
        port: int | None = None,
        state: Path | str | None = None,
        chain_id: int = 31337,
        block_time: float | None = None,
        accounts: int = 10,
        gas_limit: int = 30_000_000,
        startup_timeout: float = 20.0,
        state_interval: float | None = None,
    ) -> None:
        self.port = port or free_port()
        self.state = Path(state) if state else None
        self.chain_id = chain_id
        self.block_time = block_time
        self.accounts = accounts
        self.gas_limit = gas_limit
        self.startup_timeout = startup_timeout
        self.state_interval = state_interval
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def rpc_url(self) -> str:
        """HTTP JSON-RPC endpoint."""
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """The command line used to start anvil."""
        cmd = [
            str(find_anvil()),
            "--hardfork",
            HARDFORK,
            "--port",
            str(self.port),
            "--host",
            "127.0.0.1",
            "--chain-id",
            str(self.chain_id),
            "--accounts",
            str(self.accounts),
            "--gas-limit",
            str(self.gas_limit),
            "--silent",
            "--max-persisted-states",
            str(PERSISTED_STATES),
        ]
        if self.block_time:
            cmd += ["--block-time", str(self.block_time)]
        if self.state:
            cmd += ["--state", str(self.state)]
            if self.state_interval:
                cmd += ["--state-interval", str(self.state_interval)]
        return cmd

    def start(self) -> Anvil:
        """Starts anvil and waits until it answers ``eth_chainId``."""
        if self._proc is not None:
            return self
        cmd = self.command()
        self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                self._proc = None
                raise AnvilError(f"anvil exited at start (port {self.port}): {err.strip()[:500]}")
            if self._answers():
                return self
            time.sleep(0.1)
        self.stop()
        raise AnvilError(f"anvil did not answer on {self.rpc_url} within {self.startup_timeout:.0f}s")

    def _answers(self) -> bool:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []}).encode()
        req = urllib.request.Request(self.rpc_url, body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=1) as r:
                return "result" in json.loads(r.read())
        except (urllib.error.URLError, OSError, ValueError):
            return False

    @property
    def pid(self) -> int | None:
        """The process id while running."""
        return self._proc.pid if self._proc is not None else None

    def kill(self) -> None:
        """SIGKILL anvil, as a crash would: no state dump on the way out (see ``state_interval``)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.kill()
        proc.wait()
        if proc.stderr:
            proc.stderr.close()

    def stop(self) -> None:
        """Stops anvil (it dumps ``--state`` on the way out)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()

    def __enter__(self) -> Anvil:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
