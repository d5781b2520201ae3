"""The round coordinator as the nodes see it: the narrow, typed view of the settlement contracts.

Miners and validators are written against :class:`Coordinator`; ``protocol.chain_coordinator`` implements
it over the real contracts (web3), :class:`MemoryCoordinator` in memory (the reference semantics, used by
in-process tests and simulations). A round moves through the phases of :class:`Phase`; each phase has a
deadline (a block number) after which anyone may :meth:`Coordinator.advance` it.

Commitments are sender-bound: ``keccak(chain id, contract, round, miner, update digest)``, so a copied
commitment is worthless to the copier. Scores are integers in ``[0, SCORE_SCALE]``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol, runtime_checkable

from eth_abi import encode as abi_encode
from eth_utils import keccak, to_checksum_address

from protocol.errors import ProtocolError

#: A score of 1.0.
SCORE_SCALE = 1_000_000


class CoordinatorError(ProtocolError):
    """A coordinator call failed or was refused."""


class WrongPhaseError(CoordinatorError):
    """The call is not allowed in the round's current phase."""


class AlreadyDoneError(CoordinatorError):
    """The action was already taken for this round (a second commit, a second reveal)."""


class NotRegisteredError(CoordinatorError):
    """The sender is not a registered participant of the needed role."""


class Phase(IntEnum):
    """Phases of a round, in order."""

    COMMIT = 0
    """Miners commit update digests."""
    REVEAL = 1
    """Miners serve updates; validators fetch and verify."""
    SCORE_COMMIT = 2
    """Validators commit hashes of their score vectors."""
    SCORE_REVEAL = 3
    """Validators reveal score vectors."""
    FINALIZED = 4
    """Consensus computed, emission split; the next round may open."""


@dataclass(frozen=True)
class RoundState:
    """A round as the chain records it."""

    round: int
    phase: Phase
    checkpoint: bytes
    """Certified digest of theta_r (32 bytes)."""
    seed: bytes | None
    """The round seed, fixed only once the update commits have closed."""
    assign_seed: bytes
    """The seed that fixes this round's assignment (known when the round opens)."""
    deadline: int
    """Block after which the current phase may be advanced."""
    block: int
    """The chain's current block."""


def update_commitment(chain_id: int, contract: str, round: int, miner: str, update_digest: bytes) -> bytes:
    """``keccak256(abi.encode(chainid, contract, round, miner, digest))``: the sender-bound commitment."""
    return keccak(
        abi_encode(
            ["uint256", "address", "uint256", "address", "bytes32"],
            [chain_id, to_checksum_address(contract), round, to_checksum_address(miner), update_digest],
        )
    )


def score_commitment(
    chain_id: int,
    contract: str,
    round: int,
    validator: str,
    miners: Sequence[str],
    scores: Sequence[int],
    salt: bytes,
) -> bytes:
    """``keccak256(abi.encode(chainid, contract, round, validator, miners, scores, salt))``."""
    return keccak(
        abi_encode(
            ["uint256", "address", "uint256", "address", "address[]", "uint256[]", "bytes32"],
            [
                chain_id,
                to_checksum_address(contract),
                round,
                to_checksum_address(validator),
                [to_checksum_address(m) for m in miners],
                list(scores),
                salt,
            ],
        )
    )


@runtime_checkable
class Coordinator(Protocol):
    """What a node needs from the settlement layer. ``address`` is the sender of every transaction."""

    chain_id: int
    contract: str
    address: str

    def current(self) -> RoundState:
        """The latest round."""
        ...

    def miners(self) -> list[str]:
        """Registered miners, in registration order."""
        ...

    def validators(self) -> list[str]:
        """Registered validators, in registration order."""
        ...

    def ensure_registered(self, role: str) -> bool:
        """Register (and stake) as ``role`` unless already registered; True if a transaction was sent."""
        ...

    def commit_update(self, round: int, update_digest: bytes) -> None:
        """Commit ``update_commitment(..., self.address, digest)`` for ``round`` (COMMIT phase)."""
        ...

    def update_commitment_of(self, round: int, miner: str) -> bytes | None:
        """The commitment ``miner`` made in ``round``, if any."""
        ...

    def commit_scores(self, round: int, commitment: bytes) -> None:
        """Commit a score-vector hash (SCORE_COMMIT phase)."""
        ...

    def reveal_scores(self, round: int, miners: Sequence[str], scores: Sequence[int], salt: bytes) -> None:
        """Reveal the score vector (SCORE_REVEAL phase)."""
        ...

    def score_status(self, round: int, validator: str) -> tuple[bool, bool]:
        """(committed, revealed) for a validator in a round."""
        ...

    def consensus_scores(self, round: int) -> dict[str, int]:
        """Per-miner consensus score of a finalized round."""
        ...

    def rewards(self, round: int) -> dict[str, int]:
        """Rewards (token base units) paid per participant in a finalized round."""
        ...

    def certify_checkpoint(self, round: int, digest: bytes, certificate: bytes) -> None:
        """Certify ``digest`` as theta_{round+1} with a validator-quorum certificate."""
        ...

    def advance(self) -> bool:
        """Advance the current phase if its deadline passed; True if it moved."""
        ...


@dataclass
class _Round:
    state: RoundState
    commits: dict[str, bytes] = field(default_factory=dict)
    score_commits: dict[str, bytes] = field(default_factory=dict)
    reveals: dict[str, dict[str, int]] = field(default_factory=dict)
    consensus: dict[str, int] = field(default_factory=dict)
    rewards: dict[str, int] = field(default_factory=dict)


class MemoryLedger:
    """Shared in-memory chain state for :class:`MemoryCoordinator` views (one per participant)."""

    def __init__(
        self,
        genesis_checkpoint: bytes,
        *,
        phase_blocks: int = 10,
        emission: int = 1000 * 10**18,
        chain_id: int = 31337,
    ) -> None:
        self.chain_id = chain_id
        self.contract = to_checksum_address("0x" + "c0" * 20)
        self.block = 0
        self.phase_blocks = phase_blocks
        self.emission = emission
        self.miners: list[str] = []
        self.validators: list[str] = []
        seed0 = hashlib.sha256(b"genesis").digest()
        self.rounds: list[_Round] = [
            _Round(RoundState(0, Phase.COMMIT, genesis_checkpoint, None, seed0, phase_blocks, 0))
        ]
        self.certified: dict[int, bytes] = {}

    def mine(self, n: int = 1) -> None:
        """Advance the block number."""
        self.block += n


class MemoryCoordinator:
    """One participant's view of a :class:`MemoryLedger`."""

    def __init__(self, ledger: MemoryLedger, address: str) -> None:
        self.ledger = ledger
        self.chain_id = ledger.chain_id
        self.contract = ledger.contract
        self.address = to_checksum_address(address)

    def _round(self, r: int) -> _Round:
        if not 0 <= r < len(self.ledger.rounds):
            raise CoordinatorError(f"round {r} does not exist")
        return self.ledger.rounds[r]

    def current(self) -> RoundState:
        st = self.ledger.rounds[-1].state
        return RoundState(
            st.round, st.phase, st.checkpoint, st.seed, st.assign_seed, st.deadline, self.ledger.block
        )

    def miners(self) -> list[str]:
        return list(self.ledger.miners)

    def validators(self) -> list[str]:
        return list(self.ledger.validators)

    def ensure_registered(self, role: str) -> bool:
        group = self.ledger.miners if role == "miner" else self.ledger.validators
        if self.address in group:
            return False
        group.append(self.address)
        return True

    def _require_phase(self, r: int, phase: Phase) -> _Round:
        rd = self._round(r)
        if rd.state.phase != phase:
            raise WrongPhaseError(f"round {r} is in {rd.state.phase.name}, not {phase.name}")
        return rd

    def commit_update(self, round: int, update_digest: bytes) -> None:
        if self.address not in self.ledger.miners:
            raise NotRegisteredError(f"{self.address} is not a registered miner")
        rd = self._require_phase(round, Phase.COMMIT)
        if self.address in rd.commits:
            raise AlreadyDoneError(f"{self.address} already committed in round {round}")
        rd.commits[self.address] = update_commitment(
            self.chain_id, self.contract, round, self.address, update_digest
        )

    def update_commitment_of(self, round: int, miner: str) -> bytes | None:
        return self._round(round).commits.get(to_checksum_address(miner))

    def commit_scores(self, round: int, commitment: bytes) -> None:
        if self.address not in self.ledger.validators:
            raise NotRegisteredError(f"{self.address} is not a registered validator")
        rd = self._require_phase(round, Phase.SCORE_COMMIT)
        if self.address in rd.score_commits:
            raise AlreadyDoneError("scores already committed")
        rd.score_commits[self.address] = commitment

    def reveal_scores(self, round: int, miners: Sequence[str], scores: Sequence[int], salt: bytes) -> None:
        rd = self._require_phase(round, Phase.SCORE_REVEAL)
        if self.address in rd.reveals:
            raise AlreadyDoneError("scores already revealed")
        expect = rd.score_commits.get(self.address)
        got = score_commitment(self.chain_id, self.contract, round, self.address, miners, scores, salt)
        if expect != got:
            raise CoordinatorError("revealed scores do not match the commitment")
        rd.reveals[self.address] = {
            to_checksum_address(m): int(s) for m, s in zip(miners, scores, strict=True)
        }

    def score_status(self, round: int, validator: str) -> tuple[bool, bool]:
        rd = self._round(round)
        v = to_checksum_address(validator)
        return v in rd.score_commits, v in rd.reveals

    def consensus_scores(self, round: int) -> dict[str, int]:
        return dict(self._round(round).consensus)

    def rewards(self, round: int) -> dict[str, int]:
        return dict(self._round(round).rewards)

    def certify_checkpoint(self, round: int, digest: bytes, certificate: bytes) -> None:
        rd = self._round(round)
        if rd.state.phase != Phase.FINALIZED:
            raise WrongPhaseError(f"round {round} is not finalized")
        if round in self.ledger.certified:
            raise AlreadyDoneError(f"round {round} already certified")
        self.ledger.certified[round] = digest
        self._open_next(round, digest)

    def _open_next(self, round: int, digest: bytes) -> None:
        led = self.ledger
        prev = led.rounds[round].state
        seed = prev.seed or b"\0" * 32
        led.rounds.append(
            _Round(
                RoundState(
                    round + 1, Phase.COMMIT, digest, None, seed, led.block + led.phase_blocks, led.block
                )
            )
        )

    def advance(self) -> bool:
        led = self.ledger
        rd = led.rounds[-1]
        st = rd.state
        if st.phase == Phase.FINALIZED or led.block < st.deadline:
            return False
        nxt = Phase(st.phase + 1)
        seed = st.seed
        if nxt == Phase.REVEAL:
            seed = hashlib.sha256(b"seed" + st.assign_seed + b"".join(sorted(rd.commits.values()))).digest()
        if nxt == Phase.FINALIZED:
            self._finalize(rd)
        rd.state = RoundState(
            st.round, nxt, st.checkpoint, seed, st.assign_seed, led.block + led.phase_blocks, led.block
        )
        return True

    def _finalize(self, rd: _Round) -> None:
        miners = sorted(rd.commits)
        for m in miners:
            col = sorted(rev.get(m, 0) for rev in rd.reveals.values())
            rd.consensus[m] = col[(len(col) - 1) // 2] if col else 0
        total = sum(rd.consensus.values())
        if total:
            for m, s in rd.consensus.items():
                rd.rewards[m] = self.ledger.emission * s // total
