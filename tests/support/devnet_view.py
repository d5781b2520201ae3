"""A stubbed devnet for rendering its live view (``tessera.devnet.run._view``) without processes."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from protocol.chain import ContractRound
from protocol.rounds.phases import Phase
from tessera.devnet.procs import NodeProc

MINER_KEY = "0x" + "33" * 32


class StubChain:
    """The chain reads the live view makes: round 3 in its score-commit phase."""

    def round_state(self) -> ContractRound:
        return ContractRound(3, Phase.SCORE_COMMIT, 100, 4, 2, 0, 129)

    def block_number(self) -> int:
        return 110


def devnet_stub() -> Any:
    """A devnet with one miner and one validator whose HTTP answers are canned (no processes)."""
    miner = NodeProc("miner0", "miner", MINER_KEY, 1, [], {}, Path("/dev/null"))
    val = NodeProc("validator0", "validator", "0x" + "44" * 32, 2, [], {}, Path("/dev/null"))
    addr = miner.address
    answers = {
        ("miner0", "/status"): {"phase": "serving", "last_round": {"loss_first": 5.5, "loss_last": 5.2}},
        ("validator0", "/status"): {"phase": "verify"},
        ("validator0", "/rounds"): [
            {"round": 2, "consensus": {addr: 120}, "rewards": {addr: str(3 * 10**20)}, "scores": {},
             "heldout_before": 5.5, "heldout_after": 5.4},
            {"round": 3, "scores": {addr: 130}, "consensus": {}, "rewards": {}},
        ],
    }  # fmt: skip
    return SimpleNamespace(
        chain=StubChain(), nodes={"miner0": miner, "validator0": val}, get=lambda n, p: answers.get((n, p))
    )
