""":class:`protocol.rounds.coordinator.Coordinator` over the deployed ``TesseraNetwork`` (``protocol.chain``).

Reads that the contract only exposes as events (commitments, registrations, rewards) are served from
event logs; every transaction goes through ``protocol.chain.Chain``, whose reverts are typed
(``ContractRevert`` subclasses). They are translated here to the coordinator's error types, so a node
sees ``WrongPhaseError`` / ``AlreadyDoneError`` whatever the backend. A validator's BLS key is derived
from its Ethereum key (``bls_key_for``), so an operator manages one secret.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

from eth_utils import keccak, to_checksum_address

from protocol.chain import (
    AlreadyCommitted,
    AlreadyDone,
    Chain,
    ChainError,
    ContractRevert,
    EvidenceUsed,
    MinerRewarded,
    PhaseClosed,
    PhaseNotOver,
    Role,
    RoundFinalized,
    SeedCommitted,
    SeedNotRevealed,
    SeedRevealed,
    UnansweredReport,
    ValidatorRewarded,
    WrongPhase,
    WrongRound,
)
from protocol.rounds.audits import AuditDraw
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
from protocol.wire import bls

log = logging.getLogger(__name__)
T = TypeVar("T")

FULL_READ_MAX_S = 30.0
"""Seconds a full round reading stands while only the block number is read (1.3 kB a look)."""

SETTLED_READ_AGE_S = 2.0
"""Seconds a round reading showing round r still open answers ``settlement(r)`` without a log query."""


def bls_key_for(private_key: str) -> bls.BlsKeyPair:
    """The validator's BLS key, derived from its Ethereum private key (IETF KeyGen over a tagged hash)."""
    return bls.BlsKeyPair.generate(
        keccak(b"tessera.bls-key.v1" + bytes.fromhex(private_key.removeprefix("0x")))
    )


def translate(what: str, fn: Callable[[], T]) -> T:
    """``fn()``, its contract reverts and chain errors raised as the :class:`~protocol.rounds.coordinator.Coordinator`
    errors the nodes handle (already done, wrong phase, seed not revealed, not registered, or the root), each
    message prefixed with ``what``."""
    try:
        return fn()
    except (AlreadyCommitted, AlreadyDone, EvidenceUsed) as exc:
        raise AlreadyDoneError(f"{what}: {exc}") from exc
    except (WrongPhase, WrongRound, PhaseClosed, PhaseNotOver) as exc:
        raise WrongPhaseError(f"{what}: {exc}") from exc
    except SeedNotRevealed as exc:
        raise SeedNotRevealedError(f"{what}: {exc}") from exc
    except ContractRevert as exc:
        if type(exc).__name__ in ("NotRole", "StakeTooLow"):
            raise NotRegisteredError(f"{what}: {exc}") from exc
        raise CoordinatorError(f"{what}: {type(exc).__name__}: {exc}") from exc
    except ChainError as exc:
        raise CoordinatorError(f"{what}: {type(exc).__name__}: {exc}") from exc


class ChainCoordinator:
    """One node's view of the chain, signing with its account."""

    def __init__(self, chain: Chain, private_key: str) -> None:
        self.chain = chain
        self.chain_id = chain.chain_id
        self.contract = chain.network_address
        self.address = chain.address
        self._bls = bls_key_for(private_key)
        self._bls_keys: dict[str, bytes] = {}
        self._settled: dict[int, Settlement] = {}
        self._last: tuple[float, RoundState] | None = None
        self._full_at: float | None = None  # when ``_last``'s status was read in full (None: it was)
        # what never changes once written (cached, not asked each step): a certified checkpoint,
        # a round's registry and opening block, a closed phase's commitments, a revealed seed share
        self._checkpoints: dict[int, bytes] = {}
        self._opened: dict[int, int] = {}
        self._registry: dict[int, list[str]] = {}
        self._commitments: dict[int, dict[str, bytes]] = {}
        self._draws: dict[int, dict[str, AuditDraw]] = {}
        self._shares_done: set[int] = set()
        self._shares_committed: set[int] = set()
        self._scores: dict[int, tuple[bool, bool]] = {}

    # -- reads -----------------------------------------------------------------------------------------
    def current(self, max_age: float = 0.0) -> RoundState:
        """The round's state now; with ``max_age``, the last reading if it is younger than that many
        seconds (a node asking between the stages of one verification need not ask the chain each time)."""
        last = self._last
        if max_age > 0 and last is not None and time.monotonic() - last[0] < max_age:
            return last[1]
        if last is not None and self._steady(last):
            block = translate("read block", self.chain.block_number)  # about a third of a status read's bytes
            if last[1].block <= block <= last[1].deadline:
                self._last = (time.monotonic(), replace(last[1], block=block))
                self._full_at = last[0] if self._full_at is None else self._full_at
                return self._last[1]

        def read() -> RoundState:
            s = self.chain.status()
            return RoundState(
                round=s.round.round,
                phase=Phase(int(s.round.phase)),
                deadline=s.round.deadline,
                block=s.block,
                checkpoint=s.checkpoint if s.checkpoint != b"\0" * 32 else None,
                assign_seed=s.assign_seed,
                seed=s.seed if s.seed != b"\0" * 32 else None,
            )

        st = translate("read round", read)
        self._full_at = None
        last = self._last
        if last is not None and (
            st.block < last[1].block or (st.round, int(st.phase)) < (last[1].round, int(last[1].phase))
        ):
            self._forget()  # the chain went back (restarted from an older state, or reorged)
        self._last = (time.monotonic(), st)
        return st

    def _steady(self, last: tuple[float, RoundState]) -> bool:
        """Whether only the block can change before the phase deadline: a phase (and the seed) moves only
        past it, the checkpoint is certified, FINALIZE is not (it ends at any block), and the full reading is
        under :data:`FULL_READ_MAX_S` old (a chain that went back is caught by its block)."""
        full = last[0] if self._full_at is None else self._full_at
        certified = last[1].phase != Phase.FINALIZE and last[1].checkpoint is not None
        return certified and time.monotonic() - full < FULL_READ_MAX_S

    def _forget(self) -> None:
        """Drop the cached reads (the chain is behind a block this node saw)."""
        for cache in (self._checkpoints, self._opened, self._registry, self._commitments, self._draws):
            cache.clear()
        self._shares_done.clear()
        self._shares_committed.clear()
        self._scores.clear()
        self.chain.forget_nonce()

    def _past(self, round: int, phase: Phase) -> bool:
        """Whether a reading of this node has shown ``round`` past ``phase``: what that phase wrote is then
        final (rounds and phases only move forward; a reorg deep enough to undo a phase is not handled)."""
        last = self._last
        return last is not None and (
            last[1].round > round or (last[1].round == round and int(last[1].phase) > int(phase))
        )

    def checkpoint(self, round: int) -> bytes | None:
        if round in self._checkpoints:  # certified once (the contract refuses a second certification)
            return self._checkpoints[round]
        cp = translate("read checkpoint", lambda: self.chain.checkpoint(round))
        if cp == b"\0" * 32:
            return None
        self._checkpoints[round] = cp
        return cp

    def seed(self, round: int) -> bytes | None:
        seed = translate("read seed", lambda: self.chain.seed(round))  # an epoch's, read once a round
        return None if seed == b"\0" * 32 else seed

    def _registered(self, role: int, before_block: int | None = None) -> list[str]:
        evs = translate("read registrations", lambda: self.chain.events("Registered"))
        out: list[str] = []
        for e in sorted(evs, key=lambda e: (e.block_number, e.log_index)):
            if before_block is not None and e.block_number >= before_block:
                continue
            if int(e.role) == role and to_checksum_address(e.account) not in out:
                out.append(to_checksum_address(e.account))
        return out

    def _round_open_block(self, round: int) -> int | None:
        if round in self._opened:
            return self._opened[round]
        evs = translate("read phases", lambda: self.chain.round_events(["PhaseAdvanced"], round))
        starts = [e.block_number for e in evs if int(e.phase) == int(Phase.COMMIT)]
        if not starts:
            return None
        self._opened[round] = min(starts)
        return self._opened[round]

    def miners(self, round: int | None = None) -> list[str]:
        if round is None:
            return self._registered(int(Role.MINER))
        if round in self._registry:  # registrations before the round opened: fixed once it has
            return list(self._registry[round])
        opened = self._round_open_block(round)
        if opened is None:
            raise CoordinatorError(f"round {round} has not opened")
        self._registry[round] = self._registered(int(Role.MINER), before_block=opened)
        return list(self._registry[round])

    def validators(self) -> list[str]:
        return [to_checksum_address(v) for v in translate("read validators", self.chain.validators)]

    def audit_draws(self, round: int, miners: Sequence[str]) -> dict[str, AuditDraw]:
        """Each miner's audit draw of ``round`` once its seed is fixed, computed locally from
        the seed, ``drawSize(round)`` and the run's q and c (three reads)."""
        known = self._draws.setdefault(round, {})  # fixed with the seed: read once per round and miner
        todo = [m for m in miners if to_checksum_address(m) not in known]
        if todo:
            draws = translate("read audit draws", lambda: self.chain.round_draws(round, todo))
            known.update({to_checksum_address(m): d for m, d in zip(todo, draws, strict=True)})
        return {to_checksum_address(m): known[to_checksum_address(m)] for m in miners}

    def report_unanswered(self, miner: str, round: int) -> None:
        """As a committee member, report that ``miner`` did not serve the states of its audit in ``round``
        (the committee's 2/3 confirms: frozen, slashed and forfeited like a proven fake)."""
        translate("report unanswered audit", lambda: self.chain.report_unanswered(miner, round))

    def audit_witnesses(self, round: int, miners: Sequence[str]) -> dict[str, int]:
        """Each miner's witness bitmap of ``round``: who decides an unanswered report besides its committee."""
        read = partial(translate, "read audit witnesses")
        return {to_checksum_address(m): read(partial(self.chain.audit_witnesses, round, m)) for m in miners}

    def unanswered_report(self, miner: str, round: int) -> UnansweredReport:
        """The unanswered-audit report on ``miner`` in ``round`` (open? voted on by this node?)."""
        return translate("read unanswered report", lambda: self.chain.unanswered_report(miner, round))

    def vote_unanswered(self, evidence: bytes, support: bool) -> None:
        """As committee member or witness: for the report (not served) or against it (served, checks out)."""
        translate("vote on unanswered report", lambda: self.chain.vote_slash(evidence, support))

    def expire_report(self, evidence: bytes) -> None:
        """Close a contested unanswered report past its window (pay released, nobody slashed)."""
        translate("expire unanswered report", lambda: self.chain.expire_report(evidence))

    def update_commitments(self, round: int) -> dict[str, bytes]:
        if round in self._commitments:
            return dict(self._commitments[round])
        closed = self._past(round, Phase.COMMIT)  # known before the read: no commitment lands after it
        evs = translate("read commitments", lambda: self.chain.committed_miners(round))
        got: dict[str, bytes] = {to_checksum_address(e.miner): bytes(e.commitment) for e in evs}
        if closed:
            self._commitments[round] = dict(got)
        return got

    def seed_share_status(self, round: int) -> tuple[bool, bool]:
        # a commitment stays: once seen, only the reveal is asked for, and only from the reveal phase on
        # (a log query a step through the commit phase); both events in one log query
        committed, last = round in self._shares_committed, self._last
        in_commit = last is not None and (last[1].round, last[1].phase) == (round, Phase.COMMIT)
        if round in self._shares_done or (committed and in_commit):
            return True, round in self._shares_done
        names = ["SeedRevealed"] if committed else ["SeedCommitted", "SeedRevealed"]
        evs = translate("read seed share", lambda: self.chain.round_events(names, round, self.address))
        c = committed or any(isinstance(e, SeedCommitted) for e in evs)
        if not c:
            return False, False
        self._shares_committed.add(round)
        r = any(isinstance(e, SeedRevealed) for e in evs)
        if r:
            self._shares_done.add(round)
        return True, r

    def score_status(self, round: int) -> tuple[bool, bool]:
        known, last = self._scores.get(round), self._last  # final once seen: the commitment, its reveal
        if known is not None and (known[1] or (last is not None and last[1].phase == Phase.SCORE_COMMIT)):
            return known  # revealed, or committed with nothing to reveal yet: not read every step
        e = translate("read score entry", lambda: self.chain.score_entry(round, self.address))
        got = (e.commitment != b"\0" * 32, bool(e.revealed))
        if got[0]:
            self._scores[round] = got
        return got

    def settlement(self, round: int) -> Settlement | None:
        if round in self._settled:
            return self._settled[round]
        last = self._last
        if last is not None and last[1].round <= round and time.monotonic() - last[0] < SETTLED_READ_AGE_S:
            return None  # a reading this fresh has the round still open (finalizing it opens the next)
        names = ["RoundFinalized", "MinerRewarded", "ValidatorRewarded"]  # one log query
        evs = translate("read settlement", lambda: self.chain.round_events(names, round))
        if not any(isinstance(e, RoundFinalized) for e in evs):
            return None
        mr = [e for e in evs if isinstance(e, MinerRewarded)]
        vr = [e for e in evs if isinstance(e, ValidatorRewarded)]
        s = Settlement(
            consensus={to_checksum_address(e.miner): int(e.consensus) for e in mr},
            miner_rewards={to_checksum_address(e.miner): int(e.amount) for e in mr},
            validator_rewards={to_checksum_address(e.validator): int(e.amount) for e in vr},
        )
        self._settled[round] = s
        return s

    def checkpoint_message(self, round: int, digest: bytes) -> bytes:
        # computed here as the contract's checkpointMessage does (a request per signature checked)
        return checkpoint_message(self.chain_id, self.contract, round, digest)

    def owed(self) -> int:
        return int(translate("read account", lambda: self.chain.account_info(self.address)).owed)

    # -- transactions ----------------------------------------------------------------------------------
    def ensure_registered(self, role: str, stake: int) -> bool:
        info = translate("read account", lambda: self.chain.account_info(self.address))
        want = Role.MINER if role == "miner" else Role.VALIDATOR
        if info.role == want:
            return False
        if info.role != Role.NONE:
            raise NotRegisteredError(f"{self.address} is registered as {info.role.name}, not {role}")
        if role == "miner":
            translate("register miner", lambda: self.chain.register_miner(stake))
        else:
            translate("register validator", lambda: self.chain.register_validator(stake, self._bls))
        return True

    def commit_update(self, round: int, update_digest: bytes) -> None:
        # One transaction commits and pulls the rewards owed so far: 53k gas instead of 79k for two.
        translate("commit update", lambda: self.chain.commit_and_claim(round, update_digest))

    def commit_seed(self, round: int, secret: bytes) -> None:
        translate("commit seed", lambda: self.chain.commit_seed(round, secret))

    def reveal_seed(self, round: int, secret: bytes) -> None:
        translate("reveal seed", lambda: self.chain.reveal_seed(round, secret))

    def commit_scores(self, round: int, scores: Sequence[int], salt: bytes) -> None:
        translate("commit scores", lambda: self.chain.commit_scores(round, scores, salt))

    def reveal_scores(self, round: int, scores: Sequence[int], salt: bytes) -> None:
        translate("reveal scores", lambda: self.chain.reveal_scores(round, scores, salt))

    def finalize(self, round: int) -> None:
        translate("finalize", lambda: self.chain.finalize_round(round))

    def sign_checkpoint(self, round: int, digest: bytes) -> bytes:
        """This validator's BLS signature of the checkpoint message."""
        return self._bls.sign(self.checkpoint_message(round, digest))

    def check_checkpoint_signature(self, round: int, digest: bytes, signer: str, signature: bytes) -> bool:
        key = self._bls_keys.get(signer.lower())
        if key is None:
            key = translate("read BLS key", lambda: self.chain.bls_key_of(signer))
            self._bls_keys[signer.lower()] = key  # registered keys never change
        try:
            return bls.verify(key, self.checkpoint_message(round, digest), signature)
        except Exception:  # py-ecc raises ValueError/AssertionError variants on malformed points
            return False

    def certify(self, round: int, digest: bytes, signatures: dict[str, bytes]) -> None:
        translate("certify checkpoint", lambda: self.chain.certify_checkpoint(round, digest, signatures))

    def slash(self, target: str, evidence: bytes, round: int | None = None) -> bool:
        at = self.current().round if round is None else round

        def go() -> Any:
            owner, _stake, executed = self.chain.slash_proposal(evidence)
            if int(owner, 16) == 0:
                try:
                    return self.chain.propose_slash(target, at, evidence)
                except EvidenceUsed:
                    # another validator's proposal landed first (a contract before the same-evidence
                    # rule reverts here): read it again and vote for it instead of dropping the vote
                    owner, _stake, executed = self.chain.slash_proposal(evidence)
                    if int(owner, 16) != int(target, 16):
                        raise
            voted = self.chain.network.functions.hasVoted(evidence, self.address).call()
            if executed or voted:
                return None
            return self.chain.vote_slash(evidence)

        return translate("slash", go) is not None

    def advance(self) -> bool:
        s = self.chain.status()
        if int(s.round.phase) == int(Phase.FINALIZE) or s.block <= s.round.deadline:
            return False
        try:
            translate("advance", self.chain.advance)
        except WrongPhaseError:
            return False
        return True
