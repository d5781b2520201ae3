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
from typing import Any, TypeVar

from eth_utils import keccak, to_checksum_address

from protocol.chain import (
    AlreadyCommitted,
    AlreadyDone,
    Chain,
    ChainError,
    ContractRevert,
    EvidenceUsed,
    PhaseClosed,
    PhaseNotOver,
    Role,
    SeedNotRevealed,
    WrongPhase,
    WrongRound,
)
from protocol.rounds.coordinator import (
    AlreadyDoneError,
    CoordinatorError,
    NotRegisteredError,
    Phase,
    RoundState,
    SeedNotRevealedError,
    Settlement,
    WrongPhaseError,
)
from protocol.wire import bls

log = logging.getLogger(__name__)
T = TypeVar("T")


def bls_key_for(private_key: str) -> bls.BlsKeyPair:
    """The validator's BLS key, derived from its Ethereum private key (IETF KeyGen over a tagged hash)."""
    return bls.BlsKeyPair.generate(
        keccak(b"tessera.bls-key.v1" + bytes.fromhex(private_key.removeprefix("0x")))
    )


def _translate(what: str, fn: Callable[[], T]) -> T:
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

    # -- reads -----------------------------------------------------------------------------------------
    def current(self, max_age: float = 0.0) -> RoundState:
        """The round's state now; with ``max_age``, the last reading if it is younger than that many
        seconds (a node asking between the stages of one verification need not ask the chain each time)."""
        last = self._last
        if max_age > 0 and last is not None and time.monotonic() - last[0] < max_age:
            return last[1]

        def read() -> RoundState:
            s = self.chain.status()  # one eth_call per poll
            return RoundState(
                round=s.round.round,
                phase=Phase(int(s.round.phase)),
                deadline=s.round.deadline,
                block=s.block,
                checkpoint=s.checkpoint if s.checkpoint != b"\0" * 32 else None,
                assign_seed=s.assign_seed,
                seed=s.seed if s.seed != b"\0" * 32 else None,
            )

        st = _translate("read round", read)
        self._last = (time.monotonic(), st)
        return st

    def checkpoint(self, round: int) -> bytes | None:
        cp = _translate("read checkpoint", lambda: self.chain.checkpoint(round))
        return cp if cp != b"\0" * 32 else None

    def _registered(self, role: int, before_block: int | None = None) -> list[str]:
        evs = _translate("read registrations", lambda: self.chain.events("Registered"))
        out: list[str] = []
        for e in sorted(evs, key=lambda e: (e.block_number, e.log_index)):
            if before_block is not None and e.block_number >= before_block:
                continue
            if int(e.role) == role and to_checksum_address(e.account) not in out:
                out.append(to_checksum_address(e.account))
        return out

    def _round_open_block(self, round: int) -> int | None:
        evs = _translate("read phases", lambda: self.chain.events("PhaseAdvanced", round=round))
        starts = [e.block_number for e in evs if int(e.phase) == int(Phase.COMMIT)]
        return min(starts) if starts else None

    def miners(self, round: int | None = None) -> list[str]:
        if round is None:
            return self._registered(int(Role.MINER))
        opened = self._round_open_block(round)
        if opened is None:
            raise CoordinatorError(f"round {round} has not opened")
        return self._registered(int(Role.MINER), before_block=opened)

    def validators(self) -> list[str]:
        return [to_checksum_address(v) for v in _translate("read validators", self.chain.validators)]

    def update_commitments(self, round: int) -> dict[str, bytes]:
        evs = _translate("read commitments", lambda: self.chain.committed_miners(round))
        return {to_checksum_address(e.miner): bytes(e.commitment) for e in evs}

    def seed_share_status(self, round: int) -> tuple[bool, bool]:
        c = _translate(
            "read seed share", lambda: self.chain.events("SeedCommitted", round=round, validator=self.address)
        )
        r = _translate(
            "read seed share", lambda: self.chain.events("SeedRevealed", round=round, validator=self.address)
        )
        return bool(c), bool(r)

    def score_status(self, round: int) -> tuple[bool, bool]:
        e = _translate("read score entry", lambda: self.chain.score_entry(round, self.address))
        return e.commitment != b"\0" * 32, bool(e.revealed)

    def settlement(self, round: int) -> Settlement | None:
        if round in self._settled:
            return self._settled[round]
        fin = _translate("read finalization", lambda: self.chain.events("RoundFinalized", round=round))
        if not fin:
            return None
        mr = _translate("read rewards", lambda: self.chain.events("MinerRewarded", round=round))
        vr = _translate("read rewards", lambda: self.chain.events("ValidatorRewarded", round=round))
        s = Settlement(
            consensus={to_checksum_address(e.miner): int(e.consensus) for e in mr},
            miner_rewards={to_checksum_address(e.miner): int(e.amount) for e in mr},
            validator_rewards={to_checksum_address(e.validator): int(e.amount) for e in vr},
        )
        self._settled[round] = s
        return s

    def checkpoint_message(self, round: int, digest: bytes) -> bytes:
        return bytes(_translate("checkpoint message", lambda: self.chain.checkpoint_message(round, digest)))

    def owed(self) -> int:
        return int(_translate("read account", lambda: self.chain.account_info(self.address)).owed)

    # -- transactions ----------------------------------------------------------------------------------
    def ensure_registered(self, role: str, stake: int) -> bool:
        info = _translate("read account", lambda: self.chain.account_info(self.address))
        want = Role.MINER if role == "miner" else Role.VALIDATOR
        if info.role == want:
            return False
        if info.role != Role.NONE:
            raise NotRegisteredError(f"{self.address} is registered as {info.role.name}, not {role}")
        if role == "miner":
            _translate("register miner", lambda: self.chain.register_miner(stake))
        else:
            _translate("register validator", lambda: self.chain.register_validator(stake, self._bls))
        return True

    def commit_update(self, round: int, update_digest: bytes) -> None:
        # One transaction commits and pulls the rewards owed so far: 53k gas instead of 79k for two.
        _translate("commit update", lambda: self.chain.commit_and_claim(round, update_digest))

    def commit_seed(self, round: int, secret: bytes) -> None:
        _translate("commit seed", lambda: self.chain.commit_seed(round, secret))

    def reveal_seed(self, round: int, secret: bytes) -> None:
        _translate("reveal seed", lambda: self.chain.reveal_seed(round, secret))

    def commit_scores(self, round: int, scores: Sequence[int], salt: bytes) -> None:
        _translate("commit scores", lambda: self.chain.commit_scores(round, scores, salt))

    def reveal_scores(self, round: int, scores: Sequence[int], salt: bytes) -> None:
        _translate("reveal scores", lambda: self.chain.reveal_scores(round, scores, salt))

    def finalize(self, round: int) -> None:
        _translate("finalize", lambda: self.chain.finalize_round(round))

    def sign_checkpoint(self, round: int, digest: bytes) -> bytes:
        """This validator's BLS signature of the checkpoint message."""
        return self._bls.sign(self.checkpoint_message(round, digest))

    def check_checkpoint_signature(self, round: int, digest: bytes, signer: str, signature: bytes) -> bool:
        key = self._bls_keys.get(signer.lower())
        if key is None:
            key = _translate("read BLS key", lambda: self.chain.bls_key_of(signer))
            self._bls_keys[signer.lower()] = key  # registered keys never change
        try:
            return bls.verify(key, self.checkpoint_message(round, digest), signature)
        except Exception:  # py-ecc raises ValueError/AssertionError variants on malformed points
            return False

    def certify(self, round: int, digest: bytes, signatures: dict[str, bytes]) -> None:
        _translate("certify checkpoint", lambda: self.chain.certify_checkpoint(round, digest, signatures))

    def slash(self, target: str, evidence: bytes) -> bool:
        def go() -> Any:
            owner, _stake, executed = self.chain.slash_proposal(evidence)
            if int(owner, 16) == 0:
                try:
                    return self.chain.propose_slash(target, evidence)
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

        return _translate("slash", go) is not None

    def advance(self) -> bool:
        s = self.chain.status()
        if int(s.round.phase) == int(Phase.FINALIZE) or s.block <= s.round.deadline:
            return False
        try:
            _translate("advance", self.chain.advance)
        except WrongPhaseError:
            return False
        return True
