"""A whole Tessera network in one process, driven in lockstep, for attack scenarios.

The participants are the real node classes (``miner.node.MinerNode``, ``validator.node.ValidatorNode``,
or their adversarial subclasses) with their real HTTP servers, state directories, verification, merge
and certification. The chain is real by default (``chain="anvil"``): a fresh anvil with freshly deployed
contracts per scenario, the nodes on ``protocol.chain.coordinator.ChainCoordinator`` (see
:mod:`tessera.attack.chainnet`). ``chain="memory"`` swaps in :class:`protocol.rounds.memcoordinator.MemoryLedger`
(the contract's semantics in memory), a fast option whose reports say ``chain: memory``. One seam is
always replaced so that a scenario is deterministic on 2 CPU cores:

- discovery is a shared :class:`BoardDiscovery`: records are signed and every read goes through
  ``protocol.wire.records.decode_record``'s strict validation, only the DHT transport is skipped.

The nodes are stepped round-robin (one ``step()`` each, then one block; on anvil the devnet's fast-forward
mines the rest of a phase once every node has done its part) until the wanted number of
rounds is settled and certified. Each ``step()`` is what the node's own ``run`` loop calls.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eth_account import Account

from miner.config import MinerConfig
from miner.errors import MinerError
from miner.node import MinerNode
from miner.state import SERVED
from protocol.errors import ProtocolError
from protocol.rounds.memcoordinator import MemoryCoordinator, MemoryLedger
from protocol.runspec import RunSpec
from protocol.wire.tensorblob import decode_tensors, split_checkpoint, tensors_digest
from tessera.attack.board import BoardDiscovery
from tessera.attack.chainnet import OFFSET, AnvilLedger
from tessera.attack.errors import AttackError
from training.config import CodecConfig, InnerConfig, ModelConfig
from training.errors import TrainingError
from validator.config import ValidatorConfig
from validator.errors import ValidatorError
from validator.node import ValidatorNode
from validator.usefulness import heldout_loss

log = logging.getLogger(__name__)


def tiny_spec(steps: int = 6, interval: int = 2) -> Any:
    """A run small enough for several rounds of several nodes on 2 CPU cores (H = steps, k = interval)."""
    model = ModelConfig(
        mode="moe", d_model=32, n_heads=2, n_layers=1, d_ff=32, seq_len=32, n_experts=2, top_k=1
    )
    inner = InnerConfig(steps=steps, batch_size=4, transcript_interval=interval, warmup_steps=2)
    return RunSpec(model=model, inner=inner, codec=CodecConfig(chunk=64, topk=16, bits=8))


def _key(i: int) -> str:
    return "0x" + (i + 1).to_bytes(32, "big").hex()


@dataclass
class Fault:
    """Kill participant ``participant`` (an index) when round ``round`` reaches phase ``phase`` (its int
    value), and start a fresh node from its data directory ``down_seconds`` later: what ``kill -9`` and a
    restart do (measured: a miner restarted 18 s into REVEAL)."""

    round: int
    phase: int
    participant: int
    down_seconds: float = 0.0
    done: bool = False
    restart_at: float | None = None
    """While the node is down: when it comes back (``time.monotonic()``)."""


#: Builds a miner node: (config, spec, coordinator, discovery) -> node.
MinerFactory = Callable[..., Any]
#: Builds a validator node: (config, spec, coordinator, discovery, private key) -> node.
ValidatorFactory = Callable[..., Any]


@dataclass
class Participant:
    """One node of a scenario."""

    role: str
    label: str
    """Its mode: ``honest`` or the adversarial mode's name."""
    stake: int
    factory: Callable[..., Any] | None = None
    """Node factory (default: the honest node of the role)."""
    address: str = ""
    key: str = ""
    node: Any = None


@dataclass
class NetworkRun:
    """What a finished run observed."""

    rounds: int
    participants: list[Participant]
    ledger: Any
    heldout: list[float]
    """Held-out loss of theta_1 .. theta_{rounds+1} (the certified checkpoints)."""
    verdicts: dict[str, list[dict[str, Any]]]
    """Per miner address: every verdict any honest-labelled validator reached (round, stage, score)."""
    seconds: float
    errors: list[str]
    stalled: str = ""
    """Why the network stopped making progress ("" if it finished)."""


class Network:
    """Compose, step and observe a network of real nodes on a fresh anvil chain (or a memory ledger)."""

    def __init__(
        self,
        participants: list[Participant],
        *,
        spec: Any = None,
        phase_blocks: int = 40,
        emission: int = 1000 * 10**18,
        validator_share_bps: int = 1000,
        workdir: Path | None = None,
        validator_overrides: dict[str, Any] | None = None,
        on_step: Callable[[Network], None] | None = None,
        chain: str = "anvil",
        audit_params: dict[str, int] | None = None,
    ) -> None:
        self.spec = spec or tiny_spec()
        self.audit_params = dict(audit_params or {})
        """The chain's ``audit_rate_bps``, ``committee_size`` and ``vesting_rounds`` where not the default
        (q = 1 and every validator on both chains; K = 0 in memory, ``NetworkParams``' on anvil)."""
        self.participants = participants
        self._tmp = tempfile.TemporaryDirectory(prefix="tessera-attack-") if workdir is None else None
        self.dir: Path = Path(self._tmp.name) if self._tmp is not None else Path(str(workdir))
        self.chain = chain
        for i, p in enumerate(participants):
            p.key = _key(i)
            p.address = Account.from_key(p.key).address
        self.ledger: Any
        self.offset: int
        """Chain rounds before scenario round 1 (node state is keyed by chain rounds)."""
        self.ledger, self.offset = self._open_ledger(phase_blocks, emission, validator_share_bps)
        self.board: dict[tuple[int, str], bytes] = {}
        self.on_step = on_step
        self.errors: list[str] = []
        self._vo = validator_overrides or {}
        self.faults: list[Fault] = []
        self.down: set[int] = set()
        """Participants whose process is down (a fault with ``down_seconds``)."""
        try:
            for i, p in enumerate(participants):
                p.node = self._build(p, i)
        except BaseException:
            self._close_chain()
            raise

    def _open_ledger(self, phase_blocks: int, emission: int, validator_share_bps: int) -> tuple[Any, int]:
        """The chain the nodes run on, with the genesis checkpoint, and its round offset: a fresh anvil with
        the contracts deployed and every participant funded (twice its stake), or the in-memory ledger."""
        genesis = {f"param/{k}": v for k, v in self.spec.genesis_params().items()}
        if self.chain == "memory":
            ledger = MemoryLedger(
                bytes.fromhex(tensors_digest(genesis)[2:]),
                phase_blocks=phase_blocks,
                emission=emission,
                validator_share_bps=validator_share_bps,
                **self.audit_params,
            )
            return ledger, 0
        if self.chain == "anvil":
            anvil = AnvilLedger(
                [(p.key, 2 * p.stake) for p in self.participants],
                tensors_digest(genesis),
                phase_blocks=phase_blocks,
                emission=emission,
                validator_share_bps=validator_share_bps,
                workdir=self.dir,
                audit_params=self.audit_params,
            )
            return anvil, OFFSET
        raise AttackError(f"unknown chain {self.chain!r}: anvil or memory")

    def _entropy(self, key: str) -> Callable[[str, int], bytes]:
        """A validator's seed-share secrets and salts, derived from its key: every run of the suite draws the
        same round seeds for the same validators, so a scenario and its all-honest reference differ only in
        the adversary's behaviour (seeds change assignments and data, a spread larger than 1%)."""

        def draw(purpose: str, round: int) -> bytes:
            return hashlib.sha256(f"tessera.attack.entropy\0{key}\0{purpose}\0{round}".encode()).digest()

        return draw

    def _build(self, p: Participant, i: int) -> Any:
        """A node for participant ``i`` (again after a crash: same key, same data directory)."""
        coord: Any = (
            MemoryCoordinator(self.ledger, p.address)
            if self.chain == "memory"
            else self.ledger.coordinator(p.key)
        )
        stake = p.stake if self.chain == "memory" else p.stake * 10**18
        disc = BoardDiscovery(self.ledger.chain_id, p.key, board=self.board)
        data_dir = self.dir / f"{p.role}-{i}"
        if p.role == "miner":
            mcfg = MinerConfig(data_dir=data_dir, dht=False, stake=stake, fetch_timeout=5.0, fetch_attempts=1)
            return (p.factory or MinerNode)(mcfg, self.spec, coord, disc)
        if p.role == "validator":
            vcfg = ValidatorConfig(
                data_dir=data_dir, dht=False, stake=stake, fetch_timeout=5.0, fetch_attempts=1, **self._vo
            )
            return (p.factory or ValidatorNode)(
                vcfg, self.spec, coord, disc, p.key, entropy=self._entropy(p.key)
            )
        raise AttackError(f"unknown role {p.role!r}")

    def _inject(self) -> None:
        """Crash and restart participants whose fault is due (round and phase reached)."""
        led = self.ledger
        for f in self.faults:
            i = f.participant
            p = self.participants[i]
            if f.restart_at is not None and time.monotonic() >= f.restart_at:
                f.restart_at = None
                p.node = self._build(p, i)
                p.node.start()
                self.down.discard(i)
                log.info("fault: %s %s back after %.0fs", p.role, p.address[:10], f.down_seconds)
                continue
            if f.done or led.round != f.round or int(led.phase) != f.phase:
                continue
            p.node.stop()  # the process dies: its in-memory state is lost, its data directory stays
            f.done = True
            if f.down_seconds > 0:
                f.restart_at = time.monotonic() + f.down_seconds
                self.down.add(i)
            else:
                p.node = self._build(p, i)
                p.node.start()
            self.errors.append(
                f"fault injected: restarted {p.role} {p.address[:10]} in round {f.round} phase {f.phase}"
            )
            log.info("fault: restarted %s %s in round %d phase %d", p.role, p.address[:10], f.round, f.phase)

    def start(self) -> None:
        """Start every node (HTTP servers, registration), then open round 1 with everyone registered.

        A miner joins from the first round that opens after its registration; a scenario's genesis is
        taken to happen once every participant has registered (as a launch would arrange it).
        """
        for p in self.participants:
            p.node.start()
        led = self.ledger
        if led.round == 1 and hasattr(led, "round_open"):
            led.mine(1)
            led.round_open[1] = led.block
            led.phase_start = led.block

    def stop(self) -> None:
        """Stop every node and remove the work directory."""
        for p in self.participants:
            try:
                p.node.stop()
            except Exception as exc:  # best effort at teardown
                log.warning("stopping %s: %s", p.label, exc)
        self._close_chain()
        if self._tmp is not None:
            self._tmp.cleanup()

    def _close_chain(self) -> None:
        if self.chain == "anvil":
            self.ledger.close()

    def _served(self, chain_round: int) -> int:
        """Miners serving their update of ``chain_round`` (their state directory says so)."""
        n = 0
        for p in self.participants:
            if p.role != "miner":
                continue
            try:
                n += getattr(p.node.state.rounds().get(chain_round), "status", None) == SERVED
            except (AttributeError, OSError, ValueError):
                pass
        return n

    def _advance_chain(self) -> None:
        """One block, or on anvil the rest of the phase if every node has done its part."""
        led = self.ledger
        if self.chain == "anvil":
            nv = sum(1 for p in self.participants if p.role == "validator")
            miners = {p.address for p in self.participants if p.role == "miner"}
            if led.fast_forward(nv, miners, self._served):
                return
        led.mine(1)

    def _step_all(self) -> None:
        for i, p in enumerate(self.participants):
            if i in self.down:
                continue
            try:
                p.node.step()
            except (ProtocolError, MinerError, ValidatorError, TrainingError) as exc:
                msg = f"{p.label} {p.address[:10]}: {type(exc).__name__}: {exc}"
                if not self.errors or self.errors[-1] != msg:
                    self.errors.append(msg)
                log.info("%s", msg)

    def run(self, rounds: int, timeout: float = 1800.0, stall_after: float = 90.0) -> NetworkRun:
        """Step until ``rounds`` rounds are finalized and their checkpoints certified.

        If every round is finalized but a checkpoint stays uncertified for ``stall_after`` seconds, or the
        run exceeds ``timeout``, the run ends with ``stalled`` set (the validators could not certify: a
        liveness failure, reported rather than raised).
        """
        t0 = time.perf_counter()
        finalized_at: float | None = None
        stalled = ""
        while True:
            led = self.ledger
            if led.round > rounds and (rounds + 1) in led.checkpoints:
                break
            now = time.perf_counter()
            if led.round > rounds and finalized_at is None:
                finalized_at = now
            uncertified = [r for r in range(2, led.round + 1) if r not in led.checkpoints]
            if finalized_at is not None and now - finalized_at > stall_after:
                stalled = f"theta_{uncertified[0] if uncertified else rounds + 1} never certified"
                break
            if now - t0 > timeout:
                stalled = f"timeout after {timeout:.0f}s in round {led.round} ({led.phase.name}); uncertified {uncertified}"
                break
            self._inject()
            self._step_all()
            if self.on_step is not None:
                self.on_step(self)
            self._advance_chain()
        run = self._observe(rounds, time.perf_counter() - t0)
        run.stalled = stalled
        return run

    def _observe(self, rounds: int, seconds: float) -> NetworkRun:
        honest_v = [p for p in self.participants if p.role == "validator" and p.label == "honest"]
        ref = (
            honest_v[0].node if honest_v else next(p.node for p in self.participants if p.role == "validator")
        )
        heldout = []
        checkpoints = self.ledger.checkpoints
        for r in range(1, rounds + 2):
            digest = checkpoints.get(r)
            if digest is None:
                continue
            hexd = "0x" + digest.hex()
            if r == 1:
                params = self.spec.genesis_params()
            elif ref.public.has(hexd):
                params, _ = split_checkpoint(decode_tensors(ref.public.get(hexd)))
            else:
                continue
            heldout.append(heldout_loss(self.spec, ref.conn.dataset, params))
        verdicts: dict[str, list[dict[str, Any]]] = {}
        for p in honest_v:
            for cr, rec in p.node.state.rounds().items():
                r = int(cr) - self.offset
                if r < 1:
                    continue
                for miner, v in rec.verdicts.items():
                    verdicts.setdefault(miner.lower(), []).append(
                        {"round": r, "validator": p.address, "stage": v.stage, "score": v.score,
                         "provable": v.provable, "reason": v.reason[:160]}
                    )  # fmt: skip
        ledger = self.ledger.snapshot() if self.chain == "anvil" else self.ledger
        return NetworkRun(rounds, self.participants, ledger, heldout, verdicts, seconds, list(self.errors))
