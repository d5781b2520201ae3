// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.30;

import {ITesseraNetwork} from "../src/ITesseraNetwork.sol";
import {TesseraNetwork} from "../src/TesseraNetwork.sol";
import {NetworkState} from "../src/NetworkState.sol";
import {TesseraToken} from "../src/TesseraToken.sol";
import {Fixture} from "./utils/Fixture.sol";
import {TestBase} from "./utils/Vm.sol";

/// @notice Drives a network with 4 miners and 4 validators through random actions, keeping ghosts.
contract Handler is Fixture {
    address[] public miners;
    address[] public vals;
    address[] public actors;
    uint256 public initialActorTokens;
    uint256 public initialPool;
    uint256 public burned;
    uint256 public finalized;
    bool public payoutAboveBudget;
    bool public doubleRevealAccepted;
    bool public doubleClaimPaid;
    bool public slashUnbounded;
    bool public phaseWentBack;
    bool public finalizeFailed;
    uint256 public lastKey; // round * 8 + phase
    uint256 internal salt;

    bytes32 internal lastEvidence;

    constructor() {
        // audits of half the pairs by committees of 2 of the 4 validators, pay vesting over 2 rounds:
        // the invariants hold over the committee median, vesting, freezing and forfeits
        NetworkState.Params memory p = _params();
        p.auditRateBps = 5_000;
        p.committeeSize = 2;
        p.vestingRounds = 2;
        _deployWith(p);
        for (uint256 i; i < 4; ++i) {
            miners.push(_miner(i));
            vals.push(_validator(i));
        }
        actors = miners;
        for (uint256 i; i < 4; ++i) {
            actors.push(vals[i]);
        }
        for (uint256 i; i < actors.length; ++i) {
            NetworkState.Account memory a = net.accountOf(actors[i]);
            initialActorTokens += token.balanceOf(actors[i]) + a.stake;
        }
        initialPool = net.pool();
        _checkPhase();
    }

    function network() external view returns (TesseraNetwork) {
        return net;
    }

    function tok() external view returns (TesseraToken) {
        return token;
    }

    function actorCount() external view returns (uint256) {
        return actors.length;
    }

    function _checkPhase() internal {
        uint256 key = _round() * 8 + uint256(_phase());
        if (key < lastKey) phaseWentBack = true;
        lastKey = key;
    }

    // ------------------------------------------------------------ actions

    function commit(uint256 who) external {
        address m = miners[who % miners.length];
        uint256 r = _round();
        if (_phase() != ITesseraNetwork.Phase.Commit || net.accountOf(m).lastCommitRound == r) return;
        if (net.accountOf(m).stake < MIN_MINER || block.number > net.phaseDeadline()) return;
        _commit(m, r, bytes32(who));
    }

    function addStake(uint256 who, uint256 amount) external {
        address a = actors[who % actors.length];
        amount = bound(amount, 1, 50 ether);
        if (token.balanceOf(a) < amount) return;
        vm.prank(a);
        net.addStake(amount);
    }

    function unbond(uint256 who, uint256 amount) external {
        address a = actors[who % actors.length];
        uint256 stake = net.accountOf(a).stake;
        if (stake == 0) return;
        uint256 minimum = who % actors.length < 4 ? MIN_MINER : MIN_VALIDATOR;
        amount = bound(amount, 1, stake);
        if (stake - amount != 0 && stake - amount < minimum) amount = stake;
        vm.prank(a);
        net.requestUnbond(amount);
    }

    function withdraw(uint256 who) external {
        address a = actors[who % actors.length];
        NetworkState.Unbonding memory u = net.unbondingOf(a);
        if (u.amount == 0) return;
        if (block.number < u.end) vm.roll(u.end);
        vm.prank(a);
        net.withdraw();
        _checkPhase();
    }

    function claim(uint256 who) external {
        address a = actors[who % actors.length];
        uint256 owed = net.accountOf(a).owed;
        if (owed == 0) return;
        vm.prank(a);
        net.claim();
        vm.prank(a);
        try net.claim() {
            doubleClaimPaid = true;
        } catch {}
    }

    function advance(uint256 blocks) external {
        vm.roll(block.number + bound(blocks, 0, 12));
        if (_phase() != ITesseraNetwork.Phase.Finalize && block.number > net.phaseDeadline()) net.advance();
        _checkPhase();
    }

    function slash(uint256 target, uint256 voters) external {
        address t = actors[target % actors.length];
        uint256 before = net.accountOf(t).stake + net.unbondingOf(t).amount;
        if (before == 0) return;
        bytes32 ev = keccak256(abi.encode("ev", ++salt));
        lastEvidence = ev;
        uint256 round = _round(); // read before any prank (a view call would take it)
        uint256[] memory others = new uint256[](actors.length);
        for (uint256 i; i < actors.length; ++i) {
            others[i] = net.accountOf(actors[i]).stake + net.unbondingOf(actors[i]).amount;
        }
        uint256 supply = token.totalSupply();
        bool proposed;
        for (uint256 i; i < vals.length; ++i) {
            if ((voters >> i) & 1 == 0 || vals[i] == t) continue;
            if (net.accountOf(vals[i]).stake < MIN_VALIDATOR) continue;
            if (net.slashProposal(ev).executed) break;
            vm.prank(vals[i]);
            if (!proposed) {
                net.proposeSlash(t, round, ev);
                proposed = true;
            } else {
                net.voteSlash(ev, true);
            }
        }
        burned += supply - token.totalSupply();
        bool executed = net.slashProposal(ev).executed;
        for (uint256 i; i < actors.length; ++i) {
            uint256 nowStake = net.accountOf(actors[i]).stake + net.unbondingOf(actors[i]).amount;
            if (actors[i] == t) {
                uint256 expect = executed ? others[i] - others[i] * 1_000 / 10_000 : others[i];
                if (nowStake != expect) slashUnbounded = true;
            } else if (nowStake != others[i]) {
                slashUnbounded = true;
            }
        }
    }

    /// @notice Validators reject the last proposal (if still open): held pay released, proposer slashed.
    function reject(uint256 voters) external {
        bytes32 ev = lastEvidence;
        NetworkState.SlashProposal memory p = net.slashProposal(ev);
        if (p.target == address(0) || p.executed || p.rejected) return;
        uint256 supply = token.totalSupply();
        for (uint256 i; i < vals.length; ++i) {
            if ((voters >> i) & 1 == 0 || vals[i] == p.target || net.hasVoted(ev, vals[i])) continue;
            if (net.accountOf(vals[i]).stake < MIN_VALIDATOR) continue;
            if (net.slashProposal(ev).rejected) break;
            vm.prank(vals[i]);
            net.voteSlash(ev, false);
        }
        burned += supply - token.totalSupply();
    }

    /// @notice Drives the current round to the end with random scores and reveals, then finalizes.
    function finalizeNow(uint256 seed) external {
        uint256 r = _round();
        if (_phase() == ITesseraNetwork.Phase.Commit) _advancePast();
        if (_phase() == ITesseraNetwork.Phase.Reveal) _advancePast();
        if (_phase() == ITesseraNetwork.Phase.ScoreCommit && block.number > net.phaseDeadline()) _advancePast();
        (,,, uint32 commits,,) = net.state();
        uint16[][] memory rows = new uint16[][](vals.length);
        bool[] memory reveal = new bool[](vals.length);
        bool[] memory committed = new bool[](vals.length);
        if (_phase() == ITesseraNetwork.Phase.ScoreCommit) {
            for (uint256 i; i < vals.length; ++i) {
                rows[i] = new uint16[](commits);
                for (uint256 j; j < commits; ++j) {
                    rows[i][j] = uint16(uint256(keccak256(abi.encode(seed, i, j))) % 10_001);
                }
                if (net.accountOf(vals[i]).stake < MIN_VALIDATOR || (seed >> (i + 8)) & 1 == 0) continue;
                bytes32 c = net.scoreCommitmentFor(r, vals[i], rows[i], bytes32(i));
                vm.prank(vals[i]);
                net.commitScores(r, c);
                committed[i] = true;
            }
            _advancePast();
            for (uint256 i; i < vals.length; ++i) {
                if (!committed[i] || (seed >> (i + 16)) & 1 == 0) continue;
                if (net.accountOf(vals[i]).stake < MIN_VALIDATOR) continue;
                vm.prank(vals[i]);
                net.revealScores(r, rows[i], bytes32(i));
                reveal[i] = true;
                vm.prank(vals[i]);
                try net.revealScores(r, rows[i], bytes32(i)) {
                    doubleRevealAccepted = true;
                } catch {}
            }
        }
        _checkPhase();
        // Committed miners, ascending.
        uint256 k;
        address[] memory ms = new address[](commits);
        for (uint256 i; i < miners.length; ++i) {
            if (net.accountOf(miners[i]).lastCommitRound == r) ms[k++] = miners[i];
        }
        _sortAddrs(ms);
        uint16[][] memory rv = new uint16[][](vals.length);
        for (uint256 i; i < vals.length; ++i) {
            rv[i] = reveal[i] ? rows[i] : new uint16[](0);
        }
        vm.roll(block.number + 20);
        uint256 poolBefore = net.pool();
        try this.doFinalize(r, ms, rv, reveal) {
            finalized++;
        } catch {
            finalizeFailed = true;
        }
        if (poolBefore - net.pool() > EMISSION) payoutAboveBudget = true;
        _checkPhase();
    }

    function doFinalize(uint256 r, address[] memory ms, uint16[][] memory rows, bool[] memory reveal) external {
        require(msg.sender == address(this), "self");
        uint256 n;
        for (uint256 i; i < reveal.length; ++i) {
            if (reveal[i]) ++n;
        }
        address[] memory rvAddr = new address[](n);
        uint16[][] memory rs = new uint16[][](n);
        uint256[] memory w = new uint256[](n);
        uint256 k;
        for (uint256 i; i < reveal.length; ++i) {
            if (!reveal[i]) continue;
            rvAddr[k] = vals[i];
            rs[k] = rows[i];
            w[k] = net.scoreEntry(r, vals[i]).weight;
            ++k;
        }
        for (uint256 a = 1; a < n; ++a) {
            for (uint256 b = a; b > 0 && rvAddr[b - 1] > rvAddr[b]; --b) {
                (rvAddr[b - 1], rvAddr[b]) = (rvAddr[b], rvAddr[b - 1]);
                (rs[b - 1], rs[b]) = (rs[b], rs[b - 1]);
                (w[b - 1], w[b]) = (w[b], w[b - 1]);
            }
        }
        net.finalize(r, ms, rvAddr, rs, _medians(r, ms, rvAddr, rs, w));
    }
}

contract InvariantsTest is TestBase {
    Handler internal h;
    TesseraNetwork internal net;
    TesseraToken internal token;

    function setUp() public {
        h = new Handler();
        net = h.network();
        token = h.tok();
    }

    struct FuzzSelector {
        address addr;
        bytes4[] selectors;
    }

    function targetContracts() public view returns (address[] memory t) {
        t = new address[](1);
        t[0] = address(h);
    }

    /// @dev Only the actions (not the views, nor the self-call helper).
    function targetSelectors() public view returns (FuzzSelector[] memory s) {
        bytes4[] memory sel = new bytes4[](9);
        sel[0] = Handler.commit.selector;
        sel[1] = Handler.addStake.selector;
        sel[2] = Handler.unbond.selector;
        sel[3] = Handler.withdraw.selector;
        sel[4] = Handler.claim.selector;
        sel[5] = Handler.advance.selector;
        sel[6] = Handler.slash.selector;
        sel[7] = Handler.finalizeNow.selector;
        sel[8] = Handler.reject.selector;
        s = new FuzzSelector[](1);
        s[0] = FuzzSelector(address(h), sel);
    }

    function _sumOwed() internal view returns (uint256 s) {
        for (uint256 i; i < h.actorCount(); ++i) {
            s += net.accountOf(h.actors(i)).owed;
        }
    }

    /// The handler really settles paying rounds (guards against vacuous invariants).
    function test_handlerSmoke_paysRounds() public {
        for (uint256 i; i < 4; ++i) {
            h.commit(i);
        }
        h.finalizeNow(type(uint256).max);
        assertEq(h.finalized(), 1, "finalized");
        assertTrue(net.pool() < h.initialPool(), "paid something");
        h.claim(0);
        h.slash(1, 15);
        invariant_tokenConservation();
        invariant_noValueCreated();
        invariant_flags();
    }

    /// balance = stakes + unbonding + unclaimed rewards + pool
    function invariant_tokenConservation() public view {
        assertEq(
            token.balanceOf(address(net)),
            net.totalStake() + net.totalUnbonding() + _sumOwed() + net.pool() + net.totalUnvested(),
            "conservation"
        );
    }

    /// every token the actors hold, stake or are owed came from their funding or the pool (no double
    /// claim, nothing created); slashed tokens are burned.
    function invariant_noValueCreated() public view {
        uint256 held;
        for (uint256 i; i < h.actorCount(); ++i) {
            address a = h.actors(i);
            NetworkState.Account memory acc = net.accountOf(a);
            held += token.balanceOf(a) + acc.stake + acc.owed + net.unbondingOf(a).amount;
        }
        // pool outflow is owed, unvested or held pay; forfeits flow back into the pool
        assertEq(
            held + h.burned() + net.totalUnvested(), h.initialActorTokens() + (h.initialPool() - net.pool()), "value"
        );
    }

    function invariant_flags() public view {
        assertTrue(!h.payoutAboveBudget(), "payout above budget");
        assertTrue(!h.doubleRevealAccepted(), "double reveal");
        assertTrue(!h.doubleClaimPaid(), "double claim");
        assertTrue(!h.slashUnbounded(), "slash bounds");
        assertTrue(!h.phaseWentBack(), "phase monotonic");
        assertTrue(!h.finalizeFailed(), "finalize failed");
    }

    function invariant_totalsConsistent() public view {
        uint256 stake;
        uint256 vstake;
        uint256 unb;
        for (uint256 i; i < h.actorCount(); ++i) {
            address a = h.actors(i);
            NetworkState.Account memory acc = net.accountOf(a);
            stake += acc.stake;
            if (acc.role == ITesseraNetwork.Role.Validator) vstake += acc.stake;
            unb += net.unbondingOf(a).amount;
        }
        assertEq(net.totalStake(), stake, "totalStake");
        assertEq(net.totalValidatorStake(), vstake, "totalValidatorStake");
        assertEq(net.totalUnbonding(), unb, "totalUnbonding");
    }
}
