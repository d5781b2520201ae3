"""The round coordinator as the nodes see it: a narrow, typed view of the settlement contract.

Miners and validators are written against :class:`Coordinator`. ``protocol.chain.coordinator`` implements it over
the deployed ``TesseraNetwork`` contract; ``protocol.rounds.memcoordinator.MemoryCoordinator`` implements the
same semantics in memory (used by in-process tests and the attack harness). The semantics are the contract's:

- rounds start at 1; round r trains from ``checkpoint(r)`` (round 1: the genesis checkpoint) and its
  batches come from ``seed(r - 1)``, fixed before round r opened; its assignment comes from the seed of
  its assignment epoch (``protocol.rounds.epochs``: ``seed(r - 1)`` with epochs of one round);
- phases COMMIT -> REVEAL -> SCORE_COMMIT -> SCORE_REVEAL -> FINALIZE, each a fixed number of blocks;
  anyone may :meth:`advance` after a deadline; leaving REVEAL fixes ``seed(r)`` from the validators'
  revealed seed shares, so the segments to recompute are unknown while miners can still commit;
- miners commit ``keccak(abi.encode(chainid, contract, round, miner, digest))`` (sender-bound);
- validators commit, then reveal, one uint16 score per committed miner in ascending address order;
- ``finalize`` settles with stake-weighted medians and opens round r + 1; the validators then certify
  theta_{r+1} (``certify``), after which miners of round r + 1 can fetch and check it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from eth_abi import encode as abi_encode
from eth_utils import keccak, to_checksum_address

from protocol.errors import ProtocolError
from protocol.rounds.consensus import SCORE_MAX
from protocol.rounds.phases import Phase

__all__ = [
    "CHECKPOINT_TAG",
    "SCORE_SCALE",
    "AlreadyDoneError",
    "Coordinator",
    "CoordinatorError",
    "NotRegisteredError",
    "RoundState",
    "SeedNotRevealedError",
    "Settlement",
    "WrongPhaseError",
    "checkpoint_message",
]

#: Alias used by scoring code (a score of 1.0).
SCORE_SCALE = SCORE_MAX


class CoordinatorError(ProtocolError):
    """A coordinator call failed or was refused."""


class WrongPhaseError(CoordinatorError):
    """The call is not allowed in the round's current phase (or the phase's deadline passed)."""


class AlreadyDoneError(CoordinatorError):
    """The action was already taken for this round (a second commit, a second reveal)."""


class NotRegisteredError(CoordinatorError):
    """The sender is not a registered participant of the needed role."""


class SeedNotRevealedError(CoordinatorError):
    """A validator that committed a seed share in the round tried to reveal scores without revealing the
    share (the contract's ``SeedNotRevealed``): withholding a share must not leave its scores counted."""


@dataclass(frozen=True)
class RoundState:
    """The current round as the chain records it."""

    round: int
    phase: Phase
    deadline: int
    """Last block of the current phase (it may be advanced from ``deadline + 1``)."""
    block: int
    """The chain's latest block."""
    checkpoint: bytes | None
    """Certified digest of theta_round (None until certified)."""
    assign_seed: bytes
    """``seed(round - 1)``: fixes this round's assignment and batches."""
    seed: bytes | None
    """``seed(round)``: fixed when REVEAL is advanced; chooses the segments to recompute."""


@dataclass(frozen=True)
class Settlement:
    """What ``finalize`` paid in a round."""

    consensus: dict[str, int]
    miner_rewards: dict[str, int]
    validator_rewards: dict[str, int]


#: keccak256("tessera.checkpoint.v1"), the contract's CHECKPOINT_TAG.
CHECKPOINT_TAG = keccak(b"tessera.checkpoint.v1")


def checkpoint_message(chain_id: int, contract: str, round: int, digest: bytes) -> bytes:
    """``keccak256(abi.encode(CHECKPOINT_TAG, chainid, contract, round, digest))``."""
    return keccak(
        abi_encode(
            ["bytes32", "uint256", "address", "uint256", "bytes32"],
            [CHECKPOINT_TAG, chain_id, to_checksum_address(contract), round, digest],
        )
    )


@runtime_checkable
class Coordinator(Protocol):
    """What a node needs from the settlement layer; ``address`` sends every transaction."""

    chain_id: int
    contract: str
    address: str

    def current(self, max_age: float = 0.0) -> RoundState:
        """The current round; a reading up to ``max_age`` seconds old may stand for it (0: ask now)."""
        ...

    def checkpoint(self, round: int) -> bytes | None:
        """Certified digest of theta_round, if certified."""
        ...

    def seed(self, round: int) -> bytes | None:
        """``seed(round)`` (``round`` 0: the genesis seed), None until fixed: an epoch's seed is that of
        the round before its first (``protocol.rounds.epochs``)."""
        ...

    def miners(self, round: int | None = None) -> list[str]:
        """Registered miners in registration order; with ``round``, that round's registry: the miners
        registered before its COMMIT phase opened (a miner joins from the first round opening after its
        registration, so every node computes the same assignment)."""
        ...

    def validators(self) -> list[str]:
        """Registered validators, in registration order."""
        ...

    def ensure_registered(self, role: str, stake: int) -> bool:
        """Register and stake as ``role`` unless already registered; True if it registered now."""
        ...

    def commit_update(self, round: int, update_digest: bytes) -> None:
        """Commit to an update digest (COMMIT phase)."""
        ...

    def update_commitments(self, round: int) -> dict[str, bytes]:
        """Every miner's commitment in ``round``."""
        ...

    def commit_seed(self, round: int, secret: bytes) -> None:
        """Commit a seed share (COMMIT phase, validators)."""
        ...

    def reveal_seed(self, round: int, secret: bytes) -> None:
        """Reveal the seed share (REVEAL phase)."""
        ...

    def seed_share_status(self, round: int) -> tuple[bool, bool]:
        """(committed, revealed) of this node's seed share."""
        ...

    def commit_scores(self, round: int, scores: Sequence[int], salt: bytes) -> None:
        """Commit to a score vector (SCORE_COMMIT phase)."""
        ...

    def reveal_scores(self, round: int, scores: Sequence[int], salt: bytes) -> None:
        """Reveal it (SCORE_REVEAL phase)."""
        ...

    def score_status(self, round: int) -> tuple[bool, bool]:
        """(committed, revealed) of this node's scores."""
        ...

    def finalize(self, round: int) -> None:
        """Settle the round (FINALIZE phase; anyone)."""
        ...

    def settlement(self, round: int) -> Settlement | None:
        """What a finalized round paid (None before)."""
        ...

    def checkpoint_message(self, round: int, digest: bytes) -> bytes:
        """The 32 bytes validators sign to certify ``digest`` after ``round``."""
        ...

    def sign_checkpoint(self, round: int, digest: bytes) -> bytes:
        """This validator's certificate signature (BLS on-chain) of ``checkpoint_message``."""
        ...

    def check_checkpoint_signature(self, round: int, digest: bytes, signer: str, signature: bytes) -> bool:
        """Whether ``signature`` is ``signer``'s valid certificate signature of ``checkpoint_message``
        (checked before aggregating: one bad signature would make the whole certificate fail)."""
        ...

    def certify(self, round: int, digest: bytes, signatures: dict[str, bytes]) -> None:
        """Certify theta_{round+1} = ``digest`` with validators' signatures of ``checkpoint_message``
        (by validator address; the chain implementation sorts and submits them)."""
        ...

    def slash(self, target: str, evidence: bytes, round: int | None = None) -> bool:
        """Propose (or vote for) slashing ``target`` for a fraud in ``round`` (None: the current round) on
        a 32-byte evidence hash; True if counted. The first proof freezes the target's pay for ``round``."""
        ...

    def advance(self) -> bool:
        """Advance the current phase if its deadline passed; True if it moved."""
        ...

    def owed(self) -> int:
        """Rewards credited to this node and not yet claimed."""
        ...
