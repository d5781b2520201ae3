"""One INFO line per round per node, and the same figures in its ``/status`` (an operator
saw a validator log of 4 lines over 7 rounds).

A round's figures are a dataclass (:class:`MinerRoundFigures`, :class:`ValidatorRoundFigures`, over the
fields both share, :class:`RoundFigures`), each field documented once; the guides' ``round_report`` tables
are tested against them. A node builds its role's figures once a round is settled on chain (its reward is
known), from what it already keeps (its round record, the chain's settlement, its traffic ledger), and
hands them to :meth:`RoundReport.emit`: the line is logged once per round and the figures are kept for
``/status`` (``round_report``, ``protocol.node.statusdoc.NodeStatus.round_report``). The node, not one of
its services, emits: ``miner.node.MinerNode.report_settled``, ``validator.node.ValidatorNode.report_settled``.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from protocol.rounds.coordinator import Settlement

WEI_PER_TOKEN = 10**18


def tokens(wei: int) -> str:
    """``wei`` in tokens, as the line shows them (6 decimals)."""
    return f"{wei / WEI_PER_TOKEN:.6f}"


@dataclass(frozen=True)
class RoundFigures(ABC):
    """The figures of one settled round that both roles report."""

    round: int
    """The settled round."""
    reward_wei: str
    """This node's reward for the round as the chain's settlement paid it, in wei (a decimal string: exact
    past 2^53)."""

    TAIL: ClassVar[tuple[str, ...]] = ("reward_wei",)
    """Fields written after the role's own in the JSON (and the line)."""

    @property
    def reward(self) -> int:
        """:attr:`reward_wei` as an integer."""
        return int(self.reward_wei)

    @abstractmethod
    def line(self) -> str:
        """The round's INFO line."""

    def to_json(self) -> dict[str, Any]:
        """``/status`` ``round_report``: every field (the shared ``reward_wei`` after the role's own) and
        ``line``."""
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in self.TAIL}
        return {**own, **{name: getattr(self, name) for name in self.TAIL}, "line": self.line()}


@dataclass(frozen=True)
class MinerRoundFigures(RoundFigures):
    """A miner's settled round: committed or not, the bytes it served, its consensus score and reward."""

    committed: bool
    """Whether its commitment of the round reached the chain (its round record's ``status`` says so)."""
    status: str
    """Its round record's status (``miner.state``: ``committed``, ``served``, ...; empty without one)."""
    served_bytes: int
    """The bytes it sent that round in the protocol's kinds (its traffic ledger's ``sent_bytes``)."""
    consensus: int
    """Its consensus score in the chain's settlement (0 when not scored)."""

    @classmethod
    def settled(
        cls,
        round: int,
        settlement: Settlement,
        address: str,
        *,
        status: str,
        committed: bool,
        served_bytes: int,
    ) -> MinerRoundFigures:
        """The figures of the miner ``address`` for ``round``, paid by ``settlement``."""
        return cls(
            round=round,
            reward_wei=str(int(settlement.miner_rewards.get(address, 0))),
            committed=committed,
            status=status,
            served_bytes=served_bytes,
            consensus=settlement.consensus.get(address, 0),
        )

    def line(self) -> str:
        """``round N: committed, served B bytes, consensus C, reward R tokens``."""
        done = "committed" if self.committed else f"not committed ({self.status})"
        return (
            f"round {self.round}: {done}, served {self.served_bytes} bytes, consensus {self.consensus}, "
            f"reward {tokens(self.reward)} tokens"
        )


@dataclass(frozen=True)
class ValidatorRoundFigures(RoundFigures):
    """A validator's settled round: how many committed miners it verified, whether its scores were
    revealed, its reward."""

    verified: int
    """Miners whose verdict a check decided (``validator.stages.UNVERIFIED_STAGES`` left out: scored 0
    without a check deciding; a verdict with no stage is undecided)."""
    miners: int
    """Miners it scored (its committed score vector's length; its verdicts' count before it committed)."""
    accepted: int
    """Of the verified, those it accepted."""
    scores_revealed: bool
    """Whether its score vector was revealed on chain (a committed one not revealed does not count)."""

    @classmethod
    def settled(
        cls,
        round: int,
        settlement: Settlement,
        address: str,
        *,
        verified: int,
        miners: int,
        accepted: int,
        scores_revealed: bool,
    ) -> ValidatorRoundFigures:
        """The figures of the validator ``address`` for ``round``, paid by ``settlement``."""
        return cls(
            round=round,
            reward_wei=str(int(settlement.validator_rewards.get(address, 0))),
            verified=verified,
            miners=miners,
            accepted=accepted,
            scores_revealed=scores_revealed,
        )

    def line(self) -> str:
        """``round N: verified V of M miners (A accepted), scores revealed, reward R tokens``."""
        return (
            f"round {self.round}: verified {self.verified} of {self.miners} miners ({self.accepted} "
            f"accepted), scores {'revealed' if self.scores_revealed else 'NOT revealed'}, "
            f"reward {tokens(self.reward)} tokens"
        )


class RoundReport:
    """The last round's figures of one node and its one log line a round."""

    def __init__(self, role: str) -> None:
        self.role = role
        self.log = logging.getLogger(role)
        self.last: RoundFigures | None = None
        """The last round reported (``/status`` ``round_report``)."""
        self._lock = threading.Lock()

    def emit(self, figures: RoundFigures) -> str | None:
        """Log ``figures``' line and keep them, unless their round was reported already (None then)."""
        line = figures.line()
        with self._lock:
            if self.last is not None and self.last.round >= figures.round:
                return None
            self.last = figures
        self.log.info("%s", line)
        return line

    def to_json(self) -> dict[str, Any] | None:
        """The last round's figures and line (``/status`` ``round_report``); None before the first."""
        with self._lock:
            return None if self.last is None else self.last.to_json()
