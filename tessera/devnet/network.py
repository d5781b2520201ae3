"""The whole network on one machine: anvil, the contracts, a DHT bootstrap peer, validators and miners.

:class:`Devnet` is the composition root of ``tessera devnet`` and of the end-to-end tests. It starts
anvil with a persisted state file, deploys through ``tessera contracts deploy`` (funding every node),
writes the run spec, starts a DHT bootstrap peer, and runs every validator and miner as a separate
``tessera validator run`` / ``tessera miner run`` process with its own key (random, devnet-only, passed in
the environment), data directory, HTTP port and log file. It can kill and restart any node (the e2e tests
do) and stops everything on :meth:`stop`, also when interrupted.

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

import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
from eth_account import Account

from tessera.errors import TesseraError
from tessera.nodes import DEV_TEE_SEED_ENV

log = logging.getLogger(__name__)


class DevnetError(TesseraError):
    """The devnet could not start or lost a component."""


@dataclass
class DevnetConfig:
    """Shape of a devnet."""

    workdir: Path = Path(".devnet")
    miners: int = 4
    validators: int = 2
    mode: str = "moe"
    """``moe`` or ``dipaco``."""
    inner_steps: int = 60
    """H: inner steps per round."""
    batch_size: int = 8
    preset: str = "tiny"
    """The model preset (``training.presets``: tiny, 1m, 10m, 50m, 125m); its shape and learning rate."""
    corpus: str = "bundled"
    """``bundled`` or a ``.txt``/``.jsonl`` file or a folder of them (``training.corpus.load_corpus_path``):
    the run file names it by absolute path and pins its content digest, so every node derives the same
    token streams."""
    bpe_vocab: int | None = None
    """Train a BPE tokenizer of this many tokens on :attr:`corpus` (``DIR/tokenizer.json``, pinned in the
    run file); None: byte-level tokens."""
    samples: int = 2
    """Continuations of :attr:`sample_prompt` generated from each round's certified checkpoint (0: none)."""
    sample_prompt: str = "The "
    """The prompt the samples continue."""
    segments_per_miner: int = 2
    commit_blocks: int = 60
    """Least blocks of the commit phase (the sized window is never shorter)."""
    reveal_blocks: int = 10
    """Least blocks of the reveal phase."""
    score_commit_blocks: int = 30
    """Least blocks of the score-commit phase."""
    score_reveal_blocks: int = 10
    """Least blocks of the score-reveal phase."""
    size_phases: bool = True
    """Size each phase from the work measured on this machine (:mod:`tessera.devnet.sizing`); False: the
    ``*_blocks`` above as they are."""
    phase_safety: float = 4.0
    """Safety factor on the measured work (``tessera.devnet.sizing.LOAD_SAFETY``)."""
    block_time: float = 1.0
    fast_forward: bool = True
    tee: str = "simulated"
    """Miners serve evidence from the development enclave; validators trust its root (devnet only)."""
    merge_method: str = "mean"
    fresh: bool = True
    """Start from an empty workdir (False: resume the persisted chain and node state)."""
    threads: int = 1
    state_interval: float | None = None
    """Seconds between anvil's periodic state dumps (None: only on a clean exit). ``tessera faults`` sets
    it so that a ``kill -9`` of the chain restarts from the last dump."""
    extra_args: dict[str, list[str]] = field(default_factory=dict)
    """Extra command-line flags per node name (appended: they win over the defaults)."""
    node_env: dict[str, dict[str, str]] = field(default_factory=dict)
    """Extra environment variables per node name (e.g. ``{"miner1": {"ATEN_CPU_CAPABILITY": "default"}}``);
    they win over the devnet's own."""

    def node_names(self) -> list[str]:
        """Every node's name: ``validator0..``, then ``miner0..``."""
        return [f"validator{i}" for i in range(self.validators)] + [f"miner{i}" for i in range(self.miners)]


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


@dataclass
class Devnet:
    """A running local network."""

    cfg: DevnetConfig
    nodes: dict[str, NodeProc] = field(default_factory=dict)
    anvil: Any = None
    chain: Any = None
    dht: Any = None
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
        """Start everything; raises :class:`DevnetError` with the failing step."""
        from protocol.anvil import Anvil, free_port
        from protocol.dht import DHTConfig, DHTNode
        from protocol.runspec import RunSpec

        cfg = self.cfg
        wd = cfg.workdir
        if cfg.fresh and wd.exists():
            shutil.rmtree(wd)
        wd.mkdir(parents=True, exist_ok=True)
        (wd / "logs").mkdir(exist_ok=True)
        self.started_at = time.time()
        keys = self._keys()
        if cfg.bpe_vocab is not None and (cfg.fresh or not tokenizer_path(cfg).exists()):
            from tessera.commands.runspec import train_tokenizer_file

            train_tokenizer_file(cfg.corpus, cfg.bpe_vocab, tokenizer_path(cfg))
        spec = devnet_spec(cfg)
        self.run_path = wd / "run.json"
        if cfg.fresh or not self.run_path.exists():
            spec.save(self.run_path)
        spec = RunSpec.load(self.run_path)
        self.streams = build_streams(spec)
        log.info("corpus and token streams: %s", self.streams)
        genesis = spec.genesis_digest()
        self.phases = self._size_phases()

        port_file = wd / "anvil.port"
        port = int(port_file.read_text()) if port_file.exists() and not cfg.fresh else free_port()
        port_file.write_text(str(port))
        self.anvil = Anvil(
            port=port,
            state=wd / "anvil-state.json",
            block_time=cfg.block_time,
            accounts=2,
            state_interval=cfg.state_interval,
        ).start()
        for front in self.rpc_fronts.values():
            front.set_target(port)
        self._rpc("anvil_setBalance", [Account.from_key(keys["deployer"]).address, hex(10**24)])
        for k in keys.values():
            self._rpc("anvil_setBalance", [Account.from_key(k).address, hex(10**22)])
        self.deployment_path = wd / "deployment.json"
        self._deploy(keys, genesis)

        from protocol.chain import Chain
        from protocol.deployment import Deployment

        self.chain = Chain.connect(Deployment.load(self.deployment_path), rpc_url=self.anvil.rpc_url)
        self.dht = DHTNode(DHTConfig(start_timeout=30)).start()
        peers = ",".join(self.dht.visible_maddrs())

        ports = self._ports(wd, cfg.node_names())
        for name, front in self.http_fronts.items():
            front.set_target(ports[name])
        vurls = ",".join(self._public_url(f"validator{i}", ports) for i in range(cfg.validators))
        # a fresh development-TEE root per run, handed to the nodes in their environment (not on a
        # command line that `ps` shows): issue 10 forged quotes from the old fixed, public seed
        tee_env = {DEV_TEE_SEED_ENV: secrets.token_hex(32)} if cfg.tee == "simulated" else {}
        common = [
            "--run-file",
            str(self.run_path),
            "--deployment",
            str(self.deployment_path),
            "--dht-peers",
            peers,
            "--threads",
            str(cfg.threads),
        ]
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
                "--segments-per-miner",
                str(cfg.segments_per_miner),
                "--merge-method",
                cfg.merge_method,
            ]
            if cfg.tee == "simulated":
                args += ["--dangerous-dev-tee", "true"]
            self.nodes[name] = NodeProc(
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
                "--tee",
                cfg.tee,
            ]
            self.nodes[name] = NodeProc(
                name,
                "miner",
                keys[name],
                ports[name],
                args,
                {"TESSERA_MINER_KEY": keys[name], **tee_env},
                wd / "logs" / f"{name}.log",
            )
        for n in self.nodes.values():
            if n.name in self.rpc_fronts:
                n.args += ["--rpc-url", self.rpc_fronts[n.name].url]
            if n.name in self.http_fronts:
                n.args += ["--public-url", self.http_fronts[n.name].url]
            n.args += cfg.extra_args.get(n.name, [])
            n.env.update(cfg.node_env.get(n.name, {}))
            self.spawn(n.name)
        self.wait_healthy(timeout=180)
        self.wait_registered(timeout=120)
        if cfg.block_time:
            self._rpc("evm_setIntervalMining", [int(cfg.block_time)])
        return self

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
        from protocol.anvil import free_port

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
        for name, k in keys.items():
            if name.startswith("validator"):
                fund[Account.from_key(k).address] = 2000 * 10**18
            elif name.startswith("miner"):
                fund[Account.from_key(k).address] = 200 * 10**18
        params = {"genesis_checkpoint": genesis, **self.phases.blocks()}
        deploy_contracts(self.anvil.rpc_url, keys["deployer"], self.deployment_path, params, fund)

    def _floors(self) -> dict[str, int]:
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
        from tessera.devnet.sizing import (
            PhaseWindows,
            SizingError,
            WorkTimes,
            measure_node_work,
            phase_windows,
            slowest,
        )

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
            _signal_group(n.proc.pid, sig)
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

    # -- pacing ----------------------------------------------------------------------------------------
    def fast_forward(self) -> bool:
        """Mine the rest of the phase when every node has done its part; True if blocks were mined."""
        if not self.cfg.fast_forward:
            return False
        alive = {n.address for n in self.nodes.values() if n.role == "miner" and n.alive()}
        nv = sum(1 for n in self.nodes.values() if n.role == "validator" and n.alive())
        return fast_forward_phase(self.chain, self.anvil.rpc_url, nv, alive, self._miners_served)

    def _miners_served(self, r: int) -> int:
        served = 0
        for n in self.nodes.values():
            if n.role != "miner" or not n.alive():
                continue
            try:
                rec = httpx.get(f"{n.url}/rounds", timeout=2).json().get(str(r), {})
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
            _signal_group(n.proc.pid, signal.SIGKILL)  # whatever it started and left behind
        if self.dht is not None:
            self.dht.shutdown()
            self.dht = None
        if self.anvil is not None:
            self.anvil.stop()
            self.anvil = None


#: The devnet's BPE tokenizer file, next to its run file (which names it by this relative path).
TOKENIZER_FILE = "tokenizer.json"


def tokenizer_path(cfg: DevnetConfig) -> Path:
    """Where the devnet writes its BPE tokenizer: beside ``run.json``, which names it relative to itself
    (``protocol.runspec.RunSpec.resolve``), so nodes find it from any working directory."""
    return (cfg.workdir / TOKENIZER_FILE).resolve()


def build_streams(spec: Any) -> dict[str, Any]:
    """Build the run's token streams as every node will (``training.data.prepare`` of the run file's corpus,
    checked against its pinned digest, tokenized by its pinned tokenizer) and describe them. Raises the
    typed errors of a bad corpus before anything starts: ``training.corpus.CorpusError`` (missing, not
    UTF-8, no documents...), ``protocol.runspec.CorpusDigestError`` (the files changed since the run file
    pinned them), ``training.errors.DataError`` (too small for a train/held-out split)."""
    from training.data import prepare

    corpus = spec.load_corpus()
    ds = prepare(corpus, spec.model)
    return {
        "corpus": spec.corpus,
        "corpus_digest": corpus.digest,
        "documents": len(corpus.documents),
        "bytes": corpus.n_bytes,
        "tokenizer": "bytes" if spec.tokenizer is None else spec.tokenizer.digest,
        "train_tokens": int(ds.train.numel()),
        "heldout_tokens": int(ds.heldout.numel()),
    }


def devnet_spec(cfg: DevnetConfig) -> Any:
    """The devnet's run: the configured preset (``training.presets``; ``tiny`` is the devnet's historical
    model) in the configured mode, its inner loop, the network's training recipe (``OuterConfig.recipe()``,
    ``CodecConfig.recipe()``; docs/decisions/training-recipe.md), the configured corpus (a user corpus by
    absolute path, its content digest pinned; ``training.corpus.CorpusError`` if unusable) and, with
    :attr:`DevnetConfig.bpe_vocab`, the BPE tokenizer at :func:`tokenizer_path` (which must exist), named
    relative to the run file. Its ``base_dir`` is the workdir, where ``run.json`` goes."""
    from protocol.runspec import RunSpec
    from training.config import CodecConfig, InnerConfig, OuterConfig
    from training.merge import MergePolicy
    from training.presets import get_preset

    preset = get_preset(cfg.preset)
    tokenizer = None
    if cfg.bpe_vocab is not None:
        from tessera.commands.runspec import tokenizer_spec

        tokenizer = replace(tokenizer_spec(str(tokenizer_path(cfg))), file=TOKENIZER_FILE)
    corpus, corpus_digest = "bundled", None
    if cfg.corpus != "bundled":
        from training.corpus import load_corpus_path

        corpus = os.path.abspath(cfg.corpus)
        corpus_digest = load_corpus_path(corpus).digest
    inner = InnerConfig(steps=cfg.inner_steps, batch_size=cfg.batch_size, transcript_interval=1)
    return RunSpec(
        model=preset.model(cfg.mode, 256 if tokenizer is None else tokenizer.vocab_size),
        inner=replace(inner, lr=preset.lr),
        outer=OuterConfig.recipe(),
        codec=CodecConfig.recipe(),
        corpus=corpus,
        corpus_digest=corpus_digest,
        tokenizer=tokenizer,
        merge=MergePolicy(cfg.merge_method),  # the validators' (--merge), which miners rebuild with
        base_dir=cfg.workdir.resolve(),
    )


def _signal_group(pid: int, sig: int) -> None:
    """Signal the process group ``pid`` leads (a node started with ``start_new_session``); gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def anvil_rpc(rpc_url: str, method: str, params: list[Any]) -> Any:
    """One JSON-RPC call to anvil (``anvil_mine``, ``anvil_setBalance``...); raises :class:`DevnetError`."""
    r = httpx.post(rpc_url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, timeout=30)
    doc = r.json()
    if "error" in doc:
        raise DevnetError(f"anvil {method}: {doc['error']}")
    return doc.get("result")


def deploy_contracts(
    rpc_url: str, deployer_key: str, out: Path, params: dict[str, Any], fund: dict[str, int]
) -> None:
    """Deploy through ``tessera contracts deploy`` (``params``: NetworkParams fields) and fund accounts."""
    cmd = [sys.executable, "-m", "tessera", "contracts", "deploy", "--rpc-url", rpc_url,
           "--key-env", "TESSERA_DEVNET_DEPLOYER_KEY", "--out", str(out)]  # fmt: skip
    for name, value in params.items():
        cmd += ["--" + name.replace("_", "-"), str(value)]
    for addr, wei in fund.items():
        cmd += ["--fund", f"{addr}={wei}"]
    env = {**os.environ, "TESSERA_DEVNET_DEPLOYER_KEY": deployer_key}
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, timeout=300)
    if r.returncode != 0:
        raise DevnetError(f"deploy failed: {r.stderr.strip()[-2000:]}")


def fast_forward_phase(chain: Any, rpc_url: str, nv: int, miners: set[str], miners_served: Any) -> bool:
    """Mine the rest of the phase when ``nv`` validators and the live ``miners`` (addresses) have done
    their part; ``miners_served(round)`` counts miners serving their update. True if blocks were mined."""
    from protocol.chain import Phase

    st = chain.round_state()
    block = chain.block_number()
    if st.phase == Phase.FINALIZE or block > st.deadline:
        return False
    r = st.round
    opened = min(
        (e.block_number for e in chain.events("PhaseAdvanced", round=r) if int(e.phase) == 0),
        default=0,
    )
    joined = {str(e.account) for e in chain.events("Registered") if e.block_number < opened}
    nm = len(set(miners) & joined)
    done = False
    if st.phase == Phase.COMMIT:
        seeds = len(chain.events("SeedCommitted", round=r))
        done = st.commits >= nm and seeds >= nv and chain.checkpoint(r) != b"\0" * 32
    elif st.phase == Phase.REVEAL:
        done = st.seed_reveals >= nv and miners_served(r) >= st.commits
    elif st.phase == Phase.SCORE_COMMIT:
        done = len(chain.events("ScoresCommitted", round=r)) >= nv
    elif st.phase == Phase.SCORE_REVEAL:
        done = st.score_reveals >= nv
    if done:
        # re-check that the phase did not move meanwhile (someone advanced it): never eat the next one
        again = chain.round_state()
        block = chain.block_number()
        if (again.round, again.phase) == (st.round, st.phase) and block <= again.deadline:
            anvil_rpc(rpc_url, "anvil_mine", [hex(again.deadline - block + 1)])
            return True
    return False
