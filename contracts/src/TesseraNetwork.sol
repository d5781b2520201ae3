// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.30;

import {BLS} from "solady/utils/ext/ithaca/BLS.sol";
import {ECDSA} from "solady/utils/ECDSA.sol";
import {TesseraToken} from "./TesseraToken.sol";
import {Consensus} from "./Consensus.sol";
import {NetworkMath} from "./NetworkMath.sol";
import {ITesseraNetwork} from "./ITesseraNetwork.sol";

/// @title TesseraNetwork
/// @notice Settlement of a Tessera training run: staking and registration of miners and validators,
///         rounds as a phase machine on block numbers, sender-bound update commitments, the round seed,
///         validator score commit-reveal, stake-weighted median consensus, rewards (pull payments),
///         quorum slashing and BLS (or ECDSA) checkpoint certificates. See docs/contracts.md.
/// @dev One round at a time: Commit -> Reveal -> ScoreCommit -> ScoreReveal -> Finalize; `finalize`
///      opens the next round's Commit phase. A phase starts when the previous one is advanced (by anyone,
///      after its deadline) and lasts a fixed number of blocks. The token is created here; this contract
///      holds all stakes, unbonding stakes, unclaimed rewards and the reward pool, so
///      token.balanceOf(this) == totalStake + totalUnbonding + sum(owed) + pool at all times.
contract TesseraNetwork is ITesseraNetwork {
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
        bool rejected; // rejected: held pay released, the proposer penalised
        bool unanswered; // an unanswered audit (electorate: the committee), not a fraud proof
        uint64 round; // the round the evidence is about
        uint96 held; // the target's pay for `round` held while open
        address proposer;
        uint96 rejectedStake; // stake that voted to reject
    }

    /// @notice A round's miner pay while it vests (one of `vestingRounds` slots per miner: round % K).
    struct Vesting {
        uint128 amount;
        uint64 round;
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

    /// @notice The largest score (see {Consensus}).
    uint256 public constant SCORE_MAX = Consensus.SCORE_MAX;
    /// @notice At most this many validators ever register (certificate bitmaps are one word).
    uint256 public constant MAX_VALIDATORS = 256;
    /// @notice Domain tag of checkpoint messages.
    bytes32 public constant CHECKPOINT_TAG = keccak256("tessera.checkpoint.v1");
    /// @notice Domain tag of BLS proofs of possession.
    bytes32 public constant POP_TAG = keccak256("tessera.bls-pop.v1");

    /// @notice The reward and staking token (created by this contract).
    TesseraToken public immutable token;
    /// @notice The settlement math (created by this contract; see {NetworkMath}).
    NetworkMath public immutable math;
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

    bytes32 internal constant _SEED = "seed";
    bytes32 internal constant _SCORES = "scores";
    bytes32 internal constant _UNANSWERED = "tessera.unanswered.v1";

    // ------------------------------------------------------------------ constructor

    /// @notice Deploys the network and its token, and opens round 1.
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
        math = new NetworkMath();
        token = new TesseraToken(address(this), p.poolSupply, msg.sender, p.genesisSupply);
        pool = p.poolSupply;
        checkpoints[1] = p.genesisCheckpoint;
        seeds[0] = keccak256(abi.encode(block.chainid, address(this), p.genesisCheckpoint));
        state = RoundState({round: 1, phase: Phase.Commit, phaseStart: uint64(block.number), commits: 0, seedReveals: 0, scoreReveals: 0});
        emit PhaseAdvanced(1, Phase.Commit, block.number);
    }

    // ------------------------------------------------------------------ staking

    /// @notice Registers the caller as a miner with `amount` of stake (needs a prior token approval).
    /// @param amount Stake to bond; at least `minMinerStake`.
    function registerMiner(uint256 amount) external {
        _register(Role.Miner, amount, minMinerStake);
    }

    /// @notice Registers the caller as a validator with `amount` of stake and a BLS12-381 public key.
    /// @dev The proof of possession is a G2Basic signature (hash-to-G2 with the NUL DST) by the key over
    ///      `popMessage(msg.sender, publicKey)`, which binds the chain, this contract, the caller and the
    ///      key: it stops rogue-key attacks on aggregate signatures.
    /// @param amount Stake to bond; at least `minValidatorStake`.
    /// @param publicKey The G1 public key in EIP-2537 layout.
    /// @param proofOfPossession The G2 signature in EIP-2537 layout.
    function registerValidator(uint256 amount, BLS.G1Point calldata publicKey, BLS.G2Point calldata proofOfPossession)
        external
    {
        if (validators.length >= MAX_VALIDATORS) revert TooManyValidators(MAX_VALIDATORS);
        if (!_blsVerify(publicKey, popMessage(msg.sender, publicKey), proofOfPossession)) {
            revert InvalidProofOfPossession(msg.sender);
        }
        _accounts[msg.sender].validatorIndex = uint16(validators.length);
        validators.push(msg.sender);
        _blsKeys[msg.sender] = publicKey;
        _aggregateKey = BLS.add(_aggregateKey, publicKey);
        _register(Role.Validator, amount, minValidatorStake);
    }

    /// @notice Adds `amount` to the caller's active stake (needs a prior token approval).
    /// @param amount Tokens to bond.
    function addStake(uint256 amount) external {
        Account memory a = _accounts[msg.sender];
        if (a.role == Role.None) revert NotRole(msg.sender, Role.Miner);
        if (amount == 0 || amount > type(uint96).max - a.stake) revert InvalidAmount(amount);
        a.stake += uint96(amount);
        _accounts[msg.sender] = a;
        totalStake += amount;
        if (a.role == Role.Validator) totalValidatorStake += amount;
        emit StakeAdded(msg.sender, amount, a.stake);
        _pull(msg.sender, amount);
    }

    /// @notice Moves `amount` of active stake to unbonding; it stays slashable and can be withdrawn
    ///         `unbondingBlocks` after this call (a new request restarts the delay for the whole
    ///         unbonding amount). The remaining active stake must be zero or at least the minimum.
    /// @param amount Tokens to unbond.
    function requestUnbond(uint256 amount) external {
        Account memory a = _accounts[msg.sender];
        if (a.role == Role.None) revert NotRole(msg.sender, Role.Miner);
        if (amount == 0 || amount > a.stake) revert InvalidAmount(amount);
        uint256 remaining = a.stake - amount;
        uint256 minimum = a.role == Role.Miner ? minMinerStake : minValidatorStake;
        if (remaining != 0 && remaining < minimum) revert RemainingStakeTooLow(remaining, minimum);
        a.stake = uint96(remaining);
        _accounts[msg.sender] = a;
        Unbonding memory u = _unbonding[msg.sender];
        u.amount += uint128(amount);
        u.end = uint64(block.number) + unbondingBlocks;
        _unbonding[msg.sender] = u;
        totalStake -= amount;
        totalUnbonding += amount;
        if (a.role == Role.Validator) totalValidatorStake -= amount;
        emit UnbondRequested(msg.sender, amount, u.amount, u.end);
    }

    /// @notice Withdraws the caller's unbonded stake once the unbonding delay has ended.
    function withdraw() external {
        Unbonding memory u = _unbonding[msg.sender];
        if (u.amount == 0) revert NothingToWithdraw(msg.sender);
        if (block.number < u.end) revert StillUnbonding(msg.sender, u.end);
        delete _unbonding[msg.sender];
        totalUnbonding -= u.amount;
        emit Withdrawn(msg.sender, u.amount);
        _push(msg.sender, u.amount);
    }

    // ------------------------------------------------------------------ miners

    /// @notice Commits the caller's update for `round`. `commitment` must be
    ///         `commitmentFor(round, msg.sender, updateDigest)`; validators check it against the digest
    ///         of the served update, so a commitment copied from another miner is worthless.
    /// @param round The current round.
    /// @param commitment keccak256(abi.encode(chainid, this, round, miner, updateDigest)).
    function commitUpdate(uint256 round, bytes32 commitment) public {
        RoundState memory s = state;
        _requireOpen(s, round, Phase.Commit, commitBlocks);
        Account memory a = _accounts[msg.sender];
        if (a.role != Role.Miner) revert NotRole(msg.sender, Role.Miner);
        if (a.stake < minMinerStake) revert StakeTooLow(msg.sender, a.stake, minMinerStake);
        if (a.lastCommitRound == round) revert AlreadyCommitted(msg.sender, round);
        _accounts[msg.sender].lastCommitRound = uint32(round);
        state.commits = s.commits + 1;
        emit UpdateCommitted(round, msg.sender, commitment);
    }

    /// @notice Commits to `round` and claims all rewards owed, in one transaction (the cheapest way
    ///         for a miner to take part in a round).
    /// @param round The current round.
    /// @param commitment See {commitUpdate}.
    function commitAndClaim(uint256 round, bytes32 commitment) external {
        commitUpdate(round, commitment);
        uint256 owed = _accounts[msg.sender].owed;
        if (owed != 0) {
            _accounts[msg.sender].owed = 0;
            emit Claimed(msg.sender, owed);
            _push(msg.sender, owed);
        }
    }

    /// @notice Pays the caller all rewards credited to it (pull payment), vested pay included; pay that
    ///         has not vested yet (see `vestingRounds`) stays.
    function claim() external {
        _vest(msg.sender);
        uint256 owed = _accounts[msg.sender].owed;
        if (owed == 0) revert NothingToWithdraw(msg.sender);
        _accounts[msg.sender].owed = 0;
        emit Claimed(msg.sender, owed);
        _push(msg.sender, owed);
    }

    // ------------------------------------------------------------------ validators: seed and scores

    /// @notice Commits a seed share for `round` (Commit phase). `commitment` is
    ///         keccak256(abi.encode(secret, msg.sender, round)).
    /// @param round The current round.
    /// @param commitment The hash of the secret share.
    function commitSeed(uint256 round, bytes32 commitment) external {
        _requireOpen(state, round, Phase.Commit, commitBlocks);
        _requireActiveValidator(msg.sender);
        if (_seedCommits[round][msg.sender] != bytes32(0)) revert AlreadyDone(msg.sender, round, _SEED);
        _seedCommits[round][msg.sender] = commitment;
        emit SeedCommitted(round, msg.sender, commitment);
    }

    /// @notice Reveals the caller's seed share for `round` (Reveal phase); the shares are mixed into the
    ///         round seed, fixed when the Reveal phase is advanced.
    /// @param round The current round.
    /// @param secret The share committed with {commitSeed}.
    function revealSeed(uint256 round, bytes32 secret) external {
        RoundState memory s = state;
        _requireOpen(s, round, Phase.Reveal, revealBlocks);
        bytes32 c = _seedCommits[round][msg.sender];
        if (c == bytes32(0)) revert NothingCommitted(msg.sender, round, _SEED);
        if (c == bytes32(uint256(1))) revert AlreadyDone(msg.sender, round, _SEED);
        bytes32 got = keccak256(abi.encode(secret, msg.sender, round));
        if (got != c) revert RevealMismatch(msg.sender, round, c, got);
        _seedCommits[round][msg.sender] = bytes32(uint256(1));
        seedMix[round] ^= keccak256(abi.encode(secret));
        state.seedReveals = s.seedReveals + 1;
        emit SeedRevealed(round, msg.sender, secret);
    }

    /// @notice Commits the caller's score vector for `round` (ScoreCommit phase). `commitment` is
    ///         `scoreCommitmentFor(round, msg.sender, scores, salt)`.
    /// @param round The current round.
    /// @param commitment The sender-bound hash of the scores and a salt.
    function commitScores(uint256 round, bytes32 commitment) external {
        _requireOpen(state, round, Phase.ScoreCommit, scoreCommitBlocks);
        _requireActiveValidator(msg.sender);
        ScoreEntry storage e = _scores[round][msg.sender];
        if (e.commitment != bytes32(0)) revert AlreadyDone(msg.sender, round, _SCORES);
        e.commitment = commitment;
        emit ScoresCommitted(round, msg.sender, commitment);
    }

    /// @notice Reveals the caller's score vector for `round` (ScoreReveal phase). `scores[j]` scores the
    ///         j-th committed miner in ascending address order, each in [0, SCORE_MAX]. A validator that
    ///         committed a seed share must have revealed it. The caller's active stake at this moment
    ///         is its weight in the consensus.
    /// @param round The current round.
    /// @param scores One score per committed miner.
    /// @param salt The salt used in the commitment.
    function revealScores(uint256 round, uint16[] calldata scores, bytes32 salt) external {
        RoundState memory s = state;
        _requireOpen(s, round, Phase.ScoreReveal, scoreRevealBlocks);
        ScoreEntry storage e = _scores[round][msg.sender];
        if (e.commitment == bytes32(0)) revert NothingCommitted(msg.sender, round, _SCORES);
        if (e.revealed) revert AlreadyDone(msg.sender, round, _SCORES);
        bytes32 sc = _seedCommits[round][msg.sender];
        if (sc != bytes32(0) && sc != bytes32(uint256(1))) revert SeedNotRevealed(msg.sender, round);
        if (scores.length != s.commits) revert LengthMismatch(s.commits, scores.length);
        for (uint256 j; j < scores.length; ++j) {
            if (scores[j] > SCORE_MAX) revert ScoreOutOfRange(j, scores[j]);
        }
        bytes32 got = scoreCommitmentFor(round, msg.sender, scores, salt);
        if (got != e.commitment) revert RevealMismatch(msg.sender, round, e.commitment, got);
        uint96 weight = _requireActiveValidator(msg.sender);
        e.revealed = true;
        e.weight = weight;
        e.scoresHash = keccak256(abi.encode(scores));
        state.scoreReveals = s.scoreReveals + 1;
        emit ScoresRevealed(round, msg.sender, scores, weight);
    }

    // ------------------------------------------------------------------ phases and settlement

    /// @notice Moves the current round to its next phase once the current phase's deadline has passed.
    ///         Leaving Reveal fixes the round seed. Anyone may call.
    function advance() external {
        RoundState memory s = state;
        if (s.phase == Phase.Finalize) revert WrongPhase(Phase.ScoreReveal, s.phase);
        uint256 deadline = s.phaseStart + _phaseBlocks(s.phase) - 1;
        if (block.number <= deadline) revert PhaseNotOver(s.phase, deadline, block.number);
        Phase next = Phase(uint8(s.phase) + 1);
        state.phase = next;
        state.phaseStart = uint64(block.number);
        if (next == Phase.ScoreCommit) _fixSeed(s);
        emit PhaseAdvanced(s.round, next, block.number);
    }

    /// @notice Settles `round` and opens the next one. Callable by anyone once the ScoreReveal deadline
    ///         has passed (or the round was advanced to Finalize); works with no reveals at all.
    /// @dev Checks in O(miners * validators): `miners` are all committed miners, strictly ascending;
    ///      `revealers` all validators that revealed, strictly ascending, `scores[i]` the vector
    ///      `revealers[i]` revealed; `medians[j]` is checked to be the stake-weighted median of column j.
    ///      Miners get (1 - validatorShare) of the budget by consensus score; validators that revealed get
    ///      the rest by weight * closeness to consensus; rounding dust stays in the pool.
    /// @param round The current round.
    /// @param miners Committed miners, ascending.
    /// @param revealers Validators that revealed, ascending.
    /// @param scores Revealed score vectors, one per revealer.
    /// @param medians Consensus score of each miner.
    function finalize(
        uint256 round,
        address[] calldata miners,
        address[] calldata revealers,
        uint16[][] calldata scores,
        uint16[] calldata medians
    ) external {
        _checkFinalizable(round, miners.length, revealers.length, scores.length, medians.length);
        uint256[] memory weights = _checkParticipants(round, miners, revealers, scores);
        uint256 budget = emissionPerRound < pool ? emissionPerRound : pool;
        uint256 vBudget = budget * validatorShareBps / Consensus.BPS;
        (uint256[] memory m, uint256[] memory minerPay, uint256[] memory validatorPay) =
            math.settle(_settlementInput(round, miners, revealers, weights, budget - vBudget, vBudget), scores, medians);
        uint256 paid = _payMiners(round, miners, m, minerPay);
        uint256 validatorsPaid = _payValidators(round, revealers, validatorPay);
        pool -= paid + validatorsPaid;
        state = RoundState({
            round: uint64(round + 1),
            phase: Phase.Commit,
            phaseStart: uint64(block.number),
            commits: 0,
            seedReveals: 0,
            scoreReveals: 0
        });
        emit RoundFinalized(round, budget, paid, validatorsPaid);
        emit PhaseAdvanced(round + 1, Phase.Commit, block.number);
    }

    /// @dev Participants are complete (counts checked by the caller) and unique (strictly ascending);
    ///      returns the revealers' weights.
    function _checkParticipants(
        uint256 round,
        address[] calldata miners,
        address[] calldata revealers,
        uint16[][] calldata scores
    ) internal view returns (uint256[] memory weights) {
        for (uint256 j; j < miners.length; ++j) {
            if (j != 0 && miners[j] <= miners[j - 1]) revert NotAscending("miners", j);
            if (_accounts[miners[j]].lastCommitRound != round) revert NotParticipant(miners[j], round);
        }
        weights = new uint256[](revealers.length);
        for (uint256 i; i < revealers.length; ++i) {
            if (i != 0 && revealers[i] <= revealers[i - 1]) revert NotAscending("revealers", i);
            ScoreEntry storage e = _scores[round][revealers[i]];
            if (!e.revealed) revert NotParticipant(revealers[i], round);
            if (keccak256(abi.encode(scores[i])) != e.scoresHash) revert ScoresHashMismatch(revealers[i]);
            weights[i] = e.weight;
        }
    }

    /// @dev The input of `math.settle`: an audited miner with a committee smaller than all validators is
    ///      settled on its committee's scores only (the revealers' validator indices are passed then).
    function _settlementInput(
        uint256 round,
        address[] calldata miners,
        address[] calldata revealers,
        uint256[] memory weights,
        uint256 minerBudget,
        uint256 validatorBudget
    ) internal view returns (NetworkMath.Round memory r) {
        uint256 n = drawSize[round];
        uint256 c = committeeSize;
        uint256[] memory indices;
        if (c != 0 && c < n && auditRateBps != 0) {
            indices = new uint256[](revealers.length);
            for (uint256 i; i < revealers.length; ++i) {
                indices[i] = _accounts[revealers[i]].validatorIndex;
            }
        }
        r = NetworkMath.Round(
            seeds[round], n, auditRateBps, c, miners, indices, weights, minerBudget, validatorBudget
        );
    }

    /// @dev Credits each miner's pay: held by an open proposal that froze it, kept in the pool if a
    ///      confirmed one did, else owed at once (K = 0) or put in the miner's vesting slot round % K,
    ///      whose previous entry (round - K or older) vests now. Returns what left the pool.
    function _payMiners(uint256 round, address[] calldata miners, uint256[] memory m, uint256[] memory pay)
        internal
        returns (uint256 paid)
    {
        bool anyFrozen = _frozenIn[round] != 0;
        uint256 k = vestingRounds;
        uint256 locked;
        uint256 vested;
        for (uint256 j; j < miners.length; ++j) {
            address miner = miners[j];
            uint256 credit = pay[j];
            if (anyFrozen && credit != 0) {
                uint256 held;
                (credit, held) = _holdIfFrozen(round, miner, credit);
                paid += held;
                locked += held;
            }
            if (credit != 0) {
                paid += credit;
                if (k == 0) {
                    _accounts[miner].owed += uint96(credit);
                } else {
                    Vesting memory v = _vesting[miner][round % k];
                    _vesting[miner][round % k] = Vesting(uint128(credit), uint64(round));
                    if (v.amount != 0) _accounts[miner].owed += uint96(v.amount);
                    vested += v.amount;
                    locked += credit;
                }
            }
            emit MinerRewarded(round, miner, m[j], credit);
        }
        if (locked != vested) totalUnvested = totalUnvested + locked - vested;
    }

    /// @dev Pay of a frozen miner: held by the open proposal (credit 0), kept in the pool if it was
    ///      confirmed (credit 0, held 0), paid as usual if it was rejected.
    function _holdIfFrozen(uint256 round, address miner, uint256 amount)
        internal
        returns (uint256 credit, uint256 held)
    {
        bytes32 evidence = _frozen[round][miner];
        if (evidence == bytes32(0)) return (amount, 0);
        SlashProposal storage p = _slashes[evidence];
        if (p.executed) return (0, 0);
        p.held += uint96(amount);
        emit PayFrozen(evidence, miner, round, amount);
        return (0, amount);
    }

    function _checkFinalizable(uint256 round, uint256 nMiners, uint256 nRevealers, uint256 nScores, uint256 nMedians)
        internal
        view
    {
        RoundState memory s = state;
        if (round != s.round) revert WrongRound(s.round, round);
        if (s.phase != Phase.Finalize) {
            if (s.phase != Phase.ScoreReveal) revert WrongPhase(Phase.ScoreReveal, s.phase);
            uint256 deadline = s.phaseStart + scoreRevealBlocks - 1;
            if (block.number <= deadline) revert PhaseNotOver(s.phase, deadline, block.number);
        }
        if (nMiners != s.commits) revert LengthMismatch(s.commits, nMiners);
        if (nRevealers != s.scoreReveals) revert LengthMismatch(s.scoreReveals, nRevealers);
        if (nScores != nRevealers) revert LengthMismatch(nRevealers, nScores);
        if (nMedians != nMiners) revert LengthMismatch(nMiners, nMedians);
    }

    function _payValidators(uint256 round, address[] calldata revealers, uint256[] memory pay)
        internal
        returns (uint256 paid)
    {
        for (uint256 i; i < revealers.length; ++i) {
            if (pay[i] != 0) {
                _accounts[revealers[i]].owed += uint96(pay[i]);
                paid += pay[i];
            }
            emit ValidatorRewarded(round, revealers[i], pay[i]);
        }
    }

    // ------------------------------------------------------------------ slashing

    /// @notice Proposes to slash `target` for a fraud proven in `round` (`evidence`: the hash of the
    ///         off-chain evidence, which the other validators re-check; usable once) and counts the
    ///         caller's vote. One proof freezes the target's pay for `round` at once, whatever the median:
    ///         held at settlement if `round` is not settled yet, else clawed back from its unvested pay.
    ///         Confirmed by 2/3 of the validator stake: slash and forfeit; rejected by 2/3: the pay is
    ///         released and the proposer is slashed instead. A proposal of evidence already open against
    ///         the same (target, round) counts as a vote for it: validators that saw the same cheat in
    ///         the same block are all counted, whatever the order of their transactions.
    /// @param target The miner or validator to slash.
    /// @param round The round the evidence is about (at most the current round).
    /// @param evidence The evidence hash.
    function proposeSlash(address target, uint256 round, bytes32 evidence) external {
        _requireActiveValidator(msg.sender);
        SlashProposal memory p = _slashes[evidence];
        if (p.target == address(0)) {
            _openProposal(target, round, evidence, false);
        } else if (p.target != target || p.round != round || p.executed || p.rejected) {
            revert EvidenceUsed(evidence);
        }
        _vote(evidence, target, true);
    }

    /// @notice Reports that `miner`, audited in `round`, did not answer its audit (the caller must be on
    ///         its committee). Like a fraud proof it freezes the round's pay at once; when committee
    ///         members holding 2/3 of the committee's stake report it, the miner is slashed and forfeits
    ///         its unvested pay exactly like a caught fake, so withholding is never the cheap way out.
    ///         Its evidence hash is `unansweredEvidence(miner, round)`; `voteSlash` and `voteSlash(evidence, false)` on it
    ///         are open to the committee only.
    /// @param miner The audited miner.
    /// @param round The round of the audit.
    function reportUnanswered(address miner, uint256 round) external {
        _requireActiveValidator(msg.sender);
        bytes32 evidence = unansweredEvidence(miner, round);
        SlashProposal memory p = _slashes[evidence];
        if (p.target == address(0)) {
            if (_accounts[miner].role != Role.Miner) revert NotRole(miner, Role.Miner);
            (bool audited,) = auditDraw(round, miner);
            if (!audited) revert NotAudited(miner, round);
            _openProposal(miner, round, evidence, true);
        } else if (p.executed || p.rejected) {
            revert EvidenceUsed(evidence);
        }
        _vote(evidence, miner, true);
    }

    /// @notice Votes on the proposal on `evidence`: for it (`support`), or against it (its evidence does
    ///         not check out). With 2/3 of the electorate's active stake (all validators; the committee for
    ///         an unanswered audit) for it, the slash executes; against it, the frozen pay is released to
    ///         the target and the proposer is slashed `slashBps` of its stake: a lying proof costs its
    ///         author. Votes count the voter's stake at vote time.
    /// @param evidence The evidence hash of an open proposal.
    /// @param support True to confirm, false to reject.
    function voteSlash(bytes32 evidence, bool support) external {
        _requireActiveValidator(msg.sender);
        SlashProposal memory p = _slashes[evidence];
        if (p.target == address(0)) revert UnknownEvidence(evidence);
        if (p.executed || p.rejected) revert EvidenceUsed(evidence);
        _vote(evidence, p.target, support);
    }

    function _openProposal(address target, uint256 round, bytes32 evidence, bool unanswered) internal {
        uint256 current = state.round;
        if (round == 0 || round > current) revert RoundNotReached(round, current);
        Account memory t = _accounts[target];
        if (t.role == Role.None || uint256(t.stake) + _unbonding[target].amount == 0) {
            revert NothingToSlash(target);
        }
        SlashProposal storage p = _slashes[evidence];
        p.target = target;
        p.round = uint64(round);
        p.proposer = msg.sender;
        p.unanswered = unanswered;
        bool freeze = t.role == Role.Miner && _frozen[round][target] == bytes32(0);
        uint256 held;
        if (freeze) {
            _frozen[round][target] = evidence;
            if (round == current) ++_frozenIn[round];
            else held = _clawBack(target, round);
            p.held = uint96(held);
        }
        emit SlashProposed(evidence, target, msg.sender, round);
        if (freeze) emit PayFrozen(evidence, target, round, held);
    }

    /// @dev Takes the unvested pay of `miner` for settled `round` out of its vesting slot (it stays in
    ///      totalUnvested, now held by the proposal); 0 if it vested or was never credited.
    function _clawBack(address miner, uint256 round) internal returns (uint256 amount) {
        uint256 k = vestingRounds;
        if (k == 0) return 0;
        Vesting storage v = _vesting[miner][round % k];
        if (v.round != round || round + k < state.round) return 0;
        amount = v.amount;
        v.amount = 0;
    }

    /// @dev The stake that decides a proposal; for an unanswered audit the voter must be on the committee.
    function _electorate(SlashProposal storage p, address voter) internal view returns (uint256 total) {
        if (!p.unanswered) return totalValidatorStake;
        address target = p.target;
        uint256 round = p.round;
        (, uint256 committee) = auditDraw(round, target);
        if ((committee >> _accounts[voter].validatorIndex) & 1 == 0) revert NotInCommittee(voter, target, round);
        for (uint256 i; committee >> i != 0; ++i) {
            if ((committee >> i) & 1 == 1) total += _accounts[validators[i]].stake;
        }
    }

    function _vote(bytes32 evidence, address target, bool support) internal {
        if (msg.sender == target) revert TargetCannotVote(evidence, target);
        if (_slashVoted[evidence][msg.sender]) revert AlreadyVoted(evidence, msg.sender);
        SlashProposal storage p = _slashes[evidence];
        uint256 electorate = _electorate(p, msg.sender);
        _slashVoted[evidence][msg.sender] = true;
        uint256 stake = _accounts[msg.sender].stake;
        if (support) {
            uint256 voted = p.votedStake + stake;
            p.votedStake = uint96(voted);
            emit SlashVoted(evidence, msg.sender, voted, electorate);
            if (3 * voted >= 2 * electorate) _executeSlash(evidence, target);
        } else {
            uint256 rejected = p.rejectedStake + stake;
            p.rejectedStake = uint96(rejected);
            emit SlashRejectVoted(evidence, msg.sender, rejected, electorate);
            if (3 * rejected >= 2 * electorate) _rejectSlash(evidence);
        }
    }

    /// @dev Confirmed: `slashBps` of the target's stake + unbonding burned; its held and unvested pay
    ///      forfeited to the pool.
    function _executeSlash(bytes32 evidence, address target) internal {
        SlashProposal storage p = _slashes[evidence];
        p.executed = true;
        uint256 forfeited = p.held + _sweep(target, false);
        p.held = 0;
        if (forfeited != 0) {
            totalUnvested -= forfeited;
            pool += forfeited;
        }
        uint256 amount = _takeStake(target);
        emit Slashed(evidence, target, amount);
        if (forfeited != 0) emit Forfeited(evidence, target, forfeited);
        if (amount != 0) token.burn(amount);
    }

    /// @dev Rejected: the held pay is owed to the target (and a not yet settled round pays it as usual);
    ///      `slashBps` of the proposer's stake + unbonding is burned.
    function _rejectSlash(bytes32 evidence) internal {
        SlashProposal storage p = _slashes[evidence];
        p.rejected = true;
        address target = p.target;
        uint256 round = p.round;
        uint256 released = p.held;
        p.held = 0;
        if (_frozen[round][target] == evidence) delete _frozen[round][target];
        if (released != 0) {
            _accounts[target].owed += uint96(released);
            totalUnvested -= released;
        }
        address proposer = p.proposer;
        uint256 penalty = _takeStake(proposer);
        emit SlashRejected(evidence, target, proposer, released, penalty);
        if (penalty != 0) token.burn(penalty);
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

    /// @dev Moves the caller's vested slots to `owed`.
    function _vest(address account) internal {
        uint256 amount = _sweep(account, true);
        if (amount == 0) return;
        _accounts[account].owed += uint96(amount);
        totalUnvested -= amount;
        emit Vested(account, amount);
    }

    // ------------------------------------------------------------------ checkpoint certificates

    /// @notice Certifies `digest` as the checkpoint produced by finalized `round` (theta_{round+1}) with
    ///         an aggregate BLS signature of `checkpointMessage(round, digest)` by every registered
    ///         validator except those in `nonSigners` (bit i = validators[i]). The signers must hold at
    ///         least 2/3 of the validator stake.
    /// @dev The contract keeps the sum of all registered public keys, so the cost grows with the number
    ///      of NON-signers (one key subtraction and one stake read each), not with the signers: with
    ///      full participation a certificate costs the same for 4 or 256 validators.
    /// @param round A finalized round whose checkpoint is not certified yet.
    /// @param digest The new checkpoint digest.
    /// @param nonSigners Bitmap of validator indices that did not sign.
    /// @param signature Aggregate G2 signature in EIP-2537 layout.
    function certifyCheckpoint(uint256 round, bytes32 digest, uint256 nonSigners, BLS.G2Point calldata signature)
        external
    {
        _requireCertifiable(round);
        uint256 n = validators.length;
        if (n < 256 && nonSigners >> n != 0) revert BadSigner(n);
        BLS.G1Point memory agg = _aggregateKey;
        uint256 missing;
        for (uint256 i; nonSigners >> i != 0; ++i) {
            if ((nonSigners >> i) & 1 == 0) continue;
            address v = validators[i];
            missing += _accounts[v].stake;
            agg = BLS.add(agg, _negate(_blsKeys[v]));
        }
        uint256 total = totalValidatorStake;
        uint256 signed = total - missing;
        if (3 * signed < 2 * total || signed == 0) revert QuorumNotReached(signed, total);
        if (_isInfinity(agg)) revert InvalidSignature();
        if (!_blsVerify(agg, abi.encodePacked(checkpointMessage(round, digest)), signature)) revert InvalidSignature();
        checkpoints[round + 1] = digest;
        emit CheckpointCertified(round, digest, signed, true);
    }

    /// @notice Certifies like {certifyCheckpoint} with one ECDSA signature per validator over the
    ///         EIP-191 hash of `checkpointMessage(round, digest)`; signers strictly ascending by address.
    /// @param round A finalized round whose checkpoint is not certified yet.
    /// @param digest The new checkpoint digest.
    /// @param signatures 65-byte signatures, sorted by signer address.
    function certifyCheckpointEcdsa(uint256 round, bytes32 digest, bytes[] calldata signatures) external {
        _requireCertifiable(round);
        bytes32 h = ECDSA.toEthSignedMessageHash(checkpointMessage(round, digest));
        uint256 signed;
        address last;
        for (uint256 i; i < signatures.length; ++i) {
            address v = ECDSA.recoverCalldata(h, signatures[i]);
            if (v <= last) revert NotAscending("signers", i);
            last = v;
            Account memory a = _accounts[v];
            if (a.role != Role.Validator || a.stake < minValidatorStake) revert BadSigner(i);
            signed += a.stake;
        }
        if (3 * signed < 2 * totalValidatorStake || signed == 0) revert QuorumNotReached(signed, totalValidatorStake);
        checkpoints[round + 1] = digest;
        emit CheckpointCertified(round, digest, signed, false);
    }

    // ------------------------------------------------------------------ views

    /// @notice The commitment a miner must submit for `updateDigest` in `round`.
    /// @param round The round.
    /// @param miner The committing miner.
    /// @param updateDigest The digest of the update it will serve.
    /// @return keccak256(abi.encode(chainid, this, round, miner, updateDigest)).
    function commitmentFor(uint256 round, address miner, bytes32 updateDigest) external view returns (bytes32) {
        return keccak256(abi.encode(block.chainid, address(this), round, miner, updateDigest));
    }

    /// @notice The commitment a validator must submit for `scores` and `salt` in `round`.
    /// @param round The round.
    /// @param validator The committing validator.
    /// @param scores The score vector.
    /// @param salt A random salt.
    /// @return keccak256(abi.encode(chainid, this, round, validator, scores, salt)).
    function scoreCommitmentFor(uint256 round, address validator, uint16[] calldata scores, bytes32 salt)
        public
        view
        returns (bytes32)
    {
        return keccak256(abi.encode(block.chainid, address(this), round, validator, scores, salt));
    }

    /// @notice The 32-byte message validators sign to certify `digest` after `round`.
    /// @param round The finalized round.
    /// @param digest The checkpoint digest.
    /// @return keccak256(abi.encode(CHECKPOINT_TAG, chainid, this, round, digest)).
    function checkpointMessage(uint256 round, bytes32 digest) public view returns (bytes32) {
        return keccak256(abi.encode(CHECKPOINT_TAG, block.chainid, address(this), round, digest));
    }

    /// @notice The message a validator's BLS key signs as proof of possession.
    /// @param validator The registering account.
    /// @param publicKey Its G1 public key.
    /// @return abi.encodePacked(keccak256(abi.encode(POP_TAG, chainid, this, validator, publicKey))).
    function popMessage(address validator, BLS.G1Point calldata publicKey) public view returns (bytes memory) {
        return abi.encodePacked(keccak256(abi.encode(POP_TAG, block.chainid, address(this), validator, publicKey)));
    }

    /// @notice The state of `account`.
    /// @param account Any address.
    /// @return The packed account record (stake, owed, lastCommitRound, role, validatorIndex).
    function accountOf(address account) external view returns (Account memory) {
        return _accounts[account];
    }

    /// @notice The unbonding stake of `account`.
    /// @param account Any address.
    /// @return The amount and the first block it can be withdrawn.
    function unbondingOf(address account) external view returns (Unbonding memory) {
        return _unbonding[account];
    }

    /// @notice The BLS public key of `validator`.
    /// @param validator A registered validator.
    /// @return The G1 key in EIP-2537 layout.
    function blsKeyOf(address validator) external view returns (BLS.G1Point memory) {
        return _blsKeys[validator];
    }

    /// @notice Number of registered validators (including inactive ones).
    /// @return The length of `validators`.
    function validatorCount() external view returns (uint256) {
        return validators.length;
    }

    /// @notice The score submission of `validator` in `round`.
    /// @param round The round.
    /// @param validator The validator.
    /// @return The entry (commitment, scoresHash, weight, revealed).
    function scoreEntry(uint256 round, address validator) external view returns (ScoreEntry memory) {
        return _scores[round][validator];
    }

    /// @notice The seed-share commitment of `validator` in `round` (1 once revealed).
    /// @param round The round.
    /// @param validator The validator.
    /// @return The commitment.
    function seedCommitment(uint256 round, address validator) external view returns (bytes32) {
        return _seedCommits[round][validator];
    }

    /// @notice The slashing proposal on `evidence`.
    /// @param evidence The evidence hash.
    /// @return The proposal (target zero if none).
    function slashProposal(bytes32 evidence) external view returns (SlashProposal memory) {
        return _slashes[evidence];
    }

    /// @notice Whether `voter` voted on `evidence`.
    /// @param evidence The evidence hash.
    /// @param voter The validator.
    /// @return True if it voted.
    function hasVoted(bytes32 evidence, address voter) external view returns (bool) {
        return _slashVoted[evidence][voter];
    }

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
        return math.auditDraw(seed, miner, drawSize[round], auditRateBps, committeeSize);
    }

    /// @notice The evidence hash of "`miner` did not answer its audit in `round`" (see {reportUnanswered}).
    /// @param miner The miner.
    /// @param round The round.
    /// @return keccak256(abi.encode("tessera.unanswered.v1", chainid, this, miner, round)).
    function unansweredEvidence(address miner, uint256 round) public view returns (bytes32) {
        return keccak256(abi.encode(_UNANSWERED, block.chainid, address(this), miner, round));
    }

    /// @notice Miner pay of `account` that has not vested yet (held pay of open proposals excluded).
    /// @param account Any address.
    /// @return amount The sum of its vesting slots whose round + K is not finalized yet.
    function unvestedOf(address account) external view returns (uint256 amount) {
        uint256 k = vestingRounds;
        uint256 current = state.round;
        for (uint256 i; i < k; ++i) {
            Vesting memory v = _vesting[account][i];
            if (v.round + k >= current) amount += v.amount;
        }
    }

    /// @notice Last block (inclusive) of the current phase; type(uint256).max in Finalize.
    /// @return The deadline block.
    function phaseDeadline() public view returns (uint256) {
        RoundState memory s = state;
        if (s.phase == Phase.Finalize) return type(uint256).max;
        return s.phaseStart + _phaseBlocks(s.phase) - 1;
    }

    /// @notice Everything a node polls for, in one call (issue 13: six reads per poll before, most of a
    ///         node's JSON-RPC traffic): the round state, the phase's deadline, theta_round's digest, the
    ///         round's seed, the seed its assignments use (the previous round's) and the block read at.
    /// @return s The round state (as `state()`).
    /// @return deadline As `phaseDeadline()`.
    /// @return checkpoint `checkpoints(s.round)` (zero until certified).
    /// @return seed `seeds(s.round)` (zero until the Reveal phase is advanced).
    /// @return assignSeed `seeds(s.round - 1)`.
    /// @return blockNumber The block these values were read at.
    function status()
        external
        view
        returns (
            RoundState memory s,
            uint256 deadline,
            bytes32 checkpoint,
            bytes32 seed,
            bytes32 assignSeed,
            uint256 blockNumber
        )
    {
        s = state;
        return (s, phaseDeadline(), checkpoints[s.round], seeds[s.round], seeds[s.round - 1], block.number);
    }

    // ------------------------------------------------------------------ internals

    function _register(Role role, uint256 amount, uint256 minimum) internal {
        Account memory a = _accounts[msg.sender];
        if (a.role != Role.None) revert AlreadyRegistered(msg.sender, a.role);
        if (amount < minimum) revert StakeTooLow(msg.sender, amount, minimum);
        if (amount > type(uint96).max) revert InvalidAmount(amount);
        a.role = role;
        a.stake = uint96(amount);
        _accounts[msg.sender] = a;
        totalStake += amount;
        if (role == Role.Validator) totalValidatorStake += amount;
        emit Registered(msg.sender, role, amount);
        _pull(msg.sender, amount);
    }

    /// @dev Burns `slashBps` of `target`'s stake + unbonding (active stake first); returns the amount.
    function _takeStake(address target) internal returns (uint256 amount) {
        Account memory t = _accounts[target];
        Unbonding memory u = _unbonding[target];
        amount = (uint256(t.stake) + u.amount) * slashBps / Consensus.BPS;
        uint256 fromStake = amount < t.stake ? amount : t.stake;
        uint256 fromUnbonding = amount - fromStake;
        _accounts[target].stake = t.stake - uint96(fromStake);
        _unbonding[target].amount = u.amount - uint128(fromUnbonding);
        totalStake -= fromStake;
        totalUnbonding -= fromUnbonding;
        if (t.role == Role.Validator) totalValidatorStake -= fromStake;
    }

    function _fixSeed(RoundState memory s) internal {
        bytes32 mix = seedMix[s.round];
        bool fallbackUsed = s.seedReveals == 0;
        if (fallbackUsed) mix = blockhash(block.number - 1);
        bytes32 seed = keccak256(abi.encode(seeds[s.round - 1], s.round, mix));
        seeds[s.round] = seed;
        drawSize[s.round] = validators.length;
        emit SeedFixed(s.round, seed, fallbackUsed);
    }

    function _requireOpen(RoundState memory s, uint256 round, Phase phase, uint64 blocks) internal view {
        if (round != s.round) revert WrongRound(s.round, round);
        if (s.phase != phase) revert WrongPhase(phase, s.phase);
        uint256 deadline = s.phaseStart + blocks - 1;
        if (block.number > deadline) revert PhaseClosed(phase, deadline, block.number);
    }

    function _requireActiveValidator(address v) internal view returns (uint96) {
        Account memory a = _accounts[v];
        if (a.role != Role.Validator) revert NotRole(v, Role.Validator);
        if (a.stake < minValidatorStake) revert StakeTooLow(v, a.stake, minValidatorStake);
        return a.stake;
    }

    function _requireCertifiable(uint256 round) internal view {
        if (round == 0 || round >= state.round || checkpoints[round + 1] != bytes32(0)) revert CannotCertify(round);
    }

    function _phaseBlocks(Phase p) internal view returns (uint256) {
        if (p == Phase.Commit) return commitBlocks;
        if (p == Phase.Reveal) return revealBlocks;
        if (p == Phase.ScoreCommit) return scoreCommitBlocks;
        return scoreRevealBlocks;
    }

    function _blsVerify(BLS.G1Point memory pk, bytes memory message, BLS.G2Point memory sig)
        internal
        view
        returns (bool)
    {
        return math.blsVerify(pk, message, sig);
    }

    /// @dev -P for a G1 point: (x, p - y); the point at infinity (all zero) is its own negation.
    function _negate(BLS.G1Point memory pt) internal pure returns (BLS.G1Point memory) {
        if (pt.y_a == 0 && pt.y_b == 0) return pt;
        // p = 0x1a0111ea397fe69a4b1ba7b6434bacd7 64774b84f38512bf6730d2a0f6b0f6241eabfffeb153ffffb9feffffffffaaab
        uint256 pA = 0x1a0111ea397fe69a4b1ba7b6434bacd7;
        uint256 pB = 0x64774b84f38512bf6730d2a0f6b0f6241eabfffeb153ffffb9feffffffffaaab;
        uint256 yA = uint256(pt.y_a);
        uint256 yB = uint256(pt.y_b);
        unchecked {
            uint256 borrow = pB < yB ? 1 : 0;
            pt.y_b = bytes32(pB - yB);
            pt.y_a = bytes32(pA - yA - borrow);
        }
        return pt;
    }

    function _isInfinity(BLS.G1Point memory pt) internal pure returns (bool) {
        return pt.x_a == 0 && pt.x_b == 0 && pt.y_a == 0 && pt.y_b == 0;
    }

    function _pull(address from, uint256 amount) internal {
        token.transferFrom(from, address(this), amount);
    }

    function _push(address to, uint256 amount) internal {
        token.transfer(to, amount);
    }
}
