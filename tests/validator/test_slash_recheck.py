"""F8: a validator votes for another validator's slashing evidence after re-running it.

Three validators with equal stakes (a slash needs two votes). Only one of them replays transcript segments
(``segments_per_miner`` = every segment); the other two replay none, so they accept a lazy miner whose
first segment was trained on other data. Before the fix only the one that caught it voted (1/3: no slash);
now the other two re-run the failing segment named in its served verdict and vote the same evidence hash.
The honest miner's updates replay, so nobody votes against it.
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
from protocol.rounds.memcoordinator import MemoryCoordinator, MemoryLedger
from protocol.rounds.phases import Phase
from protocol.runspec import RunSpec
from protocol.wire.tensorblob import tensors_digest
from tessera.attack.miners import LazyMiner
from training.config import InnerConfig
from validator.config import ValidatorConfig
from validator.errors import ValidatorError
from validator.node import ValidatorNode
from validator.policy import VerifyPolicy

FRESH_S = 0.05
"""The DHT's wait for a missing record (1 s in a node): the in-memory chain runs a phase in about a second."""

KEYS = ["0x" + f"{i:064x}" for i in range(51, 56)]
H = 4


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, ...]]:
    torch.set_num_threads(1)
    tmp: Path = tmp_path_factory.mktemp("slash")
    spec = RunSpec(inner=InnerConfig(steps=H, transcript_interval=1))
    genesis = tensors_digest({f"param/{k}": v for k, v in spec.genesis_params().items()})
    ledger = MemoryLedger(bytes.fromhex(genesis[2:]), phase_blocks=40)
    dht = DHTNode(DHTConfig()).start()
    validators = []
    for i, k in enumerate(KEYS[:3]):
        c = MemoryCoordinator(ledger, Account.from_key(k).address)
        cfg = ValidatorConfig(
            data_dir=tmp / f"v{i}",
            verify=VerifyPolicy(segments_per_miner=H if i == 0 else 0, audit_segments=H if i == 0 else 0),
        )
        validators.append(
            ValidatorNode(cfg, spec, c, Discovery(31337, k, dht, dht_fresh_s=FRESH_S), k).start()
        )
    miners = []
    for i, k in enumerate(KEYS[3:]):
        c = MemoryCoordinator(ledger, Account.from_key(k).address)
        beh = LazyMiner(fraction=1 / H, segments=H) if i == 1 else None
        miners.append(
            MinerNode(
                MinerConfig(data_dir=tmp / f"m{i}"),
                spec,
                c,
                Discovery(31337, k, dht, dht_fresh_s=FRESH_S),
                behaviour=beh,
            ).start()
        )
    yield ledger, validators, miners
    for n in [*validators, *miners]:
        n.stop()
    dht.shutdown()


def test_one_catch_is_enough_to_slash(network: tuple[Any, ...]) -> None:
    ledger, validators, miners = network
    nodes = [*validators, *miners]
    honest, lazy = miners[0].address, miners[1].address
    t = time.time()
    while 3 not in ledger.checkpoints:
        assert time.time() - t < 150, [n.last_error for n in nodes]
        for n in nodes:
            try:
                n.step()
            except (ProtocolError, MinerError, ValidatorError):
                pass
        if ledger.round >= 3:
            continue
        if ledger.phase == Phase.COMMIT and len(ledger.rounds[ledger.round].commits) < len(ledger.miners):
            ledger.mine(1)
            time.sleep(0.05)
        else:
            ledger.mine(8)
    caught = validators[0].state.verdict(2, lazy)
    assert caught is not None and caught.stage == "recompute" and caught.provable, caught
    for v in validators[1:]:
        own = v.state.verdict(2, lazy)
        assert own is not None and own.stage != "recompute"  # they did not catch it themselves
        assert list((v.state.round(2).rechecked or {}).values()) == [True]
    assert ledger.slashed.get(lazy, 0) >= 1  # (the in-memory ledger counts every vote past 2/3)
    # the proof freezes the pay of the round the verdict is for (issue 26), whatever the round is now
    assert (2, lazy) in ledger.frozen, ledger.frozen
    assert ledger.slashed.get(honest, 0) == 0
