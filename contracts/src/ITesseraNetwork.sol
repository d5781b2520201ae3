// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.30;

/// @title ITesseraNetwork
/// @notice The custom errors and events of {TesseraNetwork}, declared once (as OpenZeppelin's IERC20 declares
///         the ERC-20 events), with the two enums they carry. `protocol/chain` mirrors them in Python
///         (`errors.py`, `events.py`); tests/chain/test_abi_bindings.py checks the mirror against the
///         compiled ABI.
interface ITesseraNetwork {
    // ------------------------------------------------------------------ types

    /// @notice Round phases, in order.
    enum Phase {
        Commit,
        Reveal,
        ScoreCommit,
        ScoreReveal,
        Finalize
    }

    /// @notice Role of an account.
    enum Role {
        None,
        Miner,
        Validator
    }

    // ------------------------------------------------------------------ errors

    /// @notice The call needs round `expected` but the current round is `current`.
    error WrongRound(uint256 expected, uint256 current);
    /// @notice The call needs phase `expected`; the round is in `current`.
    error WrongPhase(Phase expected, Phase current);
    /// @notice The phase's deadline (`deadline`, inclusive) has passed at block `blockNumber`.
    error PhaseClosed(Phase phase, uint256 deadline, uint256 blockNumber);
    /// @notice The current phase lasts until block `deadline` (inclusive); now is `blockNumber`.
    error PhaseNotOver(Phase phase, uint256 deadline, uint256 blockNumber);
    /// @notice `account` already has a role.
    error AlreadyRegistered(address account, Role role);
    /// @notice `account` does not have role `expected`.
    error NotRole(address account, Role expected);
    /// @notice `stake` is below the minimum `minimum` for the action.
    error StakeTooLow(address account, uint256 stake, uint256 minimum);
    /// @notice `amount` is zero or does not fit.
    error InvalidAmount(uint256 amount);
    /// @notice `miner` already committed to `round`.
    error AlreadyCommitted(address miner, uint256 round);
    /// @notice `validator` already did `what` in `round`.
    error AlreadyDone(address validator, uint256 round, bytes32 what);
    /// @notice `validator` has no commitment of kind `what` in `round`.
    error NothingCommitted(address validator, uint256 round, bytes32 what);
    /// @notice The revealed data does not hash to the commitment.
    error RevealMismatch(address validator, uint256 round, bytes32 expected, bytes32 got);
    /// @notice `validator` committed a seed in `round` but did not reveal it.
    error SeedNotRevealed(address validator, uint256 round);
    /// @notice A score vector has `got` entries, `expected` were committed miners.
    error LengthMismatch(uint256 expected, uint256 got);
    /// @notice A score `score` is above SCORE_MAX.
    error ScoreOutOfRange(uint256 index, uint256 score);
    /// @notice The list of `what` must be strictly ascending; entry `index` is not.
    error NotAscending(bytes32 what, uint256 index);
    /// @notice `account` did not commit/reveal in `round` and cannot be listed.
    error NotParticipant(address account, uint256 round);
    /// @notice The submitted scores of `validator` do not match its reveal.
    error ScoresHashMismatch(address validator);
    /// @notice The submitted median of miner `index` (`median`) is not the stake-weighted median.
    error BadMedian(uint256 index, uint256 median);
    /// @notice Nothing to withdraw or claim for `account`.
    error NothingToWithdraw(address account);
    /// @notice The unbonding of `account` ends at block `end`.
    error StillUnbonding(address account, uint256 end);
    /// @notice Active stake after unbonding would be `remaining`, below the minimum and not zero.
    error RemainingStakeTooLow(uint256 remaining, uint256 minimum);
    /// @notice The evidence hash was already used.
    error EvidenceUsed(bytes32 evidence);
    /// @notice No proposal exists for the evidence hash.
    error UnknownEvidence(bytes32 evidence);
    /// @notice `voter` already voted on the evidence.
    error AlreadyVoted(bytes32 evidence, address voter);
    /// @notice The target of a slash may not vote on it.
    error TargetCannotVote(bytes32 evidence, address target);
    /// @notice `target` has nothing to slash (not registered or no stake).
    error NothingToSlash(address target);
    /// @notice The BLS proof of possession did not verify.
    error InvalidProofOfPossession(address validator);
    /// @notice The validator registry is full (`max` entries).
    error TooManyValidators(uint256 max);
    /// @notice The checkpoint after `round` is already certified, or `round` is not finalized yet.
    error CannotCertify(uint256 round);
    /// @notice Signer `index` is unknown or inactive.
    error BadSigner(uint256 index);
    /// @notice The signers hold `signed` of `total` validator stake, below 2/3.
    error QuorumNotReached(uint256 signed, uint256 total);
    /// @notice The aggregate BLS signature did not verify.
    error InvalidSignature();
    /// @notice A constructor parameter is out of range.
    error InvalidParam(bytes32 name);
    /// @notice `round` is not yet open (the current round is `current`).
    error RoundNotReached(uint256 round, uint256 current);
    /// @notice The seed of `round` is not fixed yet, so its audit draw is not known.
    error SeedNotFixed(uint256 round);
    /// @notice `miner` was not drawn for an audit in `round`.
    error NotAudited(address miner, uint256 round);
    /// @notice `validator` is not on the audit committee of `miner` in `round` (to open an unanswered
    ///         report), or neither on it nor one of its witnesses (to vote on one).
    error NotInCommittee(address validator, address miner, uint256 round);
    /// @notice The unanswered-audit report on `evidence` takes no report or vote after round `lastRound`.
    error VotingClosed(bytes32 evidence, uint256 lastRound);
    /// @notice The unanswered-audit report on `evidence` can be voted on until round `lastRound`; it
    ///         expires after it.
    error ReportStillOpen(bytes32 evidence, uint256 lastRound);

    // ------------------------------------------------------------------ events

    /// @notice `account` registered with `role` and `stake`.
    event Registered(address indexed account, Role role, uint256 stake);
    /// @notice `account` added `amount`; its active stake is now `stake`.
    event StakeAdded(address indexed account, uint256 amount, uint256 stake);
    /// @notice `account` moved `amount` to unbonding (total `unbonding`, withdrawable from block `end`).
    event UnbondRequested(address indexed account, uint256 amount, uint256 unbonding, uint256 end);
    /// @notice `account` withdrew `amount` of unbonded stake.
    event Withdrawn(address indexed account, uint256 amount);
    /// @notice `miner` committed `commitment` to `round`.
    event UpdateCommitted(uint256 indexed round, address indexed miner, bytes32 commitment);
    /// @notice `validator` committed a seed share to `round`.
    event SeedCommitted(uint256 indexed round, address indexed validator, bytes32 commitment);
    /// @notice `validator` revealed its seed share.
    event SeedRevealed(uint256 indexed round, address indexed validator, bytes32 secret);
    /// @notice The seed of `round` is fixed (`fallbackUsed`: no validator revealed a share).
    event SeedFixed(uint256 indexed round, bytes32 seed, bool fallbackUsed);
    /// @notice `round` entered `phase` at block `startBlock`.
    event PhaseAdvanced(uint256 indexed round, Phase phase, uint256 startBlock);
    /// @notice `validator` committed its score vector for `round`.
    event ScoresCommitted(uint256 indexed round, address indexed validator, bytes32 commitment);
    /// @notice `validator` revealed `scores` for `round`, weighted by `weight`.
    event ScoresRevealed(uint256 indexed round, address indexed validator, uint16[] scores, uint256 weight);
    /// @notice `miner` earned `amount` for `round` with consensus score `consensus`.
    event MinerRewarded(uint256 indexed round, address indexed miner, uint256 consensus, uint256 amount);
    /// @notice `validator` earned `amount` for `round`.
    event ValidatorRewarded(uint256 indexed round, address indexed validator, uint256 amount);
    /// @notice `round` was finalized: `paid` of `budget` was credited; the next round opened.
    event RoundFinalized(uint256 indexed round, uint256 budget, uint256 minersPaid, uint256 validatorsPaid);
    /// @notice `account` claimed `amount` of rewards.
    event Claimed(address indexed account, uint256 amount);
    /// @notice `proposer` proposed slashing `target` on `evidence` about `round` (a fraud proof, or an
    ///         audit left unanswered: `unansweredEvidence(target, round)`).
    event SlashProposed(bytes32 indexed evidence, address indexed target, address indexed proposer, uint256 round);
    /// @notice The pay of `miner` for `round` is frozen by `evidence`; `amount` is held now (0 while the
    ///         round is not settled: `finalize` holds it then, see `MinerRewarded`).
    event PayFrozen(bytes32 indexed evidence, address indexed miner, uint256 indexed round, uint256 amount);
    /// @notice `voter` voted against the proposal on `evidence`; `rejectedStake` of `totalStake` has.
    event SlashRejectVoted(bytes32 indexed evidence, address indexed voter, uint256 rejectedStake, uint256 totalStake);
    /// @notice The proposal on `evidence` was rejected: `released` of held pay went to `target`, the
    ///         proposer lost `penalty` (burned).
    event SlashRejected(
        bytes32 indexed evidence, address indexed target, address indexed proposer, uint256 released, uint256 penalty
    );
    /// @notice `miner` forfeited `amount` of unvested and held rewards (back to the pool) on `evidence`.
    event Forfeited(bytes32 indexed evidence, address indexed miner, uint256 amount);
    /// @notice `amount` of `account`'s rewards vested on a claim (they are now owed).
    event Vested(address indexed account, uint256 amount);
    /// @notice `voter` voted for the slash; `votedStake` of `totalStake` has voted.
    event SlashVoted(bytes32 indexed evidence, address indexed voter, uint256 votedStake, uint256 totalStake);
    /// @notice The unanswered-audit report on `evidence` was neither confirmed nor rejected by 2/3 of its
    ///         electorate within its window and was closed: `released` of held pay went to `target`,
    ///         nobody was slashed.
    event ReportExpired(bytes32 indexed evidence, address indexed target, uint256 indexed round, uint256 released);
    /// @notice `target` lost `amount` (burned) on `evidence`.
    event Slashed(bytes32 indexed evidence, address indexed target, uint256 amount);
    /// @notice The checkpoint after `round` is `digest`, certified by `signedStake` of stake.
    event CheckpointCertified(uint256 indexed round, bytes32 digest, uint256 signedStake, bool bls);
}
