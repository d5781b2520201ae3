"""Slashing on the in-memory ledger, with the semantics of the contract's ``NetworkSlashing``: fraud proofs
and unanswered-audit reports are proposals decided by a stake-weighted 2/3 vote (of all validators, or of
the audit's committee and its witnesses), a confirmed one takes ``slash_bps`` of the target's stake, and
all of a miner's unvested pay is held while a proposal against it is open. :class:`SlashingBook` is the
ledger's record of it (``MemoryLedger.book``); :class:`MemorySlashing` one participant's operations,
which ``protocol.rounds.memcoordinator.MemoryCoordinator`` composes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar, cast, overload

from eth_utils import to_checksum_address

from protocol.rounds.audits import REPORT_WINDOW_ROUNDS, audit_draw, witness_draw
from protocol.rounds.consensus import BPS
from protocol.rounds.coordinator import AlreadyDoneError, CoordinatorError, NotRegisteredError
from protocol.wire.commitments import unanswered_evidence

if TYPE_CHECKING:  # the ledger holds the book and builds on this module: its type only, no import cycle
    from protocol.rounds.memcoordinator import MemoryLedger

T = TypeVar("T")


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


@dataclass
class SlashingBook:
    """The ledger's slashing records (``NetworkSlashing``'s storage), shared by every participant's view."""

    slash_proposals: dict[bytes, MemProposal] = field(default_factory=dict)
    """evidence -> its proposal, open or closed."""
    slash_votes: dict[bytes, set[str]] = field(default_factory=dict)
    """evidence -> the validators that voted on its proposal."""
    slashed: dict[str, int] = field(default_factory=dict)
    """target -> its confirmed proposals."""
    frozen: dict[tuple[int, str], bytes] = field(default_factory=dict)
    """(round, miner) -> the evidence that froze its pay (first proof wins)."""
    held: dict[bytes, int] = field(default_factory=dict)
    """evidence -> the pay an open proposal put on hold (dropped when it closes)."""
    executed: set[bytes] = field(default_factory=set)
    """Evidence of every confirmed proposal."""
    forfeited: dict[str, int] = field(default_factory=dict)
    """target -> unvested and held pay its confirmed proposals forfeited."""
    stake_taken: dict[str, int] = field(default_factory=dict)
    """target -> stake its confirmed proposals (or, for a proposer, its rejected ones) took."""
    hold: dict[str, int] = field(default_factory=dict)
    """miner -> its pay held while proposals against it are open (the contract's ``_holds``)."""
    open_against: dict[str, int] = field(default_factory=dict)
    """miner -> open proposals against it."""

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

    def hold_frozen_pay(self, round: int, miner: str, amount: int) -> bool:
        """As ``_payMiners`` for a round a proof froze: its pay ``amount`` put on the miner's hold while the
        proof is open, left in the pool once it is confirmed. False when no proof froze it (or it pays
        nothing): the pay is the miner's then."""
        ev = self.frozen.get((round, miner))
        if ev is None or not amount:
            return False
        if ev not in self.executed:
            self.held[ev] = self.held.get(ev, 0) + amount
            self.hold[miner] = self.hold.get(miner, 0) + amount
            self.slash_proposals[ev].held += amount
        return True


class BookRecord(Generic[T]):
    """A :class:`SlashingBook` record read as its ledger's attribute of the same name: ``ledger.frozen`` is
    ``ledger.book.frozen`` (the attack harness and the tests read the ledger as they read the chain's
    snapshot). Read-only: rebinding it would part the ledger from the book the slashing works on."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, ledger: None, owner: type) -> BookRecord[T]: ...
    @overload
    def __get__(self, ledger: MemoryLedger, owner: type) -> T: ...
    def __get__(self, ledger: MemoryLedger | None, owner: type) -> BookRecord[T] | T:
        return self if ledger is None else cast(T, getattr(ledger.book, self.name))

    def __set__(self, ledger: MemoryLedger, value: T) -> None:
        raise AttributeError(f"{self.name} is the slashing book's: change its entries, not the record")


class MemorySlashing:
    """One participant's slashing operations on a :class:`MemoryLedger`: its fraud proofs, unanswered-audit
    reports and votes, and what it reads of the witnesses and reports."""

    def __init__(self, ledger: MemoryLedger, address: str) -> None:
        """``address``: the participant, checksummed."""
        self.ledger = ledger
        self.book = ledger.book
        self.address = address

    def _tx(self) -> None:
        self.ledger.mine(1)

    def _validator(self) -> None:
        if self.address not in self.ledger.validators:
            raise NotRegisteredError(f"{self.address} is not a registered validator")

    def slash(self, target: str, evidence: bytes, round: int | None = None) -> bool:
        """``proposeSlash(target, round, evidence)``: opens the fraud proof (all of a miner's unvested pay put
        on hold, the round's pay frozen) or counts as a vote for the open one; 2/3 of the validator stake
        confirms it. False when this validator voted already or it is closed."""
        at = self.ledger.round if round is None else round
        target = to_checksum_address(target)
        p = self.book.slash_proposals.get(evidence)
        if self.address in self.book.slash_votes.get(evidence, set()) or (p is not None and p.executed):
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
        led, book = self.ledger, self.book
        if round == 0 or round > led.round:
            raise CoordinatorError(f"RoundNotReached: round {round}, current {led.round}")
        if target not in led.stakes or led.stakes[target] == 0:
            raise CoordinatorError(f"NothingToSlash: {target}")
        p = MemProposal(target, round, self.address, unanswered)
        book.slash_proposals[evidence] = p
        if target in led.miners:
            book.frozen.setdefault((round, target), evidence)
            k = led.vesting_rounds
            swept = [key for key in led.vesting if key[0] == target and key[1] + k >= led.round]
            p.held = sum(led.vesting.pop(key) for key in swept)
            book.held[evidence] = p.held
            book.hold[target] = book.hold.get(target, 0) + p.held
            book.open_against[target] = book.open_against.get(target, 0) + 1

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
        p = self.book.slash_proposals[evidence]
        if self.address == p.target:
            raise CoordinatorError(f"{what}: TargetCannotVote: {evidence.hex()}")
        voters = self.book.slash_votes.setdefault(evidence, set())
        if self.address in voters:
            raise CoordinatorError(f"{what}: AlreadyVoted: {evidence.hex()}, {self.address}")
        electorate = self._electorate(p, self.address, what)
        voters.add(self.address)
        stake = self.ledger.stakes[self.address]
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
        led, book = self.ledger, self.book
        target, k = p.target, led.vesting_rounds
        p.executed = True
        book.executed.add(evidence)
        book.slashed[target] = book.slashed.get(target, 0) + 1
        lost = book.hold.pop(target, 0) + sum(
            led.vesting.pop(key) for key in list(led.vesting) if key[0] == target and key[1] + k >= led.round
        )
        for ev, q in book.slash_proposals.items():
            if q.target == target and (ev == evidence or not (q.executed or q.rejected)):
                book.held.pop(ev, None)  # the hold is forfeited, whichever proposal put it there
        if book.open_against.get(target, 0):
            book.open_against[target] -= 1
        if book.frozen.get((p.round, target), evidence) != evidence:
            book.frozen[(p.round, target)] = evidence
        p.forfeited = lost
        book.forfeited[target] = book.forfeited.get(target, 0) + lost
        p.stake_taken = self._take_stake(target)

    def _release(self, evidence: bytes, p: MemProposal) -> int:
        """``_release``: the round unfrozen; the last open proposal against the target owes it the hold."""
        book = self.book
        if book.frozen.get((p.round, p.target)) == evidence:
            del book.frozen[(p.round, p.target)]
        book.held.pop(evidence, None)
        if not book.open_against.get(p.target, 0):
            return 0
        book.open_against[p.target] -= 1
        if book.open_against[p.target]:
            return 0
        released = book.hold.pop(p.target, 0)
        if released:
            self.ledger.owed[p.target] = self.ledger.owed.get(p.target, 0) + released
        return released

    def _take_stake(self, target: str) -> int:
        """``_takeStake``: ``slash_bps`` of ``target``'s stake, recorded in ``stake_taken``."""
        led = self.ledger
        amount = led.stakes.get(target, 0) * led.slash_bps // BPS
        led.stakes[target] = led.stakes.get(target, 0) - amount
        self.book.stake_taken[target] = self.book.stake_taken.get(target, 0) + amount
        return amount

    # ---------------------------------------------------------------- unanswered audits

    def report_unanswered(self, miner: str, round: int) -> None:
        """``reportUnanswered``: as a committee member of ``miner``'s audit in ``round``, open the report (all
        its unvested pay held) or vote for the open one; the committee and its witnesses decide it."""
        what = "report unanswered audit"
        self._validator()
        led = self.ledger
        miner = to_checksum_address(miner)
        evidence = unanswered_evidence(led.chain_id, led.contract, miner, round)
        self._require_window(evidence, round, what)
        p = self.book.slash_proposals.get(evidence)
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
        led = self.ledger
        evidence = unanswered_evidence(led.chain_id, led.contract, to_checksum_address(miner), round)
        p = self.book.slash_proposals.get(evidence)
        is_open = p is not None and not p.executed and not p.rejected
        voted = is_open and self.address in self.book.slash_votes.get(evidence, set())
        return MemoryReport(evidence, is_open, voted)

    def vote_unanswered(self, evidence: bytes, support: bool) -> None:
        """``voteSlash`` on an open proposal (a committee member or witness, for an unanswered report)."""
        what = "vote on unanswered report"
        self._validator()
        p = self.book.slash_proposals.get(evidence)
        if p is None:
            raise CoordinatorError(f"{what}: UnknownEvidence: {evidence.hex()}")
        if p.executed or p.rejected:
            raise AlreadyDoneError(f"{what}: EvidenceUsed: {evidence.hex()}")
        if p.unanswered:
            self._require_window(evidence, p.round, what)
        self._vote(evidence, support, what)
        self._tx()

    def expire_report(self, evidence: bytes) -> None:
        """``expireReport``: closes a contested unanswered report past its window (hold released once no
        other proposal against the miner is open, nobody slashed); anyone may."""
        what = "expire unanswered report"
        p = self.book.slash_proposals.get(evidence)
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
