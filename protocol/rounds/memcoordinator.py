"""The round coordinator in memory: :class:`MemoryLedger` is a shared chain state and each
:class:`MemoryCoordinator` one participant's view of it, with the semantics of the contract that
``protocol.rounds.coordinator`` describes (settlement by ``protocol.rounds.consensus.settle``, which the Solidity
vectors check; fraud proofs and unanswered-audit reports as ``NetworkSlashing``: stake-weighted 2/3 votes,
``slash_bps`` of the target's stake, all its unvested pay held while a proposal is open). Used by in-process
tests and the attack harness; nodes see only ``protocol.rounds.coordinator.Coordinator``."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from eth_utils import keccak, to_checksum_address

from protocol.rounds.audits import REPORT_WINDOW_ROUNDS, AuditDraw, audit_draw, counted_matrix, witness_draw
from protocol.rounds.consensus import BPS, SCORE_MAX, settle
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
from protocol.rounds.phases import Phase
from protocol.wire.commitments import (
    score_commitment,
    seed_commitment,
    unanswered_evidence,
    update_commitment,
)


@dataclass
class _MemRound:
    commits: dict[str, bytes] = field(default_factory=dict)
    seed_commits: dict[str, bytes] = field(default_factory=dict)
    seed_reveals: dict[str, bytes] = field(default_factory=dict)
    score_commits: dict[str, bytes] = field(default_factory=dict)
    reveals: dict[str, list[int]] = field(default_factory=dict)
    settlement: Settlement | None = None


@dataclass
class MemProposal:
    """A slashing proposal (``NetworkState.SlashProposal``): a fraud proof or an unanswered-audit report."""

    target: str
    round: int
    proposer: str
    unanswered: bool
    voted_stake: int = 0
    rejected_stake: int = 0
    executed: bool = False
    rejected: bool = False
    """Closed without a slash: rejected by 2/3 (``rejected_by_vote``) or expired contested."""
    rejected_by_vote: bool = False
    held: int = 0
    """Miner pay it put on hold (the contract's ``held``: a record; the hold is the target's)."""
    stake_taken: int = 0
    forfeited: int = 0
    released: int = 0


@dataclass(frozen=True)
class MemoryReport:
    """An unanswered-audit report as a witness reads it (``protocol.chain.UnansweredReport``)."""

    evidence: bytes
    open: bool
    voted: bool


class MemoryLedger:
    """Shared in-memory chain state behind :class:`MemoryCoordinator` views (one per participant)."""

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
        self.slash_votes: dict[bytes, set[str]] = {}
        self.reg_block: dict[str, int] = {}
        self.round_open: dict[int, int] = {1: self.block}
        self.slashed: dict[str, int] = {}
        self.audit_rate_bps = audit_rate_bps
        self.committee_size = committee_size
        self.vesting_rounds = vesting_rounds
        self.draw_size: dict[int, int] = {}
        self.vesting: dict[tuple[str, int], int] = {}
        """(miner, round) -> pay not vested yet."""
        self.frozen: dict[tuple[int, str], bytes] = {}
        """(round, miner) -> the evidence that froze its pay (first proof wins)."""
        self.held: dict[bytes, int] = {}
        """evidence -> the pay an open proposal put on hold (dropped when it closes)."""
        self.executed: set[bytes] = set()
        self.forfeited: dict[str, int] = {}
        """target -> unvested and held pay its confirmed proposals forfeited."""
        self.slash_bps = slash_bps
        self.stake_taken: dict[str, int] = {}
        """target -> stake its confirmed proposals (or, for a proposer, its rejected ones) took."""
        self.slash_proposals: dict[bytes, MemProposal] = {}
        self.hold: dict[str, int] = {}
        """miner -> its pay held while proposals against it are open (the contract's ``_holds``)."""
        self.open_against: dict[str, int] = {}
        """miner -> open proposals against it."""

    def mine(self, n: int = 1) -> None:
        """Advance the block number."""
        self.block += n

    def deadline(self) -> int:
        """Last block of the current phase."""
        i = int(self.phase)
        return self.phase_start + (self.phase_lengths[i] if i < 4 else self.phase_blocks) - 1

    @property
    def proposals(self) -> list[dict[str, object]]:
        """Every slash proposal with its outcome, in the shape of ``tessera.attack.chainnet``'s
        ``LedgerSnapshot.proposals`` (read from the chain's events there)."""
        return [
            {"evidence": ev.hex(), "target": p.target, "proposer": p.proposer, "round": p.round,
             "unanswered": p.unanswered, "executed": p.executed, "stake_taken": p.stake_taken,
             "forfeited": p.forfeited, "rejected": p.rejected_by_vote,
             "expired": p.rejected and not p.rejected_by_vote, "released": p.released}
            for ev, p in self.slash_proposals.items()
        ]  # fmt: skip

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
        ev = led.frozen.get((round, miner))
        if ev is not None and amount:
            if ev not in led.executed:
                led.held[ev] = led.held.get(ev, 0) + amount
                led.hold[miner] = led.hold.get(miner, 0) + amount
                led.slash_proposals[ev].held += amount
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
        """``proposeSlash(target, round, evidence)``: opens the fraud proof (all of a miner's unvested pay put
        on hold, the round's pay frozen) or counts as a vote for the open one; 2/3 of the validator stake
        confirms it. False when this validator voted already or it is closed."""
        led = self.ledger
        at = led.round if round is None else round
        target = to_checksum_address(target)
        p = led.slash_proposals.get(evidence)
        if self.address in led.slash_votes.get(evidence, set()) or (p is not None and p.executed):
            return False
        if p is None:
            self._open_proposal(target, at, evidence, unanswered=False)
        elif p.target != target or p.round != at or p.rejected:
            raise AlreadyDoneError(f"propose slash: EvidenceUsed: {evidence.hex()}")
        self._vote(evidence, True, "propose slash")
        self._tx()
        return True

    def _open_proposal(self, target: str, round: int, evidence: bytes, *, unanswered: bool) -> None:
        """``_openProposal``: against a miner, all its unvested pay is put on hold (nothing vests while the
        vote is open) and the round's pay frozen if no other proposal froze it."""
        led = self.ledger
        if round == 0 or round > led.round:
            raise CoordinatorError(f"RoundNotReached: round {round}, current {led.round}")
        if target not in led.stakes or led.stakes[target] == 0:
            raise CoordinatorError(f"NothingToSlash: {target}")
        p = MemProposal(target, round, self.address, unanswered)
        led.slash_proposals[evidence] = p
        if target in led.miners:
            led.frozen.setdefault((round, target), evidence)
            k = led.vesting_rounds
            swept = [key for key in led.vesting if key[0] == target and key[1] + k >= led.round]
            p.held = sum(led.vesting.pop(key) for key in swept)
            led.held[evidence] = p.held
            led.hold[target] = led.hold.get(target, 0) + p.held
            led.open_against[target] = led.open_against.get(target, 0) + 1

    def _electorate(self, p: MemProposal, voter: str, what: str) -> int:
        """``_electorate``: all validators' stake; for an unanswered report the committee's and its
        witnesses' (the voter must be one of them)."""
        led = self.ledger
        if not p.unanswered:
            return led.validator_stake()
        members = self._committee(p.target, p.round, what)
        members |= witness_draw(
            led.seeds[p.round], p.target, led.draw_size[p.round], members, led.committee_size
        )
        if voter not in led.validators or not members >> led.validators.index(voter) & 1:
            raise CoordinatorError(f"{what}: NotInCommittee: {voter}, {p.target}, round {p.round}")
        return sum(led.stakes[v] for i, v in enumerate(led.validators) if members >> i & 1)

    def _committee(self, miner: str, round: int, what: str) -> int:
        led = self.ledger
        if round not in led.seeds or round == 0 or round not in led.draw_size:
            raise CoordinatorError(f"{what}: SeedNotFixed: round {round}")
        draw = audit_draw(
            led.seeds[round], miner, led.draw_size[round], led.audit_rate_bps, led.committee_size
        )
        return draw.committee

    def _vote(self, evidence: bytes, support: bool, what: str) -> None:
        """``_vote``: counts this validator's stake for or against; 2/3 of the electorate decides."""
        led = self.ledger
        p = led.slash_proposals[evidence]
        if self.address == p.target:
            raise CoordinatorError(f"{what}: TargetCannotVote: {evidence.hex()}")
        voters = led.slash_votes.setdefault(evidence, set())
        if self.address in voters:
            raise CoordinatorError(f"{what}: AlreadyVoted: {evidence.hex()}, {self.address}")
        electorate = self._electorate(p, self.address, what)
        voters.add(self.address)
        stake = led.stakes[self.address]
        if support:
            p.voted_stake += stake
            if 3 * p.voted_stake >= 2 * electorate:
                self._execute(evidence, p)
        else:
            p.rejected_stake += stake
            if 3 * p.rejected_stake >= 2 * electorate:
                p.rejected = p.rejected_by_vote = True
                p.released = self._release(evidence, p)
                p.stake_taken = 0
                self._take_stake(p.proposer)

    def _execute(self, evidence: bytes, p: MemProposal) -> None:
        """``_executeSlash``: ``slash_bps`` of the target's stake taken, all its held and unvested pay
        forfeited (whichever proposal holds it); a round another proposal froze stays in the pool."""
        led = self.ledger
        target, k = p.target, led.vesting_rounds
        p.executed = True
        led.executed.add(evidence)
        led.slashed[target] = led.slashed.get(target, 0) + 1
        lost = led.hold.pop(target, 0) + sum(
            led.vesting.pop(key) for key in list(led.vesting) if key[0] == target and key[1] + k >= led.round
        )
        for ev, q in led.slash_proposals.items():
            if q.target == target and (ev == evidence or not (q.executed or q.rejected)):
                led.held.pop(ev, None)  # the hold is forfeited, whichever proposal put it there
        if led.open_against.get(target, 0):
            led.open_against[target] -= 1
        if led.frozen.get((p.round, target), evidence) != evidence:
            led.frozen[(p.round, target)] = evidence
        p.forfeited = lost
        led.forfeited[target] = led.forfeited.get(target, 0) + lost
        p.stake_taken = self._take_stake(target)

    def _release(self, evidence: bytes, p: MemProposal) -> int:
        """``_release``: the round unfrozen; the last open proposal against the target owes it the hold."""
        led = self.ledger
        if led.frozen.get((p.round, p.target)) == evidence:
            del led.frozen[(p.round, p.target)]
        led.held.pop(evidence, None)
        if not led.open_against.get(p.target, 0):
            return 0
        led.open_against[p.target] -= 1
        if led.open_against[p.target]:
            return 0
        released = led.hold.pop(p.target, 0)
        if released:
            led.owed[p.target] = led.owed.get(p.target, 0) + released
        return released

    def _take_stake(self, target: str) -> int:
        """``_takeStake``: ``slash_bps`` of ``target``'s stake, recorded in ``stake_taken``."""
        led = self.ledger
        amount = led.stakes.get(target, 0) * led.slash_bps // BPS
        led.stakes[target] = led.stakes.get(target, 0) - amount
        led.stake_taken[target] = led.stake_taken.get(target, 0) + amount
        return amount

    # ---------------------------------------------------------------- unanswered audits

    def report_unanswered(self, miner: str, round: int) -> None:
        """``reportUnanswered``: as a committee member of ``miner``'s audit in ``round``, open the report (all
        its unvested pay held) or vote for the open one; the committee and its witnesses decide it."""
        what = "report unanswered audit"
        self._validator()
        led = self.ledger
        miner = to_checksum_address(miner)
        evidence = unanswered_evidence(self.chain_id, self.contract, miner, round)
        self._require_window(evidence, round, what)
        p = led.slash_proposals.get(evidence)
        if p is None:
            if miner not in led.miners:
                raise NotRegisteredError(f"{what}: NotRole: {miner} is not a miner")
            if round not in led.draw_size:
                raise CoordinatorError(f"{what}: SeedNotFixed: round {round}")
            n = led.draw_size[round]
            draw = audit_draw(led.seeds[round], miner, n, led.audit_rate_bps, led.committee_size)
            if not draw.audited:
                raise CoordinatorError(f"{what}: NotAudited: {miner}, round {round}")
            if not draw.committee >> led.validators.index(self.address) & 1:
                raise CoordinatorError(f"{what}: NotInCommittee: {self.address}, {miner}, round {round}")
            self._open_proposal(miner, round, evidence, unanswered=True)
        elif p.executed or p.rejected:
            raise AlreadyDoneError(f"{what}: EvidenceUsed: {evidence.hex()}")
        self._vote(evidence, True, what)
        self._tx()

    def _require_window(self, evidence: bytes, round: int, what: str) -> None:
        last = round + REPORT_WINDOW_ROUNDS
        if self.ledger.round > last:
            raise CoordinatorError(f"{what}: VotingClosed: {evidence.hex()}, last round {last}")

    def audit_witnesses(self, round: int, miners: Sequence[str]) -> dict[str, int]:
        """``auditWitnesses``: each miner's witness bitmap of ``round``."""
        led = self.ledger
        out: dict[str, int] = {}
        for m in miners:
            committee = self._committee(to_checksum_address(m), round, "read audit witnesses")
            out[to_checksum_address(m)] = witness_draw(
                led.seeds[round], m, led.draw_size[round], committee, led.committee_size
            )
        return out

    def unanswered_report(self, miner: str, round: int) -> MemoryReport:
        """The unanswered-audit report on ``miner`` in ``round`` (open? voted on by this participant?)."""
        evidence = unanswered_evidence(self.chain_id, self.contract, to_checksum_address(miner), round)
        p = self.ledger.slash_proposals.get(evidence)
        is_open = p is not None and not p.executed and not p.rejected
        voted = is_open and self.address in self.ledger.slash_votes.get(evidence, set())
        return MemoryReport(evidence, is_open, voted)

    def vote_unanswered(self, evidence: bytes, support: bool) -> None:
        """``voteSlash`` on an open proposal (a committee member or witness, for an unanswered report)."""
        what = "vote on unanswered report"
        self._validator()
        p = self.ledger.slash_proposals.get(evidence)
        if p is None:
            raise CoordinatorError(f"{what}: UnknownEvidence: {evidence.hex()}")
        if p.executed or p.rejected:
            raise AlreadyDoneError(f"{what}: EvidenceUsed: {evidence.hex()}")
        if p.unanswered:
            self._require_window(evidence, p.round, what)
        self._vote(evidence, support, what)
        self._tx()

    vote_slash = vote_unanswered

    def expire_report(self, evidence: bytes) -> None:
        """``expireReport``: closes a contested unanswered report past its window (hold released once no
        other proposal against the miner is open, nobody slashed); anyone may."""
        what = "expire unanswered report"
        p = self.ledger.slash_proposals.get(evidence)
        if p is None or not p.unanswered:
            raise CoordinatorError(f"{what}: UnknownEvidence: {evidence.hex()}")
        if p.executed or p.rejected:
            raise AlreadyDoneError(f"{what}: EvidenceUsed: {evidence.hex()}")
        last = p.round + REPORT_WINDOW_ROUNDS
        if self.ledger.round <= last:
            raise CoordinatorError(f"{what}: ReportStillOpen: {evidence.hex()}, last round {last}")
        p.rejected = True
        p.released = self._release(evidence, p)
        self._tx()

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
