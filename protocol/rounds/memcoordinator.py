"""The round coordinator in memory: :class:`MemoryLedger` is a shared chain state and each
:class:`MemoryCoordinator` one participant's view of it, with the semantics of the contract that
``protocol.rounds.coordinator`` describes (settlement by ``protocol.rounds.consensus.settle``, which the Solidity
vectors check). Slashing, the contract's ``NetworkSlashing``, is ``protocol.rounds.memslashing``'s: the
ledger keeps its records in a ``SlashingBook`` and each view composes a ``MemorySlashing``. Used by
in-process tests and the attack harness; nodes see only ``protocol.rounds.coordinator.Coordinator``."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from eth_utils import keccak, to_checksum_address

from protocol.rounds.audits import AuditDraw, audit_draw, counted_matrix
from protocol.rounds.consensus import SCORE_MAX, settle
from protocol.rounds.coordinator import (
    AlreadyDoneError,
    CoordinatorError,
    NotRegisteredError,
    RoundState,
    SeedNotRevealedError,
    Settlement,
    WrongPhaseError,
    checkpoint_message,
)
from protocol.rounds.memslashing import BookRecord, MemoryReport, MemorySlashing, MemProposal, SlashingBook
from protocol.rounds.phases import Phase
from protocol.wire.commitments import score_commitment, seed_commitment, update_commitment


@dataclass
class _MemRound:
    commits: dict[str, bytes] = field(default_factory=dict)
    seed_commits: dict[str, bytes] = field(default_factory=dict)
    seed_reveals: dict[str, bytes] = field(default_factory=dict)
    score_commits: dict[str, bytes] = field(default_factory=dict)
    reveals: dict[str, list[int]] = field(default_factory=dict)
    settlement: Settlement | None = None


class MemoryLedger:
    """Shared in-memory chain state behind :class:`MemoryCoordinator` views (one per participant)."""

    # the slashing records, read where the attack harness and the tests read them: on the ledger
    slashed: BookRecord[dict[str, int]] = BookRecord()
    frozen: BookRecord[dict[tuple[int, str], bytes]] = BookRecord()
    held: BookRecord[dict[bytes, int]] = BookRecord()
    executed: BookRecord[set[bytes]] = BookRecord()
    forfeited: BookRecord[dict[str, int]] = BookRecord()
    stake_taken: BookRecord[dict[str, int]] = BookRecord()
    slash_proposals: BookRecord[dict[bytes, MemProposal]] = BookRecord()
    hold: BookRecord[dict[str, int]] = BookRecord()
    proposals: BookRecord[list[dict[str, object]]] = BookRecord()

    def __init__(
        self,
        genesis_checkpoint: bytes,
        *,
        phase_blocks: int | Sequence[int] = 5,
        emission: int = 1000 * 10**18,
        validator_share_bps: int = 1000,
        chain_id: int = 31337,
        audit_rate_bps: int = 10_000,
        committee_size: int = 0,
        vesting_rounds: int = 0,
        slash_bps: int = 5_000,
    ) -> None:
        """``phase_blocks``: blocks of every phase, or of COMMIT, REVEAL, SCORE_COMMIT and SCORE_REVEAL
        each (the contract's ``commit_blocks`` ... ``score_reveal_blocks``). ``audit_rate_bps``,
        ``committee_size`` and ``vesting_rounds`` are the contract's q, c and K (defaults: every pair
        audited by every validator, pay owed at once); ``slash_bps`` the share of its stake a confirmed
        proposal takes (``NetworkParams``' default)."""
        lengths = (
            (phase_blocks,) * 4 if isinstance(phase_blocks, int) else tuple(int(b) for b in phase_blocks)
        )
        if len(lengths) != 4 or min(lengths) < 1:
            raise ValueError(f"phase_blocks must be one positive count or four, not {phase_blocks!r}")
        self.chain_id = chain_id
        self.contract = to_checksum_address("0x" + "c0" * 20)
        self.block = 1
        self.phase_lengths: tuple[int, ...] = lengths
        self.phase_blocks = max(lengths)
        self.emission = emission
        self.validator_share_bps = validator_share_bps
        self.miners: list[str] = []
        self.validators: list[str] = []
        self.stakes: dict[str, int] = {}
        self.owed: dict[str, int] = {}
        self.round = 1
        self.phase = Phase.COMMIT
        self.phase_start = self.block
        self.checkpoints: dict[int, bytes] = {1: genesis_checkpoint}
        self.seeds: dict[int, bytes] = {0: keccak(b"genesis" + genesis_checkpoint)}
        self.rounds: dict[int, _MemRound] = {1: _MemRound()}
        self.reg_block: dict[str, int] = {}
        self.round_open: dict[int, int] = {1: self.block}
        self.audit_rate_bps = audit_rate_bps
        self.committee_size = committee_size
        self.vesting_rounds = vesting_rounds
        self.slash_bps = slash_bps
        self.draw_size: dict[int, int] = {}
        self.vesting: dict[tuple[str, int], int] = {}
        """(miner, round) -> pay not vested yet."""
        self.book = SlashingBook()
        """The slashing records (``NetworkSlashing``'s), which ``MemorySlashing`` works on."""

    def mine(self, n: int = 1) -> None:
        """Advance the block number."""
        self.block += n

    def deadline(self) -> int:
        """Last block of the current phase."""
        i = int(self.phase)
        return self.phase_start + (self.phase_lengths[i] if i < 4 else self.phase_blocks) - 1

    def validator_stake(self) -> int:
        """``totalValidatorStake``."""
        return sum(self.stakes[v] for v in self.validators)


class MemoryCoordinator:
    """One participant's view of a :class:`MemoryLedger`."""

    def __init__(self, ledger: MemoryLedger, address: str) -> None:
        self.ledger = ledger
        self.chain_id = ledger.chain_id
        self.contract = ledger.contract
        self.address = to_checksum_address(address)
        self.slashing = MemorySlashing(ledger, self.address)
        """Its fraud proofs, unanswered-audit reports and votes (the contract's ``NetworkSlashing``)."""

    def _tx(self) -> None:
        self.ledger.mine(1)

    def _open(self, round: int, phase: Phase) -> _MemRound:
        led = self.ledger
        if round != led.round:
            raise WrongPhaseError(f"round {round} is not the current round {led.round}")
        if led.phase != phase:
            raise WrongPhaseError(f"round {round} is in {led.phase.name}, not {phase.name}")
        if led.block > led.deadline():
            raise WrongPhaseError(f"{phase.name} of round {round} closed")
        return led.rounds[round]

    def current(self, max_age: float = 0.0) -> RoundState:
        led = self.ledger  # in memory, every reading is fresh
        return RoundState(
            led.round,
            led.phase,
            led.deadline(),
            led.block,
            led.checkpoints.get(led.round),
            led.seeds[led.round - 1],
            led.seeds.get(led.round),
        )

    def checkpoint(self, round: int) -> bytes | None:
        return self.ledger.checkpoints.get(round)

    def seed(self, round: int) -> bytes | None:
        return self.ledger.seeds.get(round)

    def miners(self, round: int | None = None) -> list[str]:
        led = self.ledger
        if round is None:
            return list(led.miners)
        opened = led.round_open.get(round, led.block + 1)
        return [m for m in led.miners if led.reg_block[m] < opened]

    def validators(self) -> list[str]:
        return list(self.ledger.validators)

    def audit_draws(self, round: int, miners: Sequence[str]) -> dict[str, AuditDraw]:
        """Each miner's audit draw of ``round`` (``Consensus.auditDraw``), once its seed is fixed."""
        led = self.ledger
        n = led.draw_size.get(round, len(led.validators))
        return {m: audit_draw(led.seeds[round], m, n, led.audit_rate_bps, led.committee_size) for m in miners}

    def ensure_registered(self, role: str, stake: int) -> bool:
        group = self.ledger.miners if role == "miner" else self.ledger.validators
        if self.address in group:
            return False
        group.append(self.address)
        self.ledger.reg_block[self.address] = self.ledger.block
        self.ledger.stakes[self.address] = stake
        self._tx()
        return True

    def commit_update(self, round: int, update_digest: bytes) -> None:
        if self.address not in self.ledger.miners:
            raise NotRegisteredError(f"{self.address} is not a registered miner")
        rd = self._open(round, Phase.COMMIT)
        if self.address in rd.commits:
            raise AlreadyDoneError(f"{self.address} already committed in round {round}")
        rd.commits[self.address] = update_commitment(
            self.chain_id, self.contract, round, self.address, update_digest
        )
        self._tx()

    def update_commitments(self, round: int) -> dict[str, bytes]:
        return dict(self.ledger.rounds.get(round, _MemRound()).commits)

    def _validator(self) -> None:
        if self.address not in self.ledger.validators:
            raise NotRegisteredError(f"{self.address} is not a registered validator")

    def commit_seed(self, round: int, secret: bytes) -> None:
        self._validator()
        rd = self._open(round, Phase.COMMIT)
        if self.address in rd.seed_commits:
            raise AlreadyDoneError("seed share already committed")
        rd.seed_commits[self.address] = seed_commitment(secret, self.address, round)
        self._tx()

    def reveal_seed(self, round: int, secret: bytes) -> None:
        rd = self._open(round, Phase.REVEAL)
        if rd.seed_commits.get(self.address) != seed_commitment(secret, self.address, round):
            raise CoordinatorError("seed reveal does not match the commitment")
        if self.address in rd.seed_reveals:
            raise AlreadyDoneError("seed share already revealed")
        rd.seed_reveals[self.address] = secret
        self._tx()

    def seed_share_status(self, round: int) -> tuple[bool, bool]:
        rd = self.ledger.rounds.get(round, _MemRound())
        return self.address in rd.seed_commits, self.address in rd.seed_reveals

    def commit_scores(self, round: int, scores: Sequence[int], salt: bytes) -> None:
        self._validator()
        rd = self._open(round, Phase.SCORE_COMMIT)
        if self.address in rd.score_commits:
            raise AlreadyDoneError("scores already committed")
        rd.score_commits[self.address] = score_commitment(
            self.chain_id, self.contract, round, self.address, scores, salt
        )
        self._tx()

    def reveal_scores(self, round: int, scores: Sequence[int], salt: bytes) -> None:
        rd = self._open(round, Phase.SCORE_REVEAL)
        if self.address in rd.reveals:
            raise AlreadyDoneError("scores already revealed")
        # As the contract: withholding a committed share (to steer seed(r) by revealing or not) must cost
        # the validator its say in the consensus and its reward; checked before the commitment, in its order.
        if self.address in rd.seed_commits and self.address not in rd.seed_reveals:
            raise SeedNotRevealedError(
                f"{self.address} committed a seed share in round {round} but did not reveal it"
            )
        if rd.score_commits.get(self.address) != score_commitment(
            self.chain_id, self.contract, round, self.address, scores, salt
        ):
            raise CoordinatorError("revealed scores do not match the commitment")
        if len(scores) != len(rd.commits) or any(not 0 <= s <= SCORE_MAX for s in scores):
            raise CoordinatorError("score vector has the wrong length or range")
        rd.reveals[self.address] = [int(s) for s in scores]
        self._tx()

    def score_status(self, round: int) -> tuple[bool, bool]:
        rd = self.ledger.rounds.get(round, _MemRound())
        return self.address in rd.score_commits, self.address in rd.reveals

    def finalize(self, round: int) -> None:
        led = self.ledger
        if round != led.round or led.phase != Phase.FINALIZE:
            raise WrongPhaseError(f"round {round} cannot be finalized now")
        rd = led.rounds[round]
        miners = sorted(rd.commits, key=lambda a: int(a, 16))
        revealers = sorted(rd.reveals, key=lambda a: int(a, 16))
        weights = [led.stakes[v] for v in revealers]
        n = led.draw_size.get(round, len(led.validators))
        counted = None
        if led.audit_rate_bps and 0 < led.committee_size < n:
            draws = [
                audit_draw(led.seeds[round], m, n, led.audit_rate_bps, led.committee_size) for m in miners
            ]
            counted = counted_matrix(draws, [led.validators.index(v) for v in revealers])
        # the one settlement the Solidity vectors check (contracts/test/Vectors.t.sol), not a copy of it
        split = settle(
            [rd.reveals[v] for v in revealers],
            weights,
            led.emission,
            led.validator_share_bps,
            n_miners=len(miners),
            counted=counted,
        )
        medians = split.medians
        mpay = {m: self._credit_miner(round, m, amt) for m, amt in zip(miners, split.miner_pay, strict=True)}
        vpay = dict(zip(revealers, split.validator_pay, strict=True))
        for a, amt in vpay.items():
            led.owed[a] = led.owed.get(a, 0) + amt
        rd.settlement = Settlement(dict(zip(miners, medians, strict=True)), mpay, vpay)
        led.round += 1
        led.phase = Phase.COMMIT
        led.phase_start = led.block
        led.round_open[led.round] = led.block
        led.rounds[led.round] = _MemRound()
        self._tx()

    def _credit_miner(self, round: int, miner: str, amount: int) -> int:
        """As ``_payMiners``: put on the miner's hold by an open proof, kept in the pool by a confirmed one, else owed at once
        (K = 0) or vesting until round + K, when the older pay of the miner vests. Returns the credit."""
        led = self.ledger
        if led.book.hold_frozen_pay(round, miner, amount):
            return 0
        k = led.vesting_rounds
        if k == 0:
            led.owed[miner] = led.owed.get(miner, 0) + amount
            return amount
        for key in [key for key in led.vesting if key[0] == miner and key[1] + k <= round]:
            led.owed[miner] = led.owed.get(miner, 0) + led.vesting.pop(key)
        if amount:
            led.vesting[(miner, round)] = amount
        return amount

    def unvested(self, address: str | None = None) -> int:
        """Pay of ``address`` (default: this participant) not vested yet."""
        a = self.address if address is None else to_checksum_address(address)
        k, current = self.ledger.vesting_rounds, self.ledger.round
        return sum(v for (m, r), v in self.ledger.vesting.items() if m == a and r + k >= current)

    def settlement(self, round: int) -> Settlement | None:
        rd = self.ledger.rounds.get(round)
        return rd.settlement if rd else None

    def checkpoint_message(self, round: int, digest: bytes) -> bytes:
        return checkpoint_message(self.chain_id, self.contract, round, digest)

    def sign_checkpoint(self, round: int, digest: bytes) -> bytes:
        return keccak(bytes.fromhex(self.address[2:]) + self.checkpoint_message(round, digest))

    def check_checkpoint_signature(self, round: int, digest: bytes, signer: str, signature: bytes) -> bool:
        return self._signature_ok(round, digest, signer, signature)

    def _signature_ok(self, round: int, digest: bytes, signer: str, signature: bytes) -> bool:
        # what the contract checks (kept apart from the node-facing method, which tests may replace)
        return signer in self.ledger.validators and signature == keccak(
            bytes.fromhex(signer[2:]) + self.checkpoint_message(round, digest)
        )

    def certify(self, round: int, digest: bytes, signatures: dict[str, bytes]) -> None:
        led = self.ledger
        for v, sig in signatures.items():
            if not self._signature_ok(round, digest, v, sig):
                raise CoordinatorError(f"bad certificate signature of {v}")
        if round >= led.round or round + 1 in led.checkpoints:
            raise AlreadyDoneError(f"round {round} cannot be certified")
        if 3 * len(signatures) < 2 * len(led.validators):
            raise CoordinatorError("quorum not reached")
        led.checkpoints[round + 1] = digest
        self._tx()

    def slash(self, target: str, evidence: bytes, round: int | None = None) -> bool:
        """``proposeSlash``: open the fraud proof or vote for it (:meth:`MemorySlashing.slash`)."""
        return self.slashing.slash(target, evidence, round)

    def report_unanswered(self, miner: str, round: int) -> None:
        """``reportUnanswered``: open the report or vote for it (:meth:`MemorySlashing.report_unanswered`)."""
        self.slashing.report_unanswered(miner, round)

    def audit_witnesses(self, round: int, miners: Sequence[str]) -> dict[str, int]:
        """``auditWitnesses``: each miner's witness bitmap of ``round``."""
        return self.slashing.audit_witnesses(round, miners)

    def unanswered_report(self, miner: str, round: int) -> MemoryReport:
        """The unanswered-audit report on ``miner`` in ``round``, as this participant reads it."""
        return self.slashing.unanswered_report(miner, round)

    def vote_unanswered(self, evidence: bytes, support: bool) -> None:
        """``voteSlash`` on an open proposal (:meth:`MemorySlashing.vote_unanswered`)."""
        self.slashing.vote_unanswered(evidence, support)

    vote_slash = vote_unanswered

    def expire_report(self, evidence: bytes) -> None:
        """``expireReport``: close a contested report past its window (:meth:`MemorySlashing.expire_report`)."""
        self.slashing.expire_report(evidence)

    def advance(self) -> bool:
        led = self.ledger
        if led.phase == Phase.FINALIZE or led.block <= led.deadline():
            return False
        if led.phase == Phase.REVEAL:
            rd = led.rounds[led.round]
            mix = hashlib.sha256(b"".join(sorted(rd.seed_reveals.values()))).digest()
            led.seeds[led.round] = keccak(led.seeds[led.round - 1] + led.round.to_bytes(32, "big") + mix)
            led.draw_size[led.round] = len(led.validators)
        led.phase = Phase(led.phase + 1)
        led.phase_start = led.block
        self._tx()
        return True

    def owed(self) -> int:
        return self.ledger.owed.get(self.address, 0)
