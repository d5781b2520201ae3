"""Errors of the chain client: the root, connection and transaction failures, and one class per Solidity
custom error (:class:`ContractRevert` subclasses, named after the error)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from eth_abi.exceptions import DecodingError
from web3.exceptions import Web3Exception

from protocol.errors import ProtocolError


class ChainError(ProtocolError):
    """Root of the chain client's errors."""


class ChainConnectionError(ChainError):
    """The RPC endpoint could not be reached after all retries."""


class NoAccountError(ChainError):
    """A transaction was requested from a read-only client."""


class NotDeployedError(ChainError):
    """The deployment file names a contract address with no code on the chain it was connected to."""


class TransactionFailed(ChainError):
    """A transaction was mined but failed without a decodable reason (out of gas, ...)."""


class TransactionDropped(ChainError):
    """A sent transaction vanished from the node (a chain restarted from an older state, or a reorg)."""


class NonceTaken(ChainError):
    """The node refused a transaction because its nonce is already used or pending: another process
    signing with the same key (an operator's CLI beside the running node) sent first."""


class MalformedResponseError(ChainError):
    """The RPC endpoint answered a read with a result that does not decode (bad ABI words, bad JSON-RPC
    format, an RPC error object, an out-of-range enum value, malformed logs)."""


# What web3/eth-abi raise on a malformed JSON-RPC result (UnicodeEncodeError is a ValueError).
_MALFORMED = (Web3Exception, DecodingError, ValueError, TypeError, KeyError, IndexError, OverflowError)


@contextlib.contextmanager
def decoding(what: str) -> Iterator[None]:
    """Turn the untyped errors of decoding an RPC result into :class:`MalformedResponseError`."""
    try:
        yield
    except ProtocolError:
        raise
    except _MALFORMED as exc:
        raise MalformedResponseError(f"{what}: malformed RPC response: {type(exc).__name__}: {exc}") from exc


class ContractRevert(ChainError):
    """A contract call reverted. Subclasses are named after the Solidity custom error.

    ``name`` is the error's name (``"Error"``/``"Panic"`` for string and panic reverts), ``args_dict``
    its decoded arguments, ``function`` the contract function that was called.
    """

    name: ClassVar[str] = "Unknown"
    #: What the user can do about it, appended to the message (empty: the name and arguments say it).
    hint: ClassVar[str] = ""

    def __init__(self, function: str, args_dict: Mapping[str, Any], raw: str = "") -> None:
        self.function = function
        self.args_dict = dict(args_dict)
        self.raw = raw
        shown = ", ".join(f"{k}={_show(v)}" for k, v in self.args_dict.items())
        hint = f": {self.hint}" if self.hint else ""
        super().__init__(f"{function} reverted with {self.name}({shown}){hint}")


def _show(v: Any) -> str:
    if isinstance(v, bytes):
        return "0x" + v.hex()
    return str(v)


class UnknownRevert(ContractRevert):
    """A revert whose data matches no error in the ABI."""

    name = "Unknown"


# One class per custom error of TesseraNetwork, in the contract's order, documented from its NatSpec;
# tests/chain/test_abi_bindings.py checks this list against the compiled ABI, so `except X:` type-checks
# for every error the contract can raise.
class WrongRound(ContractRevert):
    """The call named a round other than the current one."""

    name = "WrongRound"


class WrongPhase(ContractRevert):
    """The round is not in the phase the call needs."""

    name = "WrongPhase"


class PhaseClosed(ContractRevert):
    """The phase's deadline has passed (a late commit or reveal)."""

    name = "PhaseClosed"


class PhaseNotOver(ContractRevert):
    """``advance``/``finalize`` called before the phase's deadline."""

    name = "PhaseNotOver"


class AlreadyRegistered(ContractRevert):
    """Solidity: ``account`` already has a role."""

    name = "AlreadyRegistered"


class NotRole(ContractRevert):
    """The account does not have the required role."""

    name = "NotRole"


class StakeTooLow(ContractRevert):
    """Active stake below the minimum."""

    name = "StakeTooLow"
    hint = "the stake is below the run's minimum for the action (`tessera account status` shows it)"


class InvalidAmount(ContractRevert):
    """Solidity: ``amount`` is zero or does not fit."""

    name = "InvalidAmount"


class AlreadyCommitted(ContractRevert):
    """The miner already committed to this round."""

    name = "AlreadyCommitted"


class AlreadyDone(ContractRevert):
    """The validator already committed/revealed (seed or scores) in this round."""

    name = "AlreadyDone"


class NothingCommitted(ContractRevert):
    """Solidity: ``validator`` has no commitment of kind ``what`` in ``round``."""

    name = "NothingCommitted"


class RevealMismatch(ContractRevert):
    """The revealed data (wrong salt, scores or secret) does not match the commitment."""

    name = "RevealMismatch"


class SeedNotRevealed(ContractRevert):
    """Scores revealed by a validator that committed a seed share in the round but did not reveal it."""

    name = "SeedNotRevealed"


class LengthMismatch(ContractRevert):
    """Solidity: A score vector has ``got`` entries, ``expected`` were committed miners."""

    name = "LengthMismatch"


class ScoreOutOfRange(ContractRevert):
    """Solidity: A score ``score`` is above SCORE_MAX."""

    name = "ScoreOutOfRange"


class NotAscending(ContractRevert):
    """Solidity: The list of ``what`` must be strictly ascending; entry ``index`` is not."""

    name = "NotAscending"


class NotParticipant(ContractRevert):
    """Solidity: ``account`` did not commit/reveal in ``round`` and cannot be listed."""

    name = "NotParticipant"


class ScoresHashMismatch(ContractRevert):
    """Solidity: The submitted scores of ``validator`` do not match its reveal."""

    name = "ScoresHashMismatch"


class BadMedian(ContractRevert):
    """Solidity: The submitted median of miner ``index`` (``median``) is not the stake-weighted median."""

    name = "BadMedian"


class NothingToWithdraw(ContractRevert):
    """Solidity: Nothing to withdraw or claim for ``account``."""

    name = "NothingToWithdraw"


class StillUnbonding(ContractRevert):
    """Solidity: The unbonding of ``account`` ends at block ``end``."""

    name = "StillUnbonding"


class RemainingStakeTooLow(ContractRevert):
    """Solidity: Active stake after unbonding would be ``remaining``, below the minimum and not zero."""

    name = "RemainingStakeTooLow"


class EvidenceUsed(ContractRevert):
    """The evidence hash was used already."""

    name = "EvidenceUsed"


class UnknownEvidence(ContractRevert):
    """Solidity: No proposal exists for the evidence hash."""

    name = "UnknownEvidence"


class AlreadyVoted(ContractRevert):
    """Solidity: ``voter`` already voted on the evidence."""

    name = "AlreadyVoted"


class TargetCannotVote(ContractRevert):
    """Solidity: The target of a slash may not vote on it."""

    name = "TargetCannotVote"


class NothingToSlash(ContractRevert):
    """Solidity: ``target`` has nothing to slash (not registered or no stake)."""

    name = "NothingToSlash"


class InvalidProofOfPossession(ContractRevert):
    """Solidity: The BLS proof of possession did not verify."""

    name = "InvalidProofOfPossession"


class TooManyValidators(ContractRevert):
    """Solidity: The validator registry is full (``max`` entries)."""

    name = "TooManyValidators"


class CannotCertify(ContractRevert):
    """Solidity: The checkpoint after ``round`` is already certified, or ``round`` is not finalized yet."""

    name = "CannotCertify"


class BadSigner(ContractRevert):
    """Solidity: Signer ``index`` is unknown or inactive."""

    name = "BadSigner"


class QuorumNotReached(ContractRevert):
    """Signers hold less than 2/3 of the validator stake."""

    name = "QuorumNotReached"


class InvalidSignature(ContractRevert):
    """The aggregate BLS signature did not verify."""

    name = "InvalidSignature"


class InvalidParam(ContractRevert):
    """Solidity: A constructor parameter is out of range."""

    name = "InvalidParam"


class RoundNotReached(ContractRevert):
    """Solidity: `round` is not yet open (the current round is `current`)."""

    name = "RoundNotReached"


class SeedNotFixed(ContractRevert):
    """Solidity: The seed of `round` is not fixed yet, so its audit draw is not known."""

    name = "SeedNotFixed"


class NotAudited(ContractRevert):
    """Solidity: `miner` was not drawn for an audit in `round`."""

    name = "NotAudited"


class NotInCommittee(ContractRevert):
    """Solidity: `validator` is not on the audit committee of `miner` in `round` (opening an unanswered
    report), or neither on it nor one of its witnesses (voting on one)."""

    name = "NotInCommittee"


class VotingClosed(ContractRevert):
    """Solidity: the unanswered-audit report on `evidence` takes no report or vote after `lastRound`."""

    name = "VotingClosed"


class ReportStillOpen(ContractRevert):
    """Solidity: the unanswered-audit report on `evidence` is open until `lastRound`; it expires after."""

    name = "ReportStillOpen"


REVERT_TYPES: dict[str, type[ContractRevert]] = {
    c.name: c
    for c in (
        WrongRound,
        WrongPhase,
        PhaseClosed,
        PhaseNotOver,
        AlreadyRegistered,
        NotRole,
        StakeTooLow,
        InvalidAmount,
        AlreadyCommitted,
        AlreadyDone,
        NothingCommitted,
        RevealMismatch,
        SeedNotRevealed,
        LengthMismatch,
        ScoreOutOfRange,
        NotAscending,
        NotParticipant,
        ScoresHashMismatch,
        BadMedian,
        NothingToWithdraw,
        StillUnbonding,
        RemainingStakeTooLow,
        EvidenceUsed,
        UnknownEvidence,
        AlreadyVoted,
        TargetCannotVote,
        NothingToSlash,
        InvalidProofOfPossession,
        TooManyValidators,
        CannotCertify,
        BadSigner,
        QuorumNotReached,
        InvalidSignature,
        InvalidParam,
        RoundNotReached,
        SeedNotFixed,
        NotAudited,
        NotInCommittee,
        VotingClosed,
        ReportStillOpen,
    )
}


# The token's errors (Solady ERC20), raised through the network when it moves stake: registering or
# adding stake without the tokens used to surface as ``Unknown(data=0xf4d678b8)``.
class TotalSupplyOverflow(ContractRevert):
    """Solady ERC20: the total supply would overflow."""

    name = "TotalSupplyOverflow"


class AllowanceOverflow(ContractRevert):
    """Solady ERC20: the allowance would overflow."""

    name = "AllowanceOverflow"


class AllowanceUnderflow(ContractRevert):
    """Solady ERC20: the allowance would underflow."""

    name = "AllowanceUnderflow"


class InsufficientBalance(ContractRevert):
    """Solady ERC20: the account holds fewer tokens than the call moves."""

    name = "InsufficientBalance"
    hint = (
        "the account holds fewer TSR tokens than this call moves (staking needs the tokens in the "
        "account: ask the run's launcher, who holds the genesis allocation; `tessera account status` "
        "shows the balance)"
    )


class InsufficientAllowance(ContractRevert):
    """Solady ERC20: the spender's allowance is below the amount moved."""

    name = "InsufficientAllowance"


class InvalidPermit(ContractRevert):
    """Solady ERC20: an EIP-2612 permit signature is invalid."""

    name = "InvalidPermit"


class PermitExpired(ContractRevert):
    """Solady ERC20: an EIP-2612 permit is past its deadline."""

    name = "PermitExpired"


class Permit2AllowanceIsFixedAtInfinity(ContractRevert):
    """Solady ERC20: Permit2's allowance cannot be changed."""

    name = "Permit2AllowanceIsFixedAtInfinity"


TOKEN_REVERT_TYPES: dict[str, type[ContractRevert]] = {
    c.name: c
    for c in (
        TotalSupplyOverflow,
        AllowanceOverflow,
        AllowanceUnderflow,
        InsufficientBalance,
        InsufficientAllowance,
        InvalidPermit,
        PermitExpired,
        Permit2AllowanceIsFixedAtInfinity,
    )
}
