"""The :class:`Chain` client: one deployment, one optional signing account, a typed method per
contract call, reads retried on connection errors. Its plumbing is ``protocol.chain.transport`` (whose
names are re-exported here) and its reads ``protocol.chain.reads``; this module holds the transactions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from eth_account import Account
from eth_account.messages import encode_defunct
from eth_account.signers.local import LocalAccount
from eth_utils import to_checksum_address
from web3.exceptions import ContractLogicError

from protocol.chain.abi import decode_revert
from protocol.chain.errors import ChainError
from protocol.chain.reads import ChainReads
from protocol.chain.transport import b32, retrying
from protocol.chain.values import Role, TxResult, UnansweredReport
from protocol.rounds.audits import counted_matrix
from protocol.rounds.consensus import settle
from protocol.wire import bls
from protocol.wire.commitments import score_commitment, seed_commitment, unanswered_evidence

__all__ = [
    "Chain",
]


class Chain(ChainReads):
    """A connection to one deployment, optionally with a signing account.

    All transaction methods return a :class:`TxResult` (decoded events included) or raise a
    :class:`ContractRevert` subclass before anything is sent (the call is simulated first).
    """

    # ------------------------------------------------------------------ token and staking

    def approve(self, amount: int) -> TxResult:
        """Lets the network pull ``amount`` of the caller's tokens."""
        return self._transact(self.token, "approve", self.network_address, amount)

    def transfer(self, to: str, amount: int) -> TxResult:
        """Transfers tokens (e.g. stake from the deployer's genesis allocation)."""
        return self._transact(self.token, "transfer", to_checksum_address(to), amount)

    def _ensure_allowance(self, amount: int) -> None:
        owner = self.address
        allowance = int(
            retrying(lambda: self.token.functions.allowance(owner, self.network_address).call(), "allowance")
        )
        if allowance < amount:
            self.approve(amount)

    def register_miner(self, stake: int) -> TxResult:
        """Approves and registers the caller as a miner with ``stake``."""
        self._ensure_allowance(stake)
        return self._transact(self.network, "registerMiner", stake)

    def register_validator(self, stake: int, key: bls.BlsKeyPair) -> TxResult:
        """Approves and registers the caller as a validator with ``stake`` and BLS ``key`` (with PoP)."""
        self._ensure_allowance(stake)
        pk = bls.g1_words(key.public_key)
        pop_msg = bytes(self._call("popMessage", self.address, pk))
        pop = bls.g2_words(key.proof_of_possession(pop_msg))
        return self._transact(self.network, "registerValidator", stake, pk, pop)

    def add_stake(self, amount: int) -> TxResult:
        """Adds ``amount`` to the caller's active stake."""
        self._ensure_allowance(amount)
        return self._transact(self.network, "addStake", amount)

    def request_unbond(self, amount: int) -> TxResult:
        """Starts unbonding ``amount`` (withdrawable after ``unbonding_blocks``; slashable until then)."""
        return self._transact(self.network, "requestUnbond", amount)

    def withdraw(self) -> TxResult:
        """Withdraws unbonded stake after the delay."""
        return self._transact(self.network, "withdraw")

    # ------------------------------------------------------------------ miners

    def commit_update(self, round: int, update_digest: bytes) -> TxResult:
        """Commits the caller's update digest to ``round`` (sender-bound commitment)."""
        return self._transact(
            self.network, "commitUpdate", round, self.commitment_for(round, self.address, update_digest)
        )

    def commit_raw(self, round: int, commitment: bytes) -> TxResult:
        """Commits an arbitrary 32-byte commitment (tests: a copied commitment)."""
        return self._transact(self.network, "commitUpdate", round, b32(commitment))

    def commit_and_claim(self, round: int, update_digest: bytes) -> TxResult:
        """Commits to ``round`` and claims all owed rewards in one transaction (cheapest per round)."""
        return self._transact(
            self.network, "commitAndClaim", round, self.commitment_for(round, self.address, update_digest)
        )

    def claim(self) -> TxResult:
        """Pays the caller its owed rewards (pull payment)."""
        return self._transact(self.network, "claim")

    # ------------------------------------------------------------------ validators

    def commit_seed(self, round: int, secret: bytes) -> TxResult:
        """Commits a 32-byte seed share (Commit phase); keep ``secret`` to reveal it."""
        return self._transact(
            self.network, "commitSeed", round, seed_commitment(b32(secret), self.address, round)
        )

    def reveal_seed(self, round: int, secret: bytes) -> TxResult:
        """Reveals the seed share (Reveal phase)."""
        return self._transact(self.network, "revealSeed", round, b32(secret))

    def commit_scores(self, round: int, scores: Sequence[int], salt: bytes) -> TxResult:
        """Commits a score vector (one score in [0, 10000] per committed miner, ascending address order)."""
        c = score_commitment(self.chain_id, self.network_address, round, self.address, scores, b32(salt))
        return self._transact(self.network, "commitScores", round, c)

    def reveal_scores(self, round: int, scores: Sequence[int], salt: bytes) -> TxResult:
        """Reveals the committed score vector with its salt (ScoreReveal phase)."""
        return self._transact(self.network, "revealScores", round, list(scores), b32(salt))

    # ------------------------------------------------------------------ phases and settlement

    def advance(self) -> TxResult:
        """Moves the round to its next phase (after the deadline; anyone)."""
        return self._transact(self.network, "advance")

    def finalize_round(self, round: int) -> TxResult:
        """Settles ``round``: reads commits and reveals from events, computes the medians with
        :func:`protocol.rounds.consensus.settle` and submits them (the contract checks them)."""
        miners = [e.miner for e in self.committed_miners(round)]
        reveals = self.revealed_scores(round)
        counted = None
        p = self.params()
        if p.audit_rate_bps and p.committee_size:  # committees smaller than everyone: audited miners
            index = {v.lower(): i for i, v in enumerate(self.validators())}
            counted = counted_matrix(
                self.round_draws(round, miners), [index[r.validator.lower()] for r in reveals]
            )
        st = settle(
            [list(r.scores) for r in reveals],
            [r.weight for r in reveals],
            0,
            0,
            n_miners=len(miners),
            counted=counted,
        )
        return self._transact(
            self.network,
            "finalize",
            round,
            [to_checksum_address(m) for m in miners],
            [to_checksum_address(r.validator) for r in reveals],
            [list(r.scores) for r in reveals],
            st.medians,
        )

    # ------------------------------------------------------------------ slashing

    def propose_slash(self, target: str, round: int, evidence: bytes) -> TxResult:
        """Proposes slashing ``target`` for a fraud proven in ``round`` on ``evidence`` (a 32-byte hash,
        usable once) and votes for it; the target's pay for ``round`` is frozen at once."""
        return self._transact(self.network, "proposeSlash", to_checksum_address(target), round, b32(evidence))

    def report_unanswered(self, miner: str, round: int) -> TxResult:
        """Reports (as a committee member) that ``miner`` did not answer its audit in ``round``."""
        return self._transact(self.network, "reportUnanswered", to_checksum_address(miner), round)

    def audit_witnesses(self, round: int, miner: str) -> int:
        """The witnesses of an unanswered-audit report on ``miner`` in ``round`` (bit i = validators[i]):
        up to c validators outside its committee, drawn from the seed, who vote on the report too."""
        return int(self._call("auditWitnesses", round, to_checksum_address(miner)))

    def unanswered_report(self, miner: str, round: int) -> UnansweredReport:
        """The unanswered-audit report on ``miner`` in ``round``: its evidence, whether it is open and
        whether this client's account voted on it. One round trip (it was three sequential
        reads): the evidence is computed as ``unansweredEvidence`` does, the proposal and the vote are
        read in one batch."""
        evidence = unanswered_evidence(self.chain_id, self.network_address, miner, round)
        calls: list[tuple[Any, str, tuple[Any, ...]]] = [(self.network, "slashProposal", (evidence,))]
        if self.account is not None:
            calls.append((self.network, "hasVoted", (evidence, self.address)))
        (target, _voted, executed, rejected, *_rest), *has_voted = self.batch(calls)
        is_open = int(target, 16) != 0 and not executed and not rejected
        voted = is_open and bool(has_voted) and bool(has_voted[0])
        return UnansweredReport(evidence, is_open, voted)

    def expire_report(self, evidence: bytes) -> TxResult:
        """Closes the unanswered-audit report on ``evidence`` left contested past its window (the held
        pay is released to the miner, nobody is slashed); anyone may send it."""
        return self._transact(self.network, "expireReport", b32(evidence))

    def reject_slash(self, evidence: bytes) -> TxResult:
        """Votes against the open proposal on ``evidence`` (its evidence does not check out)."""
        return self.vote_slash(evidence, support=False)

    def vote_slash(self, evidence: bytes, support: bool = True) -> TxResult:
        """Votes for (``support``) or against the open proposal on ``evidence``; 2/3 of the electorate's
        stake either way decides it (confirmed: slash and forfeit; rejected: pay released, proposer
        slashed)."""
        return self._transact(self.network, "voteSlash", b32(evidence), support)

    # ------------------------------------------------------------------ checkpoints

    def sign_checkpoint_bls(self, key: bls.BlsKeyPair, round: int, digest: bytes) -> bytes:
        """A validator's BLS signature of the checkpoint after ``round``."""
        return key.sign(self.checkpoint_message(round, digest))

    def sign_checkpoint_ecdsa(self, account: LocalAccount, round: int, digest: bytes) -> bytes:
        """A validator's 65-byte EIP-191 signature of the checkpoint message (ECDSA variant)."""
        msg = self.checkpoint_message(round, digest)
        return bytes(Account.sign_message(encode_defunct(primitive=msg), account.key).signature)

    def _bls_args(self, signatures: Mapping[str, bytes]) -> tuple[int, tuple[bytes, ...]]:
        signed = 0
        for v in signatures:
            info = self.account_info(v)
            if info.role != Role.VALIDATOR:
                raise ChainError(f"{v} is not a registered validator")
            signed |= 1 << info.validator_index
        n = int(self._call("validatorCount"))
        non_signers = ((1 << n) - 1) & ~signed
        return non_signers, bls.g2_words(bls.aggregate(list(signatures.values())))

    def certify_checkpoint(self, round: int, digest: bytes, signatures: Mapping[str, bytes]) -> TxResult:
        """Certifies ``digest`` after ``round`` with the aggregate of per-validator BLS signatures
        (``{validator address: signature}``); signers need 2/3 of the validator stake. The contract
        receives the bitmap of registered validators that did NOT sign."""
        non_signers, sig = self._bls_args(signatures)
        return self._transact(self.network, "certifyCheckpoint", round, b32(digest), non_signers, sig)

    def certify_checkpoint_ecdsa(
        self, round: int, digest: bytes, signatures: Mapping[str, bytes]
    ) -> TxResult:
        """Certifies with one ECDSA signature per validator (sorted by address here)."""
        ordered = [signatures[a] for a in sorted(signatures, key=lambda a: int(a, 16))]
        return self._transact(self.network, "certifyCheckpointEcdsa", round, b32(digest), ordered)

    def estimate(self, fn_name: str, *args: Any) -> int:
        """Gas estimate of a network call from the signing account (benchmarks)."""
        fn = getattr(self.network.functions, fn_name)(*args)
        try:
            return int(fn.estimate_gas({"from": self.address}))
        except ContractLogicError as exc:
            raise decode_revert(fn_name, exc.data) from None

    def bls_certificate_args(self, signatures: Mapping[str, bytes]) -> tuple[int, tuple[bytes, ...]]:
        """(non-signer bitmap, aggregate signature words) for ``certifyCheckpoint``."""
        return self._bls_args(signatures)
