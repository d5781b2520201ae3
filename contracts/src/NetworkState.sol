// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.30;

import {BLS} from "solady/utils/ext/ithaca/BLS.sol";
import {Consensus} from "./Consensus.sol";
import {NetworkMath} from "./NetworkMath.sol";
import {ITesseraNetwork} from "./ITesseraNetwork.sol";

/// @title NetworkState
/// @notice The state of a Tessera network, shared by {TesseraNetwork} and the module it delegates its
///         slashing proposals and votes to ({NetworkSlashing}): types, parameters (immutables, set by
///         both from the same {Params}), the storage layout (declared here only, so both contracts agree
///         on every slot) and the helpers both use.
/// @dev Split out of TesseraNetwork to keep its runtime code under EIP-170's 24,576 bytes
///      (docs/contracts.md, "Size"). Storage order is the one TesseraNetwork always had.
abstract contract NetworkState is ITesseraNetwork {
    // ------------------------------------------------------------------ types

    /// @notice Per-account state, packed in one slot so that a miner's commit and claim touch one slot.
    struct Account {
        uint96 stake; // active (bonded) stake
        uint96 owed; // unclaimed rewards
        uint32 lastCommitRound; // miners: last round committed to
        Role role;
        uint16 validatorIndex; // validators: index in `validators` (bit in certificate bitmaps)
    }

    /// @notice Stake waiting out the unbonding delay (still slashable).
    struct Unbonding {
        uint128 amount;
        uint64 end; // first block at which it can be withdrawn
    }

    /// @notice State of the current round, one slot.
    struct RoundState {
        uint64 round;
        Phase phase;
        uint64 phaseStart; // block at which the current phase began
        uint32 commits; // miners committed this round
        uint16 seedReveals;
        uint16 scoreReveals;
    }

    /// @notice A validator's score submission for one round.
    struct ScoreEntry {
        bytes32 commitment; // keccak256(abi.encode(chainid, this, round, validator, scores, salt))
        bytes32 scoresHash; // keccak256(abi.encode(scores)) once revealed
        uint96 weight; // active stake at reveal
        bool revealed;
    }

    /// @notice A slashing proposal, keyed by its evidence hash: a fraud proof about (target, round), or
    ///         an audit of (target, round) left unanswered. Open until the electorate (all validators;
    ///         for an unanswered audit the miner's committee) confirms it or rejects it with 2/3 of its
    ///         stake.
    struct SlashProposal {
        address target;
        uint96 votedStake; // stake that voted to confirm
        bool executed; // confirmed: slashed, unvested and held pay forfeited
        bool rejected; // closed without a slash, held pay released: rejected by 2/3 (the proposer
        // penalised, SlashRejected) or an unanswered report that expired contested (ReportExpired)
        bool unanswered; // an unanswered audit (electorate: the committee), not a fraud proof
        uint64 round; // the round the evidence is about
        uint96 held; // miner pay this proposal put on hold (`_holds`): all of it unvested at opening,
        // plus the settled pay of a round it froze; a record, the hold itself is the target's
        address proposer;
        uint96 rejectedStake; // stake that voted to reject
    }

    /// @notice A round's miner pay while it vests (one of `vestingRounds` slots per miner: round % K).
    struct Vesting {
        uint128 amount;
        uint64 round;
    }

    /// @notice A miner's pay held while proposals against it are open: one pot per miner, so whichever
    ///         proposal is confirmed forfeits all of it, and only the last one closing unconfirmed
    ///         releases it (no proposal can release pay that another, still open, put on hold).
    struct Hold {
        uint128 amount; // held pay (counted in totalUnvested)
        uint64 open; // open proposals against the miner
    }

    /// @notice Constructor parameters (all immutable once deployed).
    struct Params {
        uint256 minMinerStake;
        uint256 minValidatorStake;
        uint64 unbondingBlocks;
        uint64 commitBlocks;
        uint64 revealBlocks;
        uint64 scoreCommitBlocks;
        uint64 scoreRevealBlocks;
        uint256 emissionPerRound; // tokens paid per finalized round (if the pool holds them)
        uint16 validatorShareBps; // share of the emission that goes to validators
        uint16 slashBps; // fraction of (stake + unbonding) taken by one slash
        uint256 poolSupply; // tokens minted to this contract as the reward pool
        uint256 genesisSupply; // tokens minted to the deployer
        bytes32 genesisCheckpoint; // digest of theta_1
        uint16 auditRateBps; // q: probability that a (miner, round) is audited (10000: every one)
        uint16 committeeSize; // c: validators per audit committee (0: all validators)
        uint16 vestingRounds; // K: a round's miner pay vests when round + K is finalized (0: at once)
    }

    // ------------------------------------------------------------------ constants and immutables

    /// @notice At most this many validators ever register (certificate bitmaps are one word).
    uint256 public constant MAX_VALIDATORS = 256;
    /// @notice Minimum active stake to commit updates.
    uint256 public immutable minMinerStake;
    /// @notice Minimum active stake to act as a validator.
    uint256 public immutable minValidatorStake;
    /// @notice Blocks between an unbonding request and the withdrawal.
    uint64 public immutable unbondingBlocks;
    /// @notice Length of the Commit phase in blocks.
    uint64 public immutable commitBlocks;
    /// @notice Length of the Reveal phase in blocks.
    uint64 public immutable revealBlocks;
    /// @notice Length of the ScoreCommit phase in blocks.
    uint64 public immutable scoreCommitBlocks;
    /// @notice Length of the ScoreReveal phase in blocks.
    uint64 public immutable scoreRevealBlocks;
    /// @notice Emission per finalized round (paid from the pool while it lasts).
    uint256 public immutable emissionPerRound;
    /// @notice Share of the emission for validators, in basis points.
    uint256 public immutable validatorShareBps;
    /// @notice Fraction of stake taken by one slash, in basis points (sized by protocol/rounds/economics.py).
    uint256 public immutable slashBps;
    /// @notice q: probability, in basis points, that a (miner, round) is audited (drawn from the seed).
    uint256 public immutable auditRateBps;
    /// @notice c: validators on each audit committee (0: all).
    uint256 public immutable committeeSize;
    /// @notice K: a round's miner pay vests once round + K is finalized (0: it is owed at once).
    uint256 public immutable vestingRounds;


    // ------------------------------------------------------------------ storage

    /// @notice State of the current round.
    RoundState public state;
    /// @notice Reward pool: tokens not yet emitted.
    uint256 public pool;
    /// @notice Sum of the active stakes of all accounts.
    uint256 public totalStake;
    /// @notice Sum of the active stakes of validators (slashing and certificate quorums).
    uint256 public totalValidatorStake;
    /// @notice Sum of all unbonding stakes.
    uint256 public totalUnbonding;

    mapping(address => Account) internal _accounts;
    mapping(address => Unbonding) internal _unbonding;
    mapping(address => BLS.G1Point) internal _blsKeys;
    /// @dev Sum of the BLS keys of all registered validators (starts at the point at infinity).
    BLS.G1Point internal _aggregateKey;
    /// @notice Validators in registration order (index = bit in certificate bitmaps).
    address[] public validators;

    /// @notice Seed of each round (zero until fixed).
    mapping(uint256 => bytes32) public seeds;
    /// @notice XOR of the hashed revealed seed shares of each round.
    mapping(uint256 => bytes32) public seedMix;
    mapping(uint256 => mapping(address => bytes32)) internal _seedCommits;
    mapping(uint256 => mapping(address => ScoreEntry)) internal _scores;
    /// @notice Certified checkpoint digest of each round (round 1: the genesis checkpoint).
    mapping(uint256 => bytes32) public checkpoints;
    mapping(bytes32 => SlashProposal) internal _slashes;
    mapping(bytes32 => mapping(address => bool)) internal _slashVoted;
    /// @notice Unvested miner pay plus pay held by open proposals (counted in the balance invariant).
    uint256 public totalUnvested;
    /// @notice Number of validators registered when the seed of each round was fixed (its draw's `n`).
    mapping(uint256 => uint256) public drawSize;
    mapping(address => mapping(uint256 => Vesting)) internal _vesting;
    /// @dev round => miner => the evidence that froze its pay for that round (first proposal wins).
    mapping(uint256 => mapping(address => bytes32)) internal _frozen;
    /// @dev round => number of pairs frozen before it was settled (finalize looks them up only if > 0).
    mapping(uint256 => uint256) internal _frozenIn;
    /// @dev miner => its pay held by the open proposals against it (see {Hold}).
    mapping(address => Hold) internal _holds;

    bytes32 internal constant _UNANSWERED = "tessera.unanswered.v1";

    /// @notice An unanswered-audit report about round r takes reports and votes while the current round
    ///         is at most r + REPORT_WINDOW_ROUNDS; after that, if neither 2/3 confirmed nor 2/3 rejected
    ///         it, anyone may close it with `expireReport` (held pay released, nobody slashed).
    uint256 public constant REPORT_WINDOW_ROUNDS = 2;

    // ------------------------------------------------------------------ constructor

    /// @notice Checks and records the parameters.
    /// @param p The parameters (see {Params}); documented in docs/contracts.md.
    constructor(Params memory p) {
        if (p.validatorShareBps > Consensus.BPS) revert InvalidParam("validatorShareBps");
        if (p.slashBps > Consensus.BPS) revert InvalidParam("slashBps");
        if (p.auditRateBps > Consensus.BPS) revert InvalidParam("auditRateBps");
        if (p.committeeSize > MAX_VALIDATORS) revert InvalidParam("committeeSize");
        if (p.poolSupply + p.genesisSupply > type(uint96).max) revert InvalidParam("supply");
        if (p.minMinerStake == 0 || p.minValidatorStake == 0) revert InvalidParam("minStake");
        if (p.commitBlocks == 0 || p.revealBlocks == 0 || p.scoreCommitBlocks == 0 || p.scoreRevealBlocks == 0) {
            revert InvalidParam("phaseBlocks");
        }
        minMinerStake = p.minMinerStake;
        minValidatorStake = p.minValidatorStake;
        unbondingBlocks = p.unbondingBlocks;
        commitBlocks = p.commitBlocks;
        revealBlocks = p.revealBlocks;
        scoreCommitBlocks = p.scoreCommitBlocks;
        scoreRevealBlocks = p.scoreRevealBlocks;
        emissionPerRound = p.emissionPerRound;
        validatorShareBps = p.validatorShareBps;
        slashBps = p.slashBps;
        auditRateBps = p.auditRateBps;
        committeeSize = p.committeeSize;
        vestingRounds = p.vestingRounds;
    }

    /// @dev The settlement math contract (each deployed contract keeps the address as its own immutable).
    function _networkMath() internal view virtual returns (NetworkMath);

    // ------------------------------------------------------------------ shared views and helpers

    /// @notice The audit draw of `miner` in `round` (see `Consensus.auditDraw`; protocol/rounds/audits.py
    ///         recomputes it off-chain): whether it is audited and its committee as a bitmap of validator
    ///         indices (bit i = validators[i]; 0 when not audited). Known once the round's seed is fixed,
    ///         after the update commits; `n` is the number of validators registered at that moment.
    /// @param round A round whose seed is fixed.
    /// @param miner Any address.
    /// @return audited Whether (miner, round) is audited.
    /// @return committee The committee bitmap.
    function auditDraw(uint256 round, address miner) public view returns (bool audited, uint256 committee) {
        bytes32 seed = seeds[round];
        if (round == 0 || seed == bytes32(0)) revert SeedNotFixed(round);
        return _networkMath().auditDraw(seed, miner, drawSize[round], auditRateBps, committeeSize);
    }

    /// @notice The witnesses of an unanswered-audit report on `miner` in `round` (issue 26, the reverse
    ///         attack), a bitmap of validator indices like the committee's: up to c validators outside the
    ///         committee, drawn from the round's seed (`Consensus.witnessDraw`). They vote on the report
    ///         with the committee after fetching the audited states themselves; 0 when the miner is not
    ///         audited or the committee is every validator.
    /// @param round A round whose seed is fixed.
    /// @param miner Any address.
    /// @return witnesses The witness bitmap.
    function auditWitnesses(uint256 round, address miner) public view returns (uint256 witnesses) {
        (, uint256 committee) = auditDraw(round, miner);
        return _networkMath().witnessDraw(seeds[round], miner, drawSize[round], committee, committeeSize);
    }

    /// @notice The evidence hash of "`miner` did not answer its audit in `round`" (see {reportUnanswered}).
    /// @param miner The miner.
    /// @param round The round.
    /// @return keccak256(abi.encode("tessera.unanswered.v1", chainid, this, miner, round)).
    function unansweredEvidence(address miner, uint256 round) public view returns (bytes32) {
        return keccak256(abi.encode(_UNANSWERED, block.chainid, address(this), miner, round));
    }

    function _requireActiveValidator(address v) internal view returns (uint96) {
        Account memory a = _accounts[v];
        if (a.role != Role.Validator) revert NotRole(v, Role.Validator);
        if (a.stake < minValidatorStake) revert StakeTooLow(v, a.stake, minValidatorStake);
        return a.stake;
    }

    /// @dev Empties the vesting slots of `account` that have vested (`vested`) or not (a forfeit) and
    ///      returns their sum (a slot of round r vests once r + K is finalized).
    function _sweep(address account, bool vested) internal returns (uint256 amount) {
        uint256 k = vestingRounds;
        uint256 current = state.round;
        for (uint256 i; i < k; ++i) {
            Vesting storage v = _vesting[account][i];
            if (v.amount != 0 && (v.round + k < current) == vested) {
                amount += v.amount;
                v.amount = 0;
            }
        }
    }
}
