// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.30;

import {TesseraToken} from "./TesseraToken.sol";
import {Consensus} from "./Consensus.sol";
import {NetworkMath} from "./NetworkMath.sol";
import {NetworkState} from "./NetworkState.sol";

/// @title NetworkSlashing
/// @notice The slashing proposals and votes of {TesseraNetwork}: fraud proofs, unanswered audits, the 2/3
///         quorum that confirms (slash + forfeit) or rejects (pay released, proposer slashed) them.
/// @dev Runs only by DELEGATECALL from the network (which creates it), on the network's storage
///      ({NetworkState} declares the layout for both): `proposeSlash`, `reportUnanswered` and `voteSlash`
///      of TesseraNetwork forward their calldata here, so events, reverts and `msg.sender` are the
///      network's. Called directly it acts on its own empty storage, where nobody is a validator.
///      A separate contract because the network's runtime code must stay under EIP-170's 24,576 bytes.
contract NetworkSlashing is NetworkState {
    /// @notice The network's token (burns slashed stake).
    TesseraToken public immutable token;
    NetworkMath internal immutable _math;

    /// @notice Records the network's parameters, token and math contract.
    /// @param p The network's parameters.
    /// @param token_ The network's token.
    /// @param math_ The network's math contract.
    constructor(Params memory p, TesseraToken token_, NetworkMath math_) NetworkState(p) {
        token = token_;
        _math = math_;
    }

    /// @notice Proposes to slash `target` for a fraud proven in `round` (`evidence`: the hash of the
    ///         off-chain evidence, which the other validators re-check; usable once) and counts the
    ///         caller's vote. One proof puts all of a miner's unvested pay on hold at once (nothing vests while
    ///         the vote is open) and freezes its pay for `round` whatever the median (held at settlement if
    ///         `round` is not settled yet).
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
    ///         its committee to open the report; once open, a call from a committee member or a witness
    ///         counts as a vote for it). Like a fraud proof it holds the miner's unvested pay at once. "Not
    ///         served" is not provable, so the report is decided by an electorate wider than the
    ///         committee that filed it: the committee plus `auditWitnesses(miner, round)` (up to c other
    ///         validators drawn from the seed, who fetch the audited states themselves). When 2/3 of the
    ///         electorate's stake reports it, the miner is slashed and forfeits its unvested pay exactly
    ///         like a caught fake, so withholding is never the cheap way out; no single validator of a
    ///         network of two or more can slash an honest miner this way. 2/3 against: released, the
    ///         proposer slashed; neither by round `round + REPORT_WINDOW_ROUNDS`: `expireReport` closes it.
    ///         Its evidence hash is `unansweredEvidence(miner, round)`.
    /// @param miner The audited miner.
    /// @param round The round of the audit.
    function reportUnanswered(address miner, uint256 round) external {
        _requireActiveValidator(msg.sender);
        bytes32 evidence = unansweredEvidence(miner, round);
        SlashProposal memory p = _slashes[evidence];
        _requireWindow(evidence, round);
        if (p.target == address(0)) {
            if (_accounts[miner].role != Role.Miner) revert NotRole(miner, Role.Miner);
            (bool audited, uint256 committee) = auditDraw(round, miner);
            if (!audited) revert NotAudited(miner, round);
            if ((committee >> _accounts[msg.sender].validatorIndex) & 1 == 0) {
                revert NotInCommittee(msg.sender, miner, round);
            }
            _openProposal(miner, round, evidence, true);
        } else if (p.executed || p.rejected) {
            revert EvidenceUsed(evidence);
        }
        _vote(evidence, miner, true);
    }

    /// @notice Closes the unanswered-audit report on `evidence` that neither 2/3 of its electorate
    ///         confirmed nor 2/3 rejected by round `round + REPORT_WINDOW_ROUNDS`: the held pay is owed
    ///         to the miner (once no other proposal against it is open), nobody is slashed (a contested "not served" proves nothing either way).
    ///         Anyone may call it once the window is over.
    /// @param evidence The evidence hash of an open unanswered-audit report.
    function expireReport(bytes32 evidence) external {
        SlashProposal storage p = _slashes[evidence];
        if (p.target == address(0) || !p.unanswered) revert UnknownEvidence(evidence);
        if (p.executed || p.rejected) revert EvidenceUsed(evidence);
        uint256 last = uint256(p.round) + REPORT_WINDOW_ROUNDS;
        if (state.round <= last) revert ReportStillOpen(evidence, last);
        p.rejected = true;
        uint256 released = _release(p, evidence);
        emit ReportExpired(evidence, p.target, p.round, released);
    }

    /// @notice Votes on the proposal on `evidence`: for it (`support`), or against it (its evidence does
    ///         not check out). With 2/3 of the electorate's active stake (all validators; the committee
    ///         and its witnesses for an unanswered audit, within its window) for it, the slash executes;
    ///         against it, the held pay is released to the target and the proposer is slashed
    ///         `slashBps` of its stake: a lying proof costs its author. Votes count the voter's stake at
    ///         vote time.
    /// @param evidence The evidence hash of an open proposal.
    /// @param support True to confirm, false to reject.
    function voteSlash(bytes32 evidence, bool support) external {
        _requireActiveValidator(msg.sender);
        SlashProposal memory p = _slashes[evidence];
        if (p.target == address(0)) revert UnknownEvidence(evidence);
        if (p.executed || p.rejected) revert EvidenceUsed(evidence);
        if (p.unanswered) _requireWindow(evidence, p.round);
        _vote(evidence, p.target, support);
    }

    /// @dev An unanswered-audit report about `round` takes reports and votes until round + the window.
    function _requireWindow(bytes32 evidence, uint256 round) internal view {
        uint256 last = round + REPORT_WINDOW_ROUNDS;
        if (state.round > last) revert VotingClosed(evidence, last);
    }

    /// @dev Opens the proposal. Against a miner it puts ALL its unvested pay on hold (`_holds`), not only
    ///      the round's: a vote takes up to REPORT_WINDOW_ROUNDS (a fraud proof longer), and pay that vested
    ///      meanwhile would escape the forfeit, so a miner hanging when audited kept more than the threat
    ///      model's loss allows. The first proposal about (target, round) also freezes that round's pay if
    ///      it is not settled yet (`finalize` adds it to the hold).
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
        bool miner = t.role == Role.Miner;
        uint256 held;
        if (miner) {
            if (_frozen[round][target] == bytes32(0)) {
                _frozen[round][target] = evidence;
                if (round == current) ++_frozenIn[round];
            }
            held = _sweep(target, false); // stays in totalUnvested, now held
            Hold storage h = _holds[target];
            h.amount += uint128(held);
            ++h.open;
            p.held = uint96(held);
        }
        emit SlashProposed(evidence, target, msg.sender, round);
        if (miner) emit PayFrozen(evidence, target, round, held);
    }

    /// @dev The stake that decides a proposal; for an unanswered audit the voter must be on the committee
    ///      or one of its witnesses, and the electorate is both.
    function _electorate(SlashProposal storage p, address voter) internal view returns (uint256 total) {
        if (!p.unanswered) return totalValidatorStake;
        address target = p.target;
        uint256 round = p.round;
        (, uint256 committee) = auditDraw(round, target);
        committee |= _networkMath().witnessDraw(seeds[round], target, drawSize[round], committee, committeeSize);
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

    /// @dev Confirmed: `slashBps` of the target's stake + unbonding burned; all its held pay (whichever
    ///      open proposal put it on hold: a report's expiry must not release a proven fake's pay) and its
    ///      unvested pay forfeited to the pool. A round still to settle that another proposal froze is
    ///      pointed at this one, so its pay stays in the pool.
    function _executeSlash(bytes32 evidence, address target) internal {
        SlashProposal storage p = _slashes[evidence];
        p.executed = true;
        Hold storage h = _holds[target];
        uint256 forfeited = h.amount + _sweep(target, false);
        h.amount = 0;
        if (h.open != 0) --h.open;
        bytes32 first = _frozen[p.round][target];
        if (first != evidence && first != bytes32(0)) _frozen[p.round][target] = evidence;
        if (forfeited != 0) {
            totalUnvested -= forfeited;
            pool += forfeited;
        }
        uint256 amount = _takeStake(target);
        emit Slashed(evidence, target, amount);
        if (forfeited != 0) emit Forfeited(evidence, target, forfeited);
        if (amount != 0) token.burn(amount);
    }

    /// @dev Rejected: the held pay is owed to the target once no other proposal against it is open (and a
    ///      not yet settled round pays it as usual);
    ///      `slashBps` of the proposer's stake + unbonding is burned.
    function _rejectSlash(bytes32 evidence) internal {
        SlashProposal storage p = _slashes[evidence];
        p.rejected = true;
        uint256 released = _release(p, evidence);
        address proposer = p.proposer;
        uint256 penalty = _takeStake(proposer);
        emit SlashRejected(evidence, p.target, proposer, released, penalty);
        if (penalty != 0) token.burn(penalty);
    }

    /// @dev Unfreezes the target's pay for the proposal's round; the last open proposal against it to close
    ///      owes it the held pay. Returns what was released.
    function _release(SlashProposal storage p, bytes32 evidence) internal returns (uint256 released) {
        address target = p.target;
        uint256 round = p.round;
        if (_frozen[round][target] == evidence) delete _frozen[round][target];
        Hold storage h = _holds[target];
        if (h.open == 0 || --h.open != 0) return 0;
        released = h.amount;
        h.amount = 0;
        if (released != 0) {
            _accounts[target].owed += uint96(released);
            totalUnvested -= released;
        }
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

    function _networkMath() internal view override returns (NetworkMath) {
        return _math;
    }
}
