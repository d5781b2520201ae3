"""F11: a validator that refused (or never checked) updates the consensus accepted still merges theta_{r+1}
from the on-chain consensus and co-signs it, so the checkpoint is certified.

Two validators, stakes 2:1, so the big one's scores are the consensus and the certificate needs both
signatures (2/3 of 2 validators): before the fix the small one could not merge and the network halted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from eth_account import Account

from miner.config import MinerConfig
from miner.errors import MinerError
from miner.node import MinerNode
from protocol.errors import ProtocolError
from protocol.p2p.dht import DHTConfig, DHTNode
from protocol.p2p.discovery import Discovery
from protocol.rounds.coordinator import RoundState
from protocol.rounds.memcoordinator import MemoryCoordinator, MemoryLedger
from protocol.rounds.phases import Phase
from protocol.runspec import RunSpec
from protocol.wire.tensorblob import tensors_digest
from training.config import InnerConfig
from validator.config import ValidatorConfig
from validator.errors import ValidatorError
from validator.node import ValidatorNode
from validator.policy import VerifyPolicy

FRESH_S = 0.05
"""The DHT's wait for a missing record (1 s in a node): the in-memory chain runs a phase in about a second."""

KEYS = ["0x" + f"{i:064x}" for i in range(41, 45)]


class LazyValidator(ValidatorNode):
    """Verifies nothing (scores 0 for everyone) and so holds no update when the round settles."""

    def _verify_all(self, st: RoundState, theta: Any, until_done: bool = False) -> bool:
        return True


def _drive(ledger: MemoryLedger, nodes: list[Any], budget: float = 150) -> None:
    t = time.time()
    while 3 not in ledger.checkpoints:
        assert time.time() - t < budget, ("theta_3 was never certified", [n.last_error for n in nodes])
        for n in nodes:
            try:
                n.step()
            except (ProtocolError, MinerError, ValidatorError):
                pass
        if ledger.round >= 3:
            continue  # round 2 settled: only merge and certification are left
        if ledger.phase == Phase.COMMIT and len(ledger.rounds[ledger.round].commits) < len(ledger.miners):
            ledger.mine(1)
            time.sleep(0.05)
        else:
            ledger.mine(8)


@pytest.fixture(params=["refuses-everything", "lazy"])
def network(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, ...]]:
    torch.set_num_threads(1)
    spec = RunSpec(inner=InnerConfig(steps=4, transcript_interval=1))
    genesis = tensors_digest({f"param/{k}": v for k, v in spec.genesis_params().items()})
    ledger = MemoryLedger(bytes.fromhex(genesis[2:]), phase_blocks=40)
    dht = DHTNode(DHTConfig()).start()
    nodes: list[Any] = []
    for i, k in enumerate(KEYS[:2]):
        c = MemoryCoordinator(ledger, Account.from_key(k).address)
        if i == 0:
            cfg = ValidatorConfig(data_dir=tmp_path / "v0", stake=2000 * 10**18)
            nodes.append(
                ValidatorNode(cfg, spec, c, Discovery(31337, k, dht, dht_fresh_s=FRESH_S), k).start()
            )
        elif request.param == "lazy":
            cfg = ValidatorConfig(data_dir=tmp_path / "v1", stake=1000 * 10**18, slash=False)
            nodes.append(
                LazyValidator(cfg, spec, c, Discovery(31337, k, dht, dht_fresh_s=FRESH_S), k).start()
            )
        else:  # an honest disagreement: a threshold no update meets, so every update is refused
            cfg = ValidatorConfig(
                data_dir=tmp_path / "v1",
                stake=1000 * 10**18,
                slash=False,
                verify=VerifyPolicy(min_final_cosine=1.01),
            )
            nodes.append(
                ValidatorNode(cfg, spec, c, Discovery(31337, k, dht, dht_fresh_s=FRESH_S), k).start()
            )
    for i, k in enumerate(KEYS[2:]):
        c = MemoryCoordinator(ledger, Account.from_key(k).address)
        nodes.append(
            MinerNode(
                MinerConfig(data_dir=tmp_path / f"m{i}"),
                spec,
                c,
                Discovery(31337, k, dht, dht_fresh_s=FRESH_S),
            ).start()
        )
    yield ledger, nodes
    for n in nodes:
        n.stop()
    dht.shutdown()


def test_dissenting_validator_merges_the_consensus(network: tuple[Any, ...]) -> None:
    ledger, nodes = network
    big, small = nodes[0], nodes[1]
    _drive(ledger, nodes)
    s = ledger.rounds[2].settlement
    assert s is not None and len(s.consensus) == 2 and all(v > 0 for v in s.consensus.values())
    # the small validator scored every miner 0, yet merged exactly the consensus and co-signed
    assert all(small.state.verdict(2, m) is None or small.state.verdict(2, m).score == 0 for m in s.consensus)
    assert small.state.checkpoint(3) == big.state.checkpoint(3) == "0x" + ledger.checkpoints[3].hex()
    assert sorted(small.state.round(2).merged_from or []) == sorted(s.consensus)
