// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.30;

import {BLS} from "solady/utils/ext/ithaca/BLS.sol";
import {ECDSA} from "solady/utils/ECDSA.sol";
import {TesseraToken} from "./TesseraToken.sol";
import {Consensus} from "./Consensus.sol";
import {NetworkMath} from "./NetworkMath.sol";
import {ITesseraNetwork} from "./ITesseraNetwork.sol";
import {NetworkState} from "./NetworkState.sol";
import {NetworkSlashing} from "./NetworkSlashing.sol";

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
contract TesseraNetwork is ITesseraNetwork, NetworkState {
    // ------------------------------------------------------------------ constants and immutables

    /// @notice The largest score (see {Consensus}).
    uint256 public constant SCORE_MAX = Consensus.SCORE_MAX;
    /// @notice Domain tag of checkpoint messages.
    bytes32 public constant CHECKPOINT_TAG = keccak256("tessera.checkpoint.v1");
    /// @notice Domain tag of BLS proofs of possession.
    bytes32 public constant POP_TAG = keccak256("tessera.bls-pop.v1");

    /// @notice The reward and staking token (created by this contract).
    TesseraToken public immutable token;
    /// @notice The settlement math (created by this contract; see {NetworkMath}).
    NetworkMath public immutable math;
    /// @dev The module `proposeSlash`, `reportUnanswered`, `voteSlash` and `expireReport` delegate to (created here).
    NetworkSlashing internal immutable _slashing;
    bytes32 internal constant _SEED = "seed";
    bytes32 internal constant _SCORES = "scores";

    // ------------------------------------------------------------------ constructor

    /// @notice Deploys the network and its token, and opens round 1.
    /// @param p The parameters (see {Params}); documented in docs/contracts.md.
    constructor(Params memory p) NetworkState(p) {
        math = new NetworkMath();
        token = new TesseraToken(address(this), p.poolSupply, msg.sender, p.genesisSupply);
        _slashing = new NetworkSlashing(p, token, math);
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
    ///         for a miner to take part in a round). Vests like {claim}: pay whose round + K is finalized
    ///         is paid, pay that has not vested yet stays (and stays forfeitable).
    /// @param round The current round.
    /// @param commitment See {commitUpdate}.
    function commitAndClaim(uint256 round, bytes32 commitment) external {
        commitUpdate(round, commitment);
        _vest(msg.sender);
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

    /// @dev Pay of a frozen miner: put on the miner's hold while the proposal is open (credit 0), kept in
    ///      the pool if it was confirmed (credit 0, held 0), paid as usual if it was rejected.
    function _holdIfFrozen(uint256 round, address miner, uint256 amount)
        internal
        returns (uint256 credit, uint256 held)
    {
        bytes32 evidence = _frozen[round][miner];
        if (evidence == bytes32(0)) return (amount, 0);
        SlashProposal storage p = _slashes[evidence];
        if (p.executed) return (0, 0);
        p.held += uint96(amount);
        _holds[miner].amount += uint128(amount);
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

    // ------------------------------------------------------------------ slashing (in NetworkSlashing)

    /// @notice Proposes to slash `target` for a fraud proven in `round` (`evidence`: the hash of the
    ///         off-chain evidence, usable once) and counts the caller's vote; freezes the target's pay for
    ///         `round`. See {NetworkSlashing-proposeSlash}, which runs it on this contract's storage.
    /// @param target The miner or validator to slash.
    /// @param round The round the evidence is about (at most the current round).
    /// @param evidence The evidence hash.
    function proposeSlash(address target, uint256 round, bytes32 evidence) external {
        target; round; evidence; // named for the ABI; the module reads them from the calldata
        _delegateToSlashing();
    }

    /// @notice Reports that `miner`, audited in `round`, did not answer its audit (the caller must be on
    ///         its committee to open it; the committee and its witnesses decide it). See
    ///         {NetworkSlashing-reportUnanswered}.
    /// @param miner The audited miner.
    /// @param round The round of the audit.
    function reportUnanswered(address miner, uint256 round) external {
        miner; round; // named for the ABI; the module reads them from the calldata
        _delegateToSlashing();
    }

    /// @notice Closes an unanswered-audit report left contested past its window (held pay released,
    ///         nobody slashed). See {NetworkSlashing-expireReport}.
    /// @param evidence The evidence hash of an open unanswered-audit report.
    function expireReport(bytes32 evidence) external {
        evidence; // named for the ABI; the module reads it from the calldata
        _delegateToSlashing();
    }

    /// @notice Votes on the proposal on `evidence`: for it (`support`) or against it. See
    ///         {NetworkSlashing-voteSlash}.
    /// @param evidence The evidence hash of an open proposal.
    /// @param support True to confirm, false to reject.
    function voteSlash(bytes32 evidence, bool support) external {
        evidence; support; // named for the ABI; the module reads them from the calldata
        _delegateToSlashing();
    }

    /// @dev Runs this call's calldata in the slashing module on this contract's storage and returns or
    ///      reverts with its data.
    function _delegateToSlashing() internal {
        address module = address(_slashing);
        assembly ("memory-safe") {
            let ptr := mload(0x40)
            calldatacopy(ptr, 0, calldatasize())
            let ok := delegatecall(gas(), module, ptr, calldatasize(), 0, 0)
            returndatacopy(ptr, 0, returndatasize())
            if iszero(ok) { revert(ptr, returndatasize()) }
            return(ptr, returndatasize())
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

    function _requireCertifiable(uint256 round) internal view {
        if (round == 0 || round >= state.round || checkpoints[round + 1] != bytes32(0)) revert CannotCertify(round);
    }

    function _phaseBlocks(Phase p) internal view returns (uint256) {
        if (p == Phase.Commit) return commitBlocks;
        if (p == Phase.Reveal) return revealBlocks;
        if (p == Phase.ScoreCommit) return scoreCommitBlocks;
        return scoreRevealBlocks;
    }

    function _networkMath() internal view override returns (NetworkMath) {
        return math;
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
