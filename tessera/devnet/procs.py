"""The devnet's node processes: each validator and miner is a ``tessera validator run`` / ``tessera miner
run`` process with its own key (in its environment), data directory, HTTP port and log file, leading its
own process group. :class:`NodeProcesses` starts, kills, restarts and watches them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from eth_account import Account

from tessera.devnet.config import DevnetConfig, DevnetError


@dataclass
class NodeProc:
    """One node process."""

    name: str
    role: str
    key: str
    port: int
    args: list[str]
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0

    @property
    def address(self) -> str:
        """The node's Ethereum address."""
        return str(Account.from_key(self.key).address)

    @property
    def url(self) -> str:
        """The node's HTTP API."""
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        """Whether the process runs."""
        return self.proc is not None and self.proc.poll() is None


def node_procs(
    cfg: DevnetConfig,
    keys: dict[str, str],
    ports: dict[str, int],
    common: list[str],
    vurls: str,
    tee_env: dict[str, str],
) -> dict[str, NodeProc]:
    """Every node of ``cfg`` with its command-line flags (after the ``common`` ones) and environment."""
    wd = cfg.workdir
    nodes: dict[str, NodeProc] = {}
    for i in range(cfg.validators):
        name = f"validator{i}"
        args = [
            *common,
            "--data-dir",
            str(wd / name),
            "--port",
            str(ports[name]),
            "--peer-urls",
            vurls,
            "--verify.segments-per-miner",
            str(cfg.segments_per_miner),
        ]  # the merge policy is the run file's (tessera.devnet.runfile puts cfg.merge_method there)
        if cfg.tee == "simulated":
            args += ["--dangerous-dev-tee", "true"]
        nodes[name] = NodeProc(
            name,
            "validator",
            keys[name],
            ports[name],
            args,
            {"TESSERA_VALIDATOR_KEY": keys[name], **tee_env},
            wd / "logs" / f"{name}.log",
        )
    for i in range(cfg.miners):
        name = f"miner{i}"
        args = [
            *common,
            "--data-dir",
            str(wd / name),
            "--port",
            str(ports[name]),
            "--checkpoint-urls",
            vurls,
            *("--tee", cfg.tee, "--stake", str(cfg.miner_stake_wei())),  # the deployed stake
        ]
        if name in cfg.miner_devices:
            args += ["--device", cfg.miner_devices[name]]
        nodes[name] = NodeProc(
            name,
            "miner",
            keys[name],
            ports[name],
            args,
            {"TESSERA_MINER_KEY": keys[name], **tee_env},
            wd / "logs" / f"{name}.log",
        )
    return nodes


class NodeProcesses:
    """Start, kill, restart and watch :attr:`nodes` (a mixin of ``tessera.devnet.network.Devnet``)."""

    cfg: DevnetConfig
    nodes: dict[str, NodeProc]

    # -- processes -------------------------------------------------------------------------------------
    def spawn(self, name: str) -> None:
        """Start (or restart) a node process."""
        n = self.nodes[name]
        if n.alive():
            return
        env = {**os.environ, **n.env, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": str(self.cfg.threads)}
        logf = open(n.log_path, "ab")
        # an adversary (--adversary) runs through the attack harness's entry point; honest nodes through
        # the product command, which knows no adversarial behaviour
        module = "tessera.attack.node" if {"--behaviour", "--mode"} & set(n.args) else "tessera"
        n.proc = subprocess.Popen(
            [sys.executable, "-m", module, "-v", n.role, "run", *n.args],
            env=env,
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        logf.close()

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Kill a node (SIGKILL by default: no cleanup, as in a crash) with the processes it started: each
        node leads its own process group, and its hivemind DHT runs in a forked child (plus a p2pd), which a
        signal to the node alone would leave orphaned and running."""
        n = self.nodes[name]
        if n.proc is not None and n.proc.poll() is None:
            signal_group(n.proc.pid, sig)
            n.proc.wait(timeout=30)

    def restart(self, name: str) -> None:
        """Start a killed node again (it resumes from its data directory)."""
        self.nodes[name].restarts += 1
        self.spawn(name)

    def wait_healthy(self, timeout: float = 120) -> None:
        """Wait until every node answers /health."""
        deadline = time.time() + timeout
        pending = set(self.nodes)
        while pending and time.time() < deadline:
            for name in sorted(pending):
                n = self.nodes[name]
                if not n.alive():
                    raise DevnetError(f"{name} exited at start; see {n.log_path}:\n{self.tail(name)}")
                try:
                    if httpx.get(f"{n.url}/health", timeout=1).status_code == 200:
                        pending.discard(name)
                except httpx.HTTPError:
                    pass
            time.sleep(0.3)
        if pending:
            raise DevnetError(f"nodes not healthy after {timeout}s: {sorted(pending)}")

    def tail(self, name: str, lines: int = 20) -> str:
        """The end of a node's log."""
        try:
            return "\n".join(self.nodes[name].log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def check_alive(self) -> None:
        """Raise if a node died unexpectedly."""
        for n in self.nodes.values():
            if n.proc is not None and n.proc.poll() is not None and n.proc.returncode not in (0, -9, -15):
                raise DevnetError(
                    f"{n.name} exited with {n.proc.returncode}; see {n.log_path}:\n{self.tail(n.name)}"
                )


def signal_group(pid: int, sig: int) -> None:
    """Signal the process group ``pid`` leads (a node started with ``start_new_session``); gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
