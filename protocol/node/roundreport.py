"""One INFO line per round per node, and the same figures in its ``/status`` (an operator
saw a validator log of 4 lines over 7 rounds).

A node calls :meth:`RoundReport.miner` or :meth:`RoundReport.validator` once a round is settled on chain
(its reward is known); the line is logged once per round and its figures are kept for ``/status``
(``round_report``, added by ``protocol.node.api.create_node_app``). The figures come from what the node
already keeps: its round record, the chain's settlement and its traffic ledger.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from protocol.node.traffic import TrafficLedger

WEI_PER_TOKEN = 10**18

UNVERIFIED_STAGES = frozenset({"budget", "error"})
"""Verdict stages that leave a miner unverified (``validator.stages.Stage.BUDGET`` and ``ERROR``: scored 0
without a check deciding; a test keeps them equal to those members' values). A verdict with no stage is
undecided."""

COMMITTED_STATUSES = frozenset({"committed", "served"})
"""A miner's round statuses (``miner.state``) after its commitment reached the chain."""


def tokens(wei: int) -> str:
    """``wei`` in tokens, as the line shows them (6 decimals)."""
    return f"{wei / WEI_PER_TOKEN:.6f}"


class RoundReport:
    """The last round's figures of one node and its one log line a round."""

    def __init__(self, role: str) -> None:
        self.role = role
        self.log = logging.getLogger(role)
        self.last: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def miner(
        self, round: int, record: Any, settlement: Any, address: str, traffic: TrafficLedger | None = None
    ) -> str | None:
        """A miner's line for settled ``round``: committed or not, the bytes it served (the ledger's
        protocol kinds sent that round), its consensus score and reward. ``record``: its round record
        (``status``), ``settlement``: the chain's (``consensus``, ``miner_rewards``)."""
        status = str(getattr(record, "status", "") or "")
        served = traffic.sent_bytes(round) if traffic is not None else 0
        reward = int(settlement.miner_rewards.get(address, 0))
        figures: dict[str, Any] = {
            "round": round,
            "committed": status in COMMITTED_STATUSES,
            "status": status,
            "served_bytes": served,
            "consensus": settlement.consensus.get(address, 0),
            "reward_wei": str(reward),
        }
        line = (
            f"round {round}: {'committed' if figures['committed'] else 'not committed (' + status + ')'}, "
            f"served {served} bytes, consensus {figures['consensus']}, "
            f"reward {tokens(reward)} tokens"
        )
        return self._emit(round, figures, line)

    def validator(self, round: int, record: Any, settlement: Any, address: str) -> str | None:
        """A validator's line for settled ``round``: verified N of M committed miners (a verdict not
        :data:`UNVERIFIED_STAGES`), accepted, scores revealed or not, its reward. ``record``: its round
        record (``verdicts``, ``miners``, ``score_revealed``), ``settlement``: the chain's."""
        verdicts: Mapping[str, Any] = getattr(record, "verdicts", None) or {}
        miners = getattr(record, "miners", None)
        total = len(miners) if miners is not None else len(verdicts)
        decided = [v for v in verdicts.values() if v.stage and str(v.stage) not in UNVERIFIED_STAGES]
        reward = int(settlement.validator_rewards.get(address, 0))
        figures: dict[str, Any] = {
            "round": round,
            "verified": len(decided),
            "miners": total,
            "accepted": sum(1 for v in decided if v.accepted),
            "scores_revealed": bool(getattr(record, "score_revealed", False)),
            "reward_wei": str(reward),
        }
        line = (
            f"round {round}: verified {figures['verified']} of {total} miners ({figures['accepted']} "
            f"accepted), scores {'revealed' if figures['scores_revealed'] else 'NOT revealed'}, "
            f"reward {tokens(reward)} tokens"
        )
        return self._emit(round, figures, line)

    def _emit(self, round: int, figures: dict[str, Any], line: str) -> str | None:
        """Log ``line`` and keep ``figures`` unless ``round`` was reported already (None then)."""
        with self._lock:
            if self.last is not None and self.last["round"] >= round:
                return None
            self.last = {**figures, "line": line}
        self.log.info("%s", line)
        return line

    def to_json(self) -> dict[str, Any] | None:
        """The last round's figures and line (``/status`` ``round_report``); None before the first."""
        with self._lock:
            return None if self.last is None else dict(self.last)
