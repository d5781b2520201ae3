"""Typed values the contract returns: roles, the stored round, accounts, unbondings, score entries,
mined transactions."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from protocol.chain.events import ChainEvent
from protocol.rounds.phases import Phase


class Role(IntEnum):
    """Account roles (``TesseraNetwork.Role``)."""

    NONE = 0
    MINER = 1
    VALIDATOR = 2


@dataclass(frozen=True)
class ContractRound:
    """The current round as the contract stores it, plus the current phase's last block."""

    round: int
    phase: Phase
    phase_start: int
    commits: int
    seed_reveals: int
    score_reveals: int
    deadline: int
    """Last block (inclusive) of the phase; after it anyone may ``advance`` (huge in FINALIZE)."""


@dataclass(frozen=True)
class ChainStatus:
    """What a node polls for, read in one call (``TesseraNetwork.status()``) at block ``block``."""

    round: ContractRound
    checkpoint: bytes
    """``checkpoints(round)``: theta_round's digest, 32 zero bytes until certified."""
    seed: bytes
    """``seeds(round)``: 32 zero bytes until the Reveal phase is advanced."""
    assign_seed: bytes
    """``seeds(round - 1)``: the seed this round's assignments use."""
    block: int


@dataclass(frozen=True)
class AccountInfo:
    """``TesseraNetwork.Account`` of one address."""

    stake: int
    owed: int
    last_commit_round: int
    role: Role
    validator_index: int


@dataclass(frozen=True)
class UnbondingInfo:
    """Stake waiting out the unbonding delay."""

    amount: int
    end: int


@dataclass(frozen=True)
class ScoreEntry:
    """A validator's score submission for one round."""

    commitment: bytes
    scores_hash: bytes
    weight: int
    revealed: bool


@dataclass(frozen=True)
class TxResult:
    """A mined, successful transaction."""

    tx_hash: str
    block_number: int
    gas_used: int
    events: tuple[ChainEvent, ...]


@dataclass(frozen=True)
class UnansweredReport:
    """The unanswered-audit report on a (miner, round), as a witness needs it."""

    evidence: bytes
    """``unansweredEvidence(miner, round)``."""
    open: bool
    """Filed and neither confirmed, rejected nor expired."""
    voted: bool
    """Whether the reading account has voted on it."""
