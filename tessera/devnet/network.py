"""The whole network on one machine: anvil, the contracts, a DHT bootstrap peer, validators and miners.

:class:`Devnet` is the composition root of ``tessera devnet`` and of the end-to-end tests. It starts
anvil with a persisted state file, deploys through ``tessera contracts deploy`` (funding every node),
writes the run spec, starts a DHT bootstrap peer, and runs every validator and miner as a separate
``tessera validator run`` / ``tessera miner run`` process with its own key (random, devnet-only, passed in
the environment), data directory, HTTP port and log file. It can kill and restart any node (the e2e tests
do) and stops everything on :meth:`stop`, also when interrupted. Its parts: the configuration
(:mod:`tessera.devnet.config`), the run file and token streams (:mod:`tessera.devnet.runfile`), anvil and
the contracts (:mod:`tessera.devnet.chainops`), the node processes (:mod:`tessera.devnet.procs`); the DHT
peer, the phase windows and the pacing are here.

Pacing: anvil mines a block a second; when every node has done what a phase needs (all miners committed,
all validators revealed...), the devnet mines the rest of the phase at once (``anvil_mine``) so a round
lasts as long as its work, not as long as its deadlines. ``fast_forward=False`` keeps wall-clock phases.

Phase windows: before deploying, the devnet times the work each phase must hold on this machine (a node's
start, one miner's round, one validator's check of an update, a held-out evaluation, the merge), in a
process started like a node under every distinct node environment (``node_env``; the slowest wins), and
derives each phase's blocks from it with a load safety factor, floored at the configured ``*_blocks``
(:mod:`tessera.devnet.sizing`). The derivation is logged, written to ``phases.json`` and reported.

Node environments: ``node_env`` adds environment variables to chosen nodes' processes, e.g. the CPU
instruction set torch's kernels may use (``ATEN_CPU_CAPABILITY``, ``MKL_ENABLE_INSTRUCTIONS``,
``ONEDNN_MAX_CPU_ISA``): ``tessera faults mixed-hardware`` runs nodes under different ones.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from eth_account import Account

from protocol.errors import ProtocolError
from protocol.rounds.anvil import Anvil, free_port
from protocol.rounds.deployment import Deployment
from tessera.commands.runspec import train_tokenizer_file
from tessera.devnet.chainops import anvil_rpc, deploy_contracts, fast_forward_phase
from tessera.devnet.config import DevnetConfig, DevnetError
from tessera.devnet.procs import NodeProc, NodeProcesses, node_procs, signal_group
from tessera.devnet.runfile import build_streams, devnet_spec, tokenizer_path
from tessera.nodes import DEV_TEE_SEED_ENV

#: What other modules import from here (the devnet's parts live in config, chainops, procs, runfile).
__all__ = [
    "Devnet",
]

log = logging.getLogger(__name__)


@dataclass
class Devnet(NodeProcesses):
    """A running local network."""

    cfg: DevnetConfig
    nodes: dict[str, NodeProc] = field(default_factory=dict)
    anvil: Any = None
    chain: Any = None
    driver_traffic: Any = None
    """The devnet driver's own JSON-RPC bytes (a ``TrafficLedger``): not the nodes', but on the wire."""
    dht: Any = None
    dht_traffic: Any = None
    """What the DHT bootstrap peer's daemon received, into ``driver_traffic`` (``DhtTraffic``)."""
    deployment_path: Path = Path()
    run_path: Path = Path()
    started_at: float = 0.0
    rpc_fronts: dict[str, Any] = field(default_factory=dict)
    """Node name -> a :class:`tessera.devnet.proxy.FaultProxy` the node reaches the chain through."""
    http_fronts: dict[str, Any] = field(default_factory=dict)
    """Node name -> a proxy in front of the node's HTTP API: its public URL and the URL peers are given."""
    phases: Any = None
    """The deployed phase windows (:class:`tessera.devnet.sizing.PhaseWindows`) with their derivation."""
    streams: dict[str, Any] = field(default_factory=dict)
    """The run's corpus and token streams as the devnet built them (:func:`build_streams`)."""

    # -- start -----------------------------------------------------------------------------------------
    def start(self) -> Devnet:
        """Start everything; raises :class:`DevnetError` with the failing step (a bad corpus: the typed
        error of ``training.corpus`` / ``protocol.runspec``, before anything runs)."""
        from protocol.node.dhttraffic import DhtTraffic
        from protocol.p2p.dht import DHTConfig, DHTNode

        cfg = self.cfg
        if cfg.fresh and cfg.workdir.exists():
            shutil.rmtree(cfg.workdir)
        (cfg.workdir / "logs").mkdir(parents=True, exist_ok=True)
        self.started_at = time.time()
        keys = self._keys()
        genesis = self._write_run()
        self.phases = self._size_phases()
        self._start_chain(keys, genesis)
        self.dht = DHTNode(DHTConfig(start_timeout=30)).start()
        self.dht_traffic = DhtTraffic(self.driver_traffic).start()  # only its own p2pd: not the nodes'
        self._start_nodes(keys)
        self.wait_healthy(timeout=180)
        self.wait_registered(timeout=120)
        if cfg.block_time:
            self._rpc("evm_setIntervalMining", [int(cfg.block_time)])
        return self

    def _write_run(self) -> str:
        """Train the BPE tokenizer (``bpe_vocab``), write ``run.json`` (kept on a resume), build the token
        streams from it as every node will; returns the genesis checkpoint's digest."""
        from protocol.runspec import RunSpec

        cfg = self.cfg
        if cfg.bpe_vocab is not None and (cfg.fresh or not tokenizer_path(cfg).exists()):
            train_tokenizer_file(cfg.corpus, cfg.bpe_vocab, tokenizer_path(cfg))
        spec = devnet_spec(cfg)
        self.run_path = cfg.workdir / "run.json"
        if cfg.fresh or not self.run_path.exists():
            spec.save(self.run_path)
        spec = RunSpec.load(self.run_path)
        self.streams = build_streams(spec)
        log.info("corpus and token streams: %s", self.streams)
        return str(spec.genesis_digest())

    def _start_chain(self, keys: dict[str, str], genesis: str) -> None:
        """anvil (on the port it had when resuming), the accounts' balances, the contracts, the client."""
        from protocol.chain import Chain

        cfg = self.cfg
        port_file = cfg.workdir / "anvil.port"
        port = int(port_file.read_text()) if port_file.exists() and not cfg.fresh else free_port()
        port_file.write_text(str(port))
        self.anvil = Anvil(
            port=port,
            state=cfg.workdir / "anvil-state.json",
            block_time=cfg.block_time,
            accounts=2,
            state_interval=cfg.state_interval,
        ).start()
        for front in self.rpc_fronts.values():
            front.set_target(port)
        self._rpc("anvil_setBalance", [Account.from_key(keys["deployer"]).address, hex(10**24)])
        for k in keys.values():
            self._rpc("anvil_setBalance", [Account.from_key(k).address, hex(10**22)])
        self.deployment_path = cfg.workdir / "deployment.json"
        self._deploy(keys, genesis)
        from protocol.node.traffic import TrafficLedger

        self.driver_traffic = TrafficLedger()
        dep = Deployment.load(self.deployment_path)
        self.chain = Chain.connect(dep, rpc_url=self.anvil.rpc_url, traffic=self.driver_traffic)

    def _start_nodes(self, keys: dict[str, str]) -> None:
        """Every validator and miner process (``tessera.devnet.procs``), behind its proxies if any."""
        cfg = self.cfg
        ports = self._ports(cfg.workdir, cfg.node_names())
        for name, front in self.http_fronts.items():
            front.set_target(ports[name])
        vurls = ",".join(self._public_url(f"validator{i}", ports) for i in range(cfg.validators))
        # a fresh development-TEE root per run, handed to the nodes in their environment (not on a
        # command line that `ps` shows): quotes were once forged from a fixed, public seed
        tee_env = {DEV_TEE_SEED_ENV: secrets.token_hex(32)} if cfg.tee == "simulated" else {}
        common = [
            "--run-file",
            str(self.run_path),
            "--deployment",
            str(self.deployment_path),
            "--dht-peers",
            ",".join(self.dht.visible_maddrs()),
            "--threads",
            str(cfg.threads),
        ]
        self.nodes.update(node_procs(cfg, keys, ports, common, vurls, tee_env))
        for n in self.nodes.values():
            if n.name in self.rpc_fronts:
                n.args += ["--rpc-url", self.rpc_fronts[n.name].url]
            if n.name in self.http_fronts:
                n.args += ["--public-url", self.http_fronts[n.name].url]
            n.args += cfg.extra_args.get(n.name, [])
            n.env.update(cfg.node_env.get(n.name, {}))
            self.spawn(n.name)

    def _public_url(self, name: str, ports: dict[str, int]) -> str:
        front = self.http_fronts.get(name)
        return str(front.url) if front is not None else f"http://127.0.0.1:{ports[name]}"

    # -- the chain process -----------------------------------------------------------------------------
    def kill_chain(self) -> None:
        """SIGKILL anvil: no state dump on the way out; what was mined since the last periodic dump
        (``state_interval``) is lost when it comes back."""
        self.anvil.kill()

    def restart_chain(self) -> None:
        """Start anvil again on the same port from its state file (the last dump)."""
        self.anvil.start()

    def wait_registered(self, timeout: float = 120) -> None:
        """Wait until every node's registration is on-chain."""
        deadline = time.time() + timeout
        want = {n.address for n in self.nodes.values()}
        while time.time() < deadline:
            got = {str(e.account) for e in self.chain.events("Registered")}
            if want <= got:
                return
            self.check_alive()
            time.sleep(0.5)
        raise DevnetError(f"nodes not registered after {timeout}s")

    def _keys(self) -> dict[str, str]:
        """Devnet-only keys, random per devnet and kept in the workdir (never in the repository)."""
        path = self.cfg.workdir / "devnet-keys.json"
        names = (
            ["deployer"]
            + [f"validator{i}" for i in range(self.cfg.validators)]
            + [f"miner{i}" for i in range(self.cfg.miners)]
        )
        keys: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
        for n in names:
            keys.setdefault(n, "0x" + secrets.token_hex(32))
        path.write_text(json.dumps(keys, indent=1))
        os.chmod(path, 0o600)
        return keys

    def _ports(self, wd: Path, names: list[str]) -> dict[str, int]:
        path = wd / "ports.json"
        ports: dict[str, int] = json.loads(path.read_text()) if path.exists() else {}
        for n in names:
            if n not in ports:
                ports[n] = free_port()
        path.write_text(json.dumps(ports))
        return ports

    def _rpc(self, method: str, params: list[Any]) -> Any:
        return anvil_rpc(self.anvil.rpc_url, method, params)

    def _deploy(self, keys: dict[str, str], genesis: str) -> None:
        fund = {}
        stake = self.cfg.miner_stake_wei()
        for name, k in keys.items():
            if name.startswith("validator"):
                fund[Account.from_key(k).address] = 2000 * 10**18
            elif name.startswith("miner"):
                fund[Account.from_key(k).address] = 2 * stake
        # the stake sets q (the deterrence formula): 350,000 tokens by default, q = 0.39%
        params = {"genesis_checkpoint": genesis, "min_miner_stake": stake, **self.phases.blocks()}
        # the run file's audit section gives q (the deterrence formula), c, K and the slash
        deploy_contracts(
            self.anvil.rpc_url, keys["deployer"], self.deployment_path, params, fund, self.run_path
        )

    def _floors(self) -> dict[str, float]:
        """Each phase's least window: seconds when the phases are sized (the ``*_blocks`` settings were
        set at 1-s blocks), blocks as they are when not."""
        cfg = self.cfg
        return {
            "commit": max(cfg.commit_blocks, 5 * cfg.miners),
            "reveal": cfg.reveal_blocks,
            "score_commit": max(cfg.score_commit_blocks, 4 * cfg.miners),
            "score_reveal": cfg.score_reveal_blocks,
        }

    def _size_phases(self) -> Any:
        """The phase windows: measured and derived (:mod:`tessera.devnet.sizing`), or the floors as they
        are (``size_phases=False``); a resumed devnet keeps the windows it deployed with."""
        from tessera.devnet.sizing import PhaseWindows, SizingError, measure_node_work, phase_windows, slowest
        from tessera.devnet.work import WorkTimes

        cfg = self.cfg
        path = cfg.workdir / "phases.json"
        if not cfg.fresh and path.exists() and (cfg.workdir / "deployment.json").exists():
            return PhaseWindows.from_json(json.loads(path.read_text()))
        floors = self._floors()
        if not cfg.size_phases:
            zero = WorkTimes(0.0, 0.0, 0.0, 0.0)
            pw = phase_windows(
                zero, miners=cfg.miners, validators=cfg.validators, block_time=0, floors=floors
            )
        else:
            settings: list[dict[str, str]] = []
            for name in cfg.node_names():
                s = dict(cfg.node_env.get(name, {}))
                if s not in settings:
                    settings.append(s)
            measured = []
            for s in settings:
                try:
                    w = measure_node_work(
                        self.run_path, miners=cfg.miners, validators=cfg.validators,
                        segments=cfg.segments_per_miner, merge_method=cfg.merge_method, threads=cfg.threads,
                        setting=s,
                    )  # fmt: skip
                except SizingError as exc:
                    who = [n for n in cfg.node_names() if cfg.node_env.get(n, {}) == s]
                    raise DevnetError(f"node setting of {', '.join(who)}: {exc}") from exc
                log.info("work measured under %s: %s", s or "the devnet's environment", w.to_json())
                measured.append(w)
            pw = phase_windows(
                slowest(measured), miners=cfg.miners, validators=cfg.validators, block_time=cfg.block_time,
                floors=floors, threads=cfg.threads, safety=cfg.phase_safety,
            )  # fmt: skip
            pw.inputs["measured"] = [w.to_json() for w in measured]
        for line in pw.derivation:
            log.info("phase window %s", line)
        path.write_text(json.dumps(pw.to_json(), indent=1))
        return pw

    def round_seconds(self) -> float:
        """The longest a round can last if every phase is waited out (the tests' and drivers' patience)."""
        return float(self.phases.round_seconds(self.cfg.block_time)) if self.phases is not None else 0.0

    # -- pacing ----------------------------------------------------------------------------------------
    def fast_forward(self) -> bool:
        """Mine the rest of the phase when every node has done its part; True if blocks were mined."""
        if not self.cfg.fast_forward:
            return False
        alive = {n.address for n in self.nodes.values() if n.role == "miner" and n.alive()}
        nv = sum(1 for n in self.nodes.values() if n.role == "validator" and n.alive())
        try:
            return fast_forward_phase(self.chain, self.anvil.rpc_url, nv, alive, self._miners_served)
        except (httpx.HTTPError, OSError, DevnetError, ProtocolError) as exc:
            # a loaded machine can time out an ``anvil_mine`` or a read (30 s): the phase then runs out on
            # the wall clock or the next poll mines it; it never ends the run (measurement)
            log.warning("fast-forward skipped: %s: %s", type(exc).__name__, exc)
            return False

    def _miners_served(self, round: int) -> int:
        served = 0
        for n in self.nodes.values():
            if n.role != "miner" or not n.alive():
                continue
            try:
                rec = httpx.get(f"{n.url}/rounds", timeout=2).json().get(str(round), {})
                served += rec.get("status") == "served"
            except (httpx.HTTPError, ValueError):
                pass
        return served

    # -- observation -----------------------------------------------------------------------------------
    def get(self, name: str, path: str) -> Any:
        """GET a node's API (None if it does not answer)."""
        try:
            r = httpx.get(f"{self.nodes[name].url}{path}", timeout=3)
            return r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def certified_rounds(self) -> int:
        """The last round whose next checkpoint is certified."""
        st = self.chain.round_state()
        r = st.round
        while r > 1 and self.chain.checkpoint(r) == b"\0" * 32:
            r -= 1
        return r - 1

    # -- stop ------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL), the DHT peer and anvil (which saves its state)."""
        for n in self.nodes.values():
            if n.alive():
                assert n.proc is not None
                n.proc.send_signal(signal.SIGTERM)
        deadline = time.time() + 15
        for n in self.nodes.values():
            if n.proc is None:
                continue
            try:
                n.proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                n.proc.kill()
                n.proc.wait()
            signal_group(n.proc.pid, signal.SIGKILL)  # whatever it started and left behind
        if self.dht_traffic is not None:
            self.dht_traffic.stop()
            self.dht_traffic = None
        if self.dht is not None:
            self.dht.shutdown()
            self.dht = None
        if self.anvil is not None:
            self.anvil.stop()
            self.anvil = None
