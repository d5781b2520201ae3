"""The contract's events as frozen dataclasses (:data:`EVENT_TYPES`), decoded from web3 logs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ChainEvent:
    """Base of every decoded event: where it was emitted."""

    block_number: int
    tx_hash: str
    log_index: int


@dataclass(frozen=True)
class Registered(ChainEvent):
    account: str
    role: int
    stake: int


@dataclass(frozen=True)
class StakeAdded(ChainEvent):
    account: str
    amount: int
    stake: int


@dataclass(frozen=True)
class UnbondRequested(ChainEvent):
    account: str
    amount: int
    unbonding: int
    end: int


@dataclass(frozen=True)
class Withdrawn(ChainEvent):
    account: str
    amount: int


@dataclass(frozen=True)
class UpdateCommitted(ChainEvent):
    round: int
    miner: str
    commitment: bytes


@dataclass(frozen=True)
class SeedCommitted(ChainEvent):
    round: int
    validator: str
    commitment: bytes


@dataclass(frozen=True)
class SeedRevealed(ChainEvent):
    round: int
    validator: str
    secret: bytes


@dataclass(frozen=True)
class SeedFixed(ChainEvent):
    round: int
    seed: bytes
    fallback_used: bool


@dataclass(frozen=True)
class PhaseAdvanced(ChainEvent):
    round: int
    phase: int
    start_block: int


@dataclass(frozen=True)
class ScoresCommitted(ChainEvent):
    round: int
    validator: str
    commitment: bytes


@dataclass(frozen=True)
class ScoresRevealed(ChainEvent):
    round: int
    validator: str
    scores: tuple[int, ...]
    weight: int


@dataclass(frozen=True)
class MinerRewarded(ChainEvent):
    round: int
    miner: str
    consensus: int
    amount: int


@dataclass(frozen=True)
class ValidatorRewarded(ChainEvent):
    round: int
    validator: str
    amount: int


@dataclass(frozen=True)
class RoundFinalized(ChainEvent):
    round: int
    budget: int
    miners_paid: int
    validators_paid: int


@dataclass(frozen=True)
class Claimed(ChainEvent):
    account: str
    amount: int


@dataclass(frozen=True)
class SlashProposed(ChainEvent):
    evidence: bytes
    target: str
    proposer: str
    round: int


@dataclass(frozen=True)
class PayFrozen(ChainEvent):
    evidence: bytes
    miner: str
    round: int
    amount: int


@dataclass(frozen=True)
class SlashRejectVoted(ChainEvent):
    evidence: bytes
    voter: str
    rejected_stake: int
    total_stake: int


@dataclass(frozen=True)
class SlashRejected(ChainEvent):
    evidence: bytes
    target: str
    proposer: str
    released: int
    penalty: int


@dataclass(frozen=True)
class ReportExpired(ChainEvent):
    evidence: bytes
    target: str
    round: int
    released: int


@dataclass(frozen=True)
class Forfeited(ChainEvent):
    evidence: bytes
    miner: str
    amount: int


@dataclass(frozen=True)
class Vested(ChainEvent):
    account: str
    amount: int


@dataclass(frozen=True)
class SlashVoted(ChainEvent):
    evidence: bytes
    voter: str
    voted_stake: int
    total_stake: int


@dataclass(frozen=True)
class Slashed(ChainEvent):
    evidence: bytes
    target: str
    amount: int


@dataclass(frozen=True)
class CheckpointCertified(ChainEvent):
    round: int
    digest: bytes
    signed_stake: int
    bls: bool


EVENT_TYPES: dict[str, type[ChainEvent]] = {
    c.__name__: c
    for c in (
        Registered,
        StakeAdded,
        UnbondRequested,
        Withdrawn,
        UpdateCommitted,
        SeedCommitted,
        SeedRevealed,
        SeedFixed,
        PhaseAdvanced,
        ScoresCommitted,
        ScoresRevealed,
        MinerRewarded,
        ValidatorRewarded,
        RoundFinalized,
        Claimed,
        SlashProposed,
        SlashVoted,
        Slashed,
        CheckpointCertified,
        PayFrozen,
        SlashRejectVoted,
        SlashRejected,
        ReportExpired,
        Forfeited,
        Vested,
    )
}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def decode_event(name: str, ev: Any) -> ChainEvent:
    """The typed :data:`EVENT_TYPES` dataclass of one decoded web3 log of event ``name``."""
    cls = EVENT_TYPES[name]
    kwargs: dict[str, Any] = {
        _snake(k): (tuple(v) if isinstance(v, list) else v) for k, v in ev["args"].items()
    }
    return cls(
        block_number=int(ev["blockNumber"]),
        tx_hash="0x" + bytes(ev["transactionHash"]).hex(),
        log_index=int(ev["logIndex"]),
        **kwargs,
    )
