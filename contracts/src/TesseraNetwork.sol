// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.30;

import {BLS} from "solady/utils/ext/ithaca/BLS.sol";
import {ECDSA} from "solady/utils/ECDSA.sol";
import {TesseraToken} from "./TesseraToken.sol";
import {Consensus} from "./Consensus.sol";
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

    /// @notice A slashing proposal, keyed by its evidence hash.
    struct SlashProposal {
        address target;
        uint96 votedStake;
        bool executed;
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
    /// @notice Fraction of stake taken by one slash, in basis points.
    uint256 public immutable slashBps;

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

    bytes32 internal constant _SEED = "seed";
    bytes32 internal constant _SCORES = "scores";

    // ------------------------------------------------------------------ constructor

    /// @notice Deploys the network and its token, and opens round 1.
    /// @param p The parameters (see {Params}); documented in docs/contracts.md.
    constructor(Params memory p) {
        if (p.validatorShareBps > Consensus.BPS) revert InvalidParam("validatorShareBps");
        if (p.slashBps > Consensus.BPS) revert InvalidParam("slashBps");
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

    /// @notice Pays the caller all rewards credited to it (pull payment).
    function claim() external {
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
        uint256[] memory m = _checkMedians(scores, medians, weights);
        uint256[] memory closeness = _closeness(scores, m);
        uint256 budget = emissionPerRound < pool ? emissionPerRound : pool;
        uint256 vBudget = budget * validatorShareBps / Consensus.BPS;
        uint256 paid = _payMiners(round, miners, m, budget - vBudget);
        uint256 validatorsPaid = _payValidators(round, revealers, weights, closeness, vBudget);
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

    /// @dev Verifies each submitted median in O(validators); returns them widened.
    function _checkMedians(uint16[][] calldata scores, uint16[] calldata medians, uint256[] memory weights)
        internal
        pure
        returns (uint256[] memory m)
    {
        m = new uint256[](medians.length);
        uint256[] memory column = new uint256[](scores.length);
        for (uint256 j; j < medians.length; ++j) {
            for (uint256 i; i < scores.length; ++i) {
                column[i] = scores[i][j];
            }
            m[j] = medians[j];
            if (!Consensus.isWeightedMedian(column, weights, m[j])) revert BadMedian(j, m[j]);
        }
    }

    function _payMiners(uint256 round, address[] calldata miners, uint256[] memory m, uint256 budget)
        internal
        returns (uint256 paid)
    {
        uint256[] memory pay = Consensus.minerPayouts(m, budget);
        for (uint256 j; j < miners.length; ++j) {
            if (pay[j] != 0) {
                _accounts[miners[j]].owed += uint96(pay[j]);
                paid += pay[j];
            }
            emit MinerRewarded(round, miners[j], m[j], pay[j]);
        }
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

    function _closeness(uint16[][] calldata scores, uint256[] memory m)
        internal
        pure
        returns (uint256[] memory closeness)
    {
        closeness = new uint256[](scores.length);
        uint256[] memory row = new uint256[](m.length);
        for (uint256 i; i < scores.length; ++i) {
            for (uint256 j; j < m.length; ++j) {
                row[j] = scores[i][j];
            }
            closeness[i] = Consensus.closeness(row, m);
        }
    }

    function _payValidators(
        uint256 round,
        address[] calldata revealers,
        uint256[] memory weights,
        uint256[] memory closeness,
        uint256 budget
    ) internal returns (uint256 paid) {
        uint256[] memory pay = Consensus.validatorPayouts(weights, closeness, budget);
        for (uint256 i; i < revealers.length; ++i) {
            if (pay[i] != 0) {
                _accounts[revealers[i]].owed += uint96(pay[i]);
                paid += pay[i];
            }
            emit ValidatorRewarded(round, revealers[i], pay[i]);
        }
    }

    // ------------------------------------------------------------------ slashing

    /// @notice Proposes to slash `target` on `evidence` (a hash of the off-chain evidence; usable once)
    ///         and counts the caller's vote. Only active validators may propose. A proposal of evidence
    ///         that is already open against the same target counts as a vote for it: validators that
    ///         saw the same cheat in the same block are all counted, whatever the order of their
    ///         transactions.
    /// @param target The miner or validator to slash.
    /// @param evidence The evidence hash.
    function proposeSlash(address target, bytes32 evidence) external {
        _requireActiveValidator(msg.sender);
        SlashProposal memory p = _slashes[evidence];
        if (p.target == address(0)) {
            Account memory t = _accounts[target];
            if (t.role == Role.None || uint256(t.stake) + _unbonding[target].amount == 0) {
                revert NothingToSlash(target);
            }
            _slashes[evidence].target = target;
            emit SlashProposed(evidence, target, msg.sender);
        } else if (p.target != target || p.executed) {
            revert EvidenceUsed(evidence);
        }
        _vote(evidence, target);
    }

    /// @notice Votes for the slash proposed on `evidence`; the slash executes when the voters hold at
    ///         least 2/3 of the active validator stake. Votes count the voter's stake at vote time.
    /// @param evidence The evidence hash of an open proposal.
    function voteSlash(bytes32 evidence) external {
        _requireActiveValidator(msg.sender);
        SlashProposal memory p = _slashes[evidence];
        if (p.target == address(0)) revert UnknownEvidence(evidence);
        if (p.executed) revert EvidenceUsed(evidence);
        _vote(evidence, p.target);
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

    function _vote(bytes32 evidence, address target) internal {
        if (msg.sender == target) revert TargetCannotVote(evidence, target);
        if (_slashVoted[evidence][msg.sender]) revert AlreadyVoted(evidence, msg.sender);
        _slashVoted[evidence][msg.sender] = true;
        uint256 voted = _slashes[evidence].votedStake + _accounts[msg.sender].stake;
        _slashes[evidence].votedStake = uint96(voted);
        emit SlashVoted(evidence, msg.sender, voted, totalValidatorStake);
        if (3 * voted >= 2 * totalValidatorStake) _executeSlash(evidence, target);
    }

    function _executeSlash(bytes32 evidence, address target) internal {
        Account memory t = _accounts[target];
        Unbonding memory u = _unbonding[target];
        uint256 amount = (uint256(t.stake) + u.amount) * slashBps / Consensus.BPS;
        uint256 fromStake = amount < t.stake ? amount : t.stake;
        uint256 fromUnbonding = amount - fromStake;
        _slashes[evidence].executed = true;
        _accounts[target].stake = t.stake - uint96(fromStake);
        _unbonding[target].amount = u.amount - uint128(fromUnbonding);
        totalStake -= fromStake;
        totalUnbonding -= fromUnbonding;
        if (t.role == Role.Validator) totalValidatorStake -= fromStake;
        emit Slashed(evidence, target, amount);
        if (amount != 0) token.burn(amount);
    }

    function _fixSeed(RoundState memory s) internal {
        bytes32 mix = seedMix[s.round];
        bool fallbackUsed = s.seedReveals == 0;
        if (fallbackUsed) mix = blockhash(block.number - 1);
        bytes32 seed = keccak256(abi.encode(seeds[s.round - 1], s.round, mix));
        seeds[s.round] = seed;
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
        BLS.G1Point[] memory g1 = new BLS.G1Point[](2);
        BLS.G2Point[] memory g2 = new BLS.G2Point[](2);
        g1[0] = _negG1Generator();
        g1[1] = pk;
        g2[0] = sig;
        g2[1] = BLS.hashToG2(message);
        return BLS.pairing(g1, g2);
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

    function _negG1Generator() internal pure returns (BLS.G1Point memory) {
        return BLS.G1Point(
            0x0000000000000000000000000000000017f1d3a73197d7942695638c4fa9ac0f,
            0xc3688c4f9774b905a14e3a3f171bac586c55e83ff97a1aeffb3af00adb22c6bb,
            0x00000000000000000000000000000000114d1d6855d545a8aa7d76c8cf2e21f2,
            0x67816aef1db507c96655b9d5caac42364e6f38ba0ecb751bad54dcd6b939c2ca
        );
    }

    function _pull(address from, uint256 amount) internal {
        token.transferFrom(from, address(this), amount);
    }

    function _push(address to, uint256 amount) internal {
        token.transfer(to, amount);
    }
}
