"""A slow validator still reveals its scores when the phase windows are sized from the measured work.

The real miner and validator nodes run in one process against the in-memory chain, whose blocks advance
with the wall clock (as anvil's interval mining does), with a fast-forward once every node has done its
part (as the devnet's). One of the two validators is slow: each update it checks costs it ``SLOW_S`` more
seconds (a slower machine, or one under load). The phase windows come from
:func:`tessera.devnet.sizing.phase_windows` applied to the work measured with the nodes' own code on that
validator (:func:`tessera.devnet.sizing.measure_work`), so they hold it: it verifies every update,
commits, reveals, and every honest miner is paid on both validators' scores. The control runs the same
network with the score-commit window at its fixed floor instead, the way the windows were before they
were sized: there the slow validator cannot finish, and it reveals no full score vector.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from eth_account import Account

import validator.pipeline as vpipeline
from miner.config import MinerConfig
from miner.errors import MinerError
from miner.node import MinerNode
from protocol.errors import ProtocolError
from protocol.p2p.dht import DHTConfig, DHTNode
from protocol.p2p.discovery import Discovery
from protocol.rounds.memcoordinator import MemoryCoordinator, MemoryLedger
from protocol.rounds.phases import Phase
from protocol.runspec import RunSpec
from protocol.wire.tensorblob import tensors_digest
from tessera.attack.harness import tiny_spec
from tessera.devnet.sizing import PhaseWindows, phase_windows
from tessera.devnet.work import measure_work
from validator.config import ValidatorConfig
from validator.errors import ValidatorError
from validator.node import ValidatorNode
from validator.policy import VerifyPolicy

BLOCK_TIME = 0.05
"""Seconds per block of the in-memory chain."""
SLOW_S = 1.0
"""Extra seconds the slow validator spends on each update it checks."""
FLOORS = {"commit": 20, "reveal": 20, "score_commit": 20, "score_reveal": 20}
"""Least blocks per phase (1 s each): enough for in-process transactions, not for the slow validator's
checks of two updates (2 x ``SLOW_S``)."""
MINERS = 2


class WallClockLedger(MemoryLedger):
    """A :class:`MemoryLedger` whose block number advances with the wall clock (one per ``block_time``);
    mining (transactions, a fast-forward) adds blocks on top."""

    def __init__(self, genesis: bytes, block_time: float, **kwargs: Any) -> None:
        self._t0 = time.monotonic()
        self._offset = 0
        self.block_time = block_time
        super().__init__(genesis, **kwargs)

    @property  # type: ignore[override]
    def block(self) -> int:
        return self._offset + int((time.monotonic() - self._t0) / self.block_time)

    @block.setter
    def block(self, value: int) -> None:
        self._offset += value - self.block


@pytest.fixture(scope="module")
def dht() -> Iterator[DHTNode]:
    node = DHTNode(DHTConfig()).start()
    yield node
    node.shutdown()


@pytest.fixture
def slow_validator(monkeypatch: pytest.MonkeyPatch) -> str:
    """The slow validator's address: every verification it runs takes ``SLOW_S`` longer."""
    slow = Account.from_key("0x" + f"{0x51:064x}").address
    real = vpipeline.VerificationPipeline.verify

    def verify(self: vpipeline.VerificationPipeline, incoming: Any, ctx: Any) -> Any:
        out = real(self, incoming, ctx)
        if ctx.validator == slow:
            time.sleep(SLOW_S)
        return out

    monkeypatch.setattr(vpipeline.VerificationPipeline, "verify", verify)
    return slow


def _spec() -> RunSpec:
    return tiny_spec(steps=4, interval=1)


#: Extra room for the commit and reveal windows: the test is about the score-commit window, and a load spike
#: on a shared machine between measuring the work and running the round must not make a miner miss its
#: commit (it did, once, with four jobs on two cores). Free when nothing is late: a phase whose work is done
#: is fast-forwarded.
MINER_PHASES_SLACK = 3


def _windows(spec: RunSpec, slow: str) -> PhaseWindows:
    """The windows sized from the work measured on the slow validator (the slowest node)."""
    work = measure_work(spec, miners=MINERS, validators=2, validator=slow)
    # every node of this test runs in one thread: they share one core
    w = phase_windows(work, miners=MINERS, validators=2, block_time=BLOCK_TIME, floors=FLOORS, cores=1)
    return dataclasses.replace(w, commit=w.commit * MINER_PHASES_SLACK, reveal=w.reveal * MINER_PHASES_SLACK)


def _fast_forward(ledger: MemoryLedger, miners: list[MinerNode]) -> None:
    """Mine the rest of the phase once every node has done its part (``tessera.devnet``'s pacing)."""
    r = ledger.round
    rd = ledger.rounds[r]
    nv = len(ledger.validators)
    if ledger.phase == Phase.COMMIT:
        registry = [m for m in ledger.miners if ledger.reg_block[m] < ledger.round_open[r]]
        done = r in ledger.checkpoints and len(rd.seed_commits) >= nv and set(registry) <= set(rd.commits)
    elif ledger.phase == Phase.REVEAL:
        served = [
            getattr(m.state.record(r), "status", None) == "served" for m in miners if m.address in rd.commits
        ]
        done = len(rd.seed_reveals) >= nv and all(served)
    elif ledger.phase == Phase.SCORE_COMMIT:
        done = len(rd.score_commits) >= nv
    elif ledger.phase == Phase.SCORE_REVEAL:
        done = len(rd.reveals) >= nv
    else:
        return
    if done and ledger.block <= ledger.deadline():
        ledger.block = ledger.deadline() + 1


def _coord(ledger: MemoryLedger, key: str) -> Any:
    return MemoryCoordinator(ledger, Account.from_key(key).address)


def _run_round(
    tmp: Path, dht: DHTNode, spec: RunSpec, windows: PhaseWindows, slow: str, chain_id: int
) -> tuple[WallClockLedger, list[ValidatorNode], list[MinerNode]]:
    """Two validators (the second is ``slow``) and ``MINERS`` miners until theta_3 is certified (round 2
    is the first training round)."""
    genesis = tensors_digest({f"param/{k}": v for k, v in spec.genesis_params().items()})
    blocks = [windows.commit, windows.reveal, windows.score_commit, windows.score_reveal]
    ledger = WallClockLedger(bytes.fromhex(genesis[2:]), BLOCK_TIME, phase_blocks=blocks, chain_id=chain_id)
    vkeys = ["0x" + f"{0x50:064x}", "0x" + f"{0x51:064x}"]
    assert Account.from_key(vkeys[1]).address == slow
    mkeys = ["0x" + f"{0x60 + i:064x}" for i in range(MINERS)]
    validators = [
        ValidatorNode(
            ValidatorConfig(data_dir=tmp / f"v{i}", verify=VerifyPolicy(segments_per_miner=2)),
            spec,
            _coord(ledger, k),
            Discovery(chain_id, k, dht),
            k,
        ).start()
        for i, k in enumerate(vkeys)
    ]
    miners = [
        MinerNode(
            MinerConfig(data_dir=tmp / f"m{i}"),
            spec,
            _coord(ledger, k),
            Discovery(chain_id, k, dht),
        ).start()
        for i, k in enumerate(mkeys)
    ]
    nodes: list[Any] = [*validators, *miners]
    t0 = time.time()
    try:
        while 3 not in ledger.checkpoints:
            assert time.time() - t0 < 120, f"no certified round 2 after 120 s (round {ledger.round})"
            for n in nodes:
                try:
                    n.step()
                except (ProtocolError, MinerError, ValidatorError):
                    pass  # the nodes' run loop retries these; so does this one
            _fast_forward(ledger, miners)
            time.sleep(0.01)
    finally:
        for n in nodes:
            n.stop()
    return ledger, validators, miners


def test_slow_validator_reveals_in_sized_windows(tmp_path: Path, dht: DHTNode, slow_validator: str) -> None:
    torch.set_num_threads(1)
    spec = _spec()
    windows = _windows(spec, slow_validator)
    assert windows.inputs["work"]["verify_s"] >= SLOW_S  # measured on the slow validator
    # the windows hold the slow validator's work; the floor alone would not
    assert (
        (windows.score_commit - 4) * BLOCK_TIME >= MINERS * SLOW_S > (FLOORS["score_commit"] - 4) * BLOCK_TIME
    )
    ledger, validators, miners = _run_round(tmp_path, dht, spec, windows, slow_validator, chain_id=41001)

    rd = ledger.rounds[2]
    honest = sorted((m.address for m in miners), key=lambda a: int(a, 16))
    assert sorted(rd.commits, key=lambda a: int(a, 16)) == honest
    assert slow_validator in rd.reveals, ("the slow validator did not reveal", windows.derivation)
    assert all(s > 0 for s in rd.reveals[slow_validator]), rd.reveals
    slow_node = validators[1]
    for m in honest:
        v = slow_node.state.verdict(2, m)
        assert v is not None and v.stage == "ok", v
    s = rd.settlement
    assert s is not None
    for m in honest:
        assert s.consensus[m] > 0 and s.miner_rewards[m] > 0, (m, s)
    assert s.validator_rewards.get(slow_validator, 0) > 0


def test_control_fixed_score_commit_window_loses_the_slow_validator(
    tmp_path: Path, dht: DHTNode, slow_validator: str
) -> None:
    torch.set_num_threads(1)
    spec = _spec()
    sized = _windows(spec, slow_validator)
    fixed = PhaseWindows(
        commit=sized.commit,
        reveal=sized.reveal,
        score_commit=FLOORS["score_commit"],
        score_reveal=sized.score_reveal,
        seconds=sized.seconds,
        derivation=[],
    )
    ledger, validators, miners = _run_round(tmp_path, dht, spec, fixed, slow_validator, chain_id=41002)
    rd = ledger.rounds[2]
    assert len(rd.commits) == MINERS  # the miners were not the problem
    revealed = rd.reveals.get(slow_validator)
    assert revealed is None or min(revealed) == 0, (
        "the slow validator revealed every score in a window too short for its work",
        revealed,
    )
