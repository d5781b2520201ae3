// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.30;

import {BLS} from "solady/utils/ext/ithaca/BLS.sol";
import {ITesseraNetwork} from "../src/ITesseraNetwork.sol";
import {TesseraNetwork} from "../src/TesseraNetwork.sol";
import {NetworkState} from "../src/NetworkState.sol";
import {Fixture} from "./utils/Fixture.sol";
import {Consensus} from "../src/Consensus.sol";

contract TesseraNetworkTest is Fixture {
    address internal m1;
    address internal m2;
    address internal m3;
    address internal v1;
    address internal v2;
    address internal v3;

    function setUp() public {
        _deploy();
        m1 = _miner(1);
        m2 = _miner(2);
        m3 = _miner(3);
        v1 = _validator(1);
        v2 = _validator(2);
        v3 = _validator(3);
    }

    function _miners3() internal view returns (address[] memory ms) {
        ms = new address[](3);
        ms[0] = m1;
        ms[1] = m2;
        ms[2] = m3;
        ms = _sortAddrs(ms);
    }

    function _vals3() internal view returns (address[] memory vs) {
        vs = new address[](3);
        vs[0] = v1;
        vs[1] = v2;
        vs[2] = v3;
    }

    function _rows(uint16 a, uint16 b, uint16 c) internal pure returns (uint16[][] memory rows) {
        rows = new uint16[][](3);
        for (uint256 i; i < 3; ++i) {
            rows[i] = new uint16[](3);
            rows[i][0] = a + uint16(i);
            rows[i][1] = b;
            rows[i][2] = c;
        }
    }

    function _all(uint256 n) internal pure returns (bool[] memory r) {
        r = new bool[](n);
        for (uint256 i; i < n; ++i) {
            r[i] = true;
        }
    }

    function _commitAll() internal {
        _commit(m1, 1, "d1");
        _commit(m2, 1, "d2");
        _commit(m3, 1, "d3");
    }

    // ------------------------------------------------------------ constructor and token

    function test_constructor_setsState() public view {
        assertEq(_round(), 1, "round");
        assertEq(uint256(_phase()), 0, "phase");
        assertEq(net.pool(), 1_000_000 ether, "pool");
        assertEq(token.balanceOf(address(net)), net.pool() + net.totalStake(), "balance");
        assertEq(net.checkpoints(1), keccak256("theta_1"), "genesis");
    }

    function test_constructor_revertsOnBadParams() public {
        NetworkState.Params memory p = _params();
        p.slashBps = 10_001;
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.InvalidParam.selector, bytes32("slashBps")));
        new TesseraNetwork(p);
        p = _params();
        p.validatorShareBps = 10_001;
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.InvalidParam.selector, bytes32("validatorShareBps")));
        new TesseraNetwork(p);
        p = _params();
        p.commitBlocks = 0;
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.InvalidParam.selector, bytes32("phaseBlocks")));
        new TesseraNetwork(p);
        p = _params();
        p.minMinerStake = 0;
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.InvalidParam.selector, bytes32("minStake")));
        new TesseraNetwork(p);
        p = _params();
        p.poolSupply = type(uint96).max;
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.InvalidParam.selector, bytes32("supply")));
        new TesseraNetwork(p);
    }

    function test_token_metadataAndBurn() public {
        assertEq(keccak256(bytes(token.name())), keccak256("Tessera"), "name");
        assertEq(keccak256(bytes(token.symbol())), keccak256("TSR"), "symbol");
        uint256 supply = token.totalSupply();
        token.burn(1 ether);
        assertEq(token.totalSupply(), supply - 1 ether, "burned");
    }

    // ------------------------------------------------------------ staking

    function test_registerMiner_ok() public view {
        NetworkState.Account memory a = net.accountOf(m1);
        assertEq(uint256(a.role), 1, "role");
        assertEq(a.stake, MIN_MINER, "stake");
    }

    function test_registerMiner_revertsTwice() public {
        vm.prank(m1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.AlreadyRegistered.selector, m1, ITesseraNetwork.Role.Miner));
        net.registerMiner(MIN_MINER);
    }

    function test_registerMiner_revertsLowStake() public {
        address x = address(0xBEEF);
        _fund(x, MIN_MINER);
        vm.prank(x);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.StakeTooLow.selector, x, MIN_MINER - 1, MIN_MINER));
        net.registerMiner(MIN_MINER - 1);
    }

    function test_registerValidator_ok() public view {
        assertEq(net.validatorCount(), 3, "count");
        assertEq(net.validators(0), v1, "v1");
        assertEq(net.totalValidatorStake(), 3 * MIN_VALIDATOR, "total");
        assertEq(net.blsKeyOf(v1).x_b, _pk(_validatorKey(1)).x_b, "key");
    }

    function test_registerValidator_revertsBadPop() public {
        address x = vm.addr(0xDEAD);
        _fund(x, MIN_VALIDATOR);
        BLS.G1Point memory pk = _pk(42);
        BLS.G2Point memory pop = _sign(43, net.popMessage(x, pk)); // wrong key
        vm.prank(x);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.InvalidProofOfPossession.selector, x));
        net.registerValidator(MIN_VALIDATOR, pk, pop);
    }

    function test_registerValidator_revertsPopOfOtherSender() public {
        // A proof made for v1 cannot be replayed by another account (rogue-key defence).
        address x = vm.addr(0xDEAD);
        _fund(x, MIN_VALIDATOR);
        BLS.G1Point memory pk = _pk(42);
        BLS.G2Point memory pop = _sign(42, net.popMessage(v1, pk));
        vm.prank(x);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.InvalidProofOfPossession.selector, x));
        net.registerValidator(MIN_VALIDATOR, pk, pop);
    }

    function test_addStake_ok() public {
        vm.prank(m1);
        net.addStake(5 ether);
        assertEq(net.accountOf(m1).stake, MIN_MINER + 5 ether, "stake");
        vm.prank(v1);
        net.addStake(5 ether);
        assertEq(net.totalValidatorStake(), 3 * MIN_VALIDATOR + 5 ether, "vstake");
    }

    function test_addStake_reverts() public {
        vm.prank(address(0xBEEF));
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NotRole.selector, address(0xBEEF), ITesseraNetwork.Role.Miner));
        net.addStake(1);
        vm.prank(m1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.InvalidAmount.selector, 0));
        net.addStake(0);
    }

    function test_unbond_withdraw_afterDelay() public {
        vm.prank(m1);
        net.requestUnbond(MIN_MINER);
        NetworkState.Unbonding memory u = net.unbondingOf(m1);
        assertEq(u.amount, MIN_MINER, "unbonding");
        assertEq(u.end, block.number + UNBONDING, "end");
        vm.prank(m1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.StillUnbonding.selector, m1, u.end));
        net.withdraw();
        vm.roll(u.end);
        uint256 before = token.balanceOf(m1);
        vm.prank(m1);
        net.withdraw();
        assertEq(token.balanceOf(m1), before + MIN_MINER, "paid");
        vm.prank(m1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NothingToWithdraw.selector, m1));
        net.withdraw();
    }

    function test_unbond_reverts() public {
        vm.prank(m1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.RemainingStakeTooLow.selector, 1, MIN_MINER));
        net.requestUnbond(MIN_MINER - 1);
        vm.prank(m1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.InvalidAmount.selector, MIN_MINER + 1));
        net.requestUnbond(MIN_MINER + 1);
        vm.prank(address(0xBEEF));
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NotRole.selector, address(0xBEEF), ITesseraNetwork.Role.Miner));
        net.requestUnbond(1);
    }

    function test_unbondingStake_staysSlashable() public {
        vm.prank(m1);
        net.requestUnbond(MIN_MINER);
        vm.prank(v1);
        net.proposeSlash(m1, 1, "ev");
        vm.prank(v2);
        net.voteSlash("ev", true);
        assertEq(net.unbondingOf(m1).amount, MIN_MINER - MIN_MINER / 10, "slashed from unbonding");
    }

    // ------------------------------------------------------------ commits

    function test_commitUpdate_ok() public {
        bytes32 c = net.commitmentFor(1, m1, "digest");
        assertEq(c, keccak256(abi.encode(block.chainid, address(net), uint256(1), m1, bytes32("digest"))), "formula");
        vm.expectEmit();
        emit ITesseraNetwork.UpdateCommitted(1, m1, c);
        vm.prank(m1);
        net.commitUpdate(1, c);
        assertEq(net.accountOf(m1).lastCommitRound, 1, "committed");
    }

    function test_commitUpdate_reverts() public {
        _commit(m1, 1, "d");
        vm.prank(m1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.AlreadyCommitted.selector, m1, 1));
        net.commitUpdate(1, "x");
        vm.prank(m2);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.WrongRound.selector, 1, 2));
        net.commitUpdate(2, "x");
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NotRole.selector, v1, ITesseraNetwork.Role.Miner));
        net.commitUpdate(1, "x");
        uint256 deadline = net.phaseDeadline();
        vm.roll(deadline + 1);
        vm.prank(m2);
        vm.expectRevert(
            abi.encodeWithSelector(ITesseraNetwork.PhaseClosed.selector, ITesseraNetwork.Phase.Commit, deadline, deadline + 1)
        );
        net.commitUpdate(1, "x");
        net.advance();
        vm.prank(m2);
        vm.expectRevert(
            abi.encodeWithSelector(ITesseraNetwork.WrongPhase.selector, ITesseraNetwork.Phase.Commit, ITesseraNetwork.Phase.Reveal)
        );
        net.commitUpdate(1, "x");
    }

    function test_commitUpdate_revertsUnbondedMiner() public {
        vm.prank(m1);
        net.requestUnbond(MIN_MINER);
        vm.prank(m1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.StakeTooLow.selector, m1, 0, MIN_MINER));
        net.commitUpdate(1, "x");
    }

    function test_copiedCommitment_isWorthless() public {
        // m2 copies m1's commitment: the chain accepts it, but it binds m1's address, so it can never
        // match keccak(chain, contract, round, m2, digest) for any digest m2 serves.
        bytes32 c = net.commitmentFor(1, m1, "secret-update");
        vm.prank(m1);
        net.commitUpdate(1, c);
        vm.prank(m2);
        net.commitUpdate(1, c);
        assertTrue(net.commitmentFor(1, m2, "secret-update") != c, "copy matches");
    }

    function testFuzz_commitment_boundToSender(address a, address b, bytes32 d1, bytes32 d2) public view {
        vm.assume(a != b);
        assertTrue(net.commitmentFor(1, a, d1) != net.commitmentFor(1, b, d2), "collision");
    }

    // ------------------------------------------------------------ seed

    function test_seed_commitReveal_mixes() public {
        bytes32 s1 = "s1";
        vm.prank(v1);
        net.commitSeed(1, keccak256(abi.encode(s1, v1, uint256(1))));
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.AlreadyDone.selector, v1, 1, bytes32("seed")));
        net.commitSeed(1, "again");
        _advancePast();
        vm.prank(v2);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NothingCommitted.selector, v2, 1, bytes32("seed")));
        net.revealSeed(1, s1);
        bytes32 want = keccak256(abi.encode(s1, v1, uint256(1)));
        bytes32 got = keccak256(abi.encode(bytes32("wrong"), v1, uint256(1)));
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.RevealMismatch.selector, v1, 1, want, got));
        net.revealSeed(1, "wrong");
        vm.prank(v1);
        net.revealSeed(1, s1);
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.AlreadyDone.selector, v1, 1, bytes32("seed")));
        net.revealSeed(1, s1);
        assertEq(net.seeds(1), bytes32(0), "not fixed before reveal closes");
        _advancePast();
        bytes32 expect = keccak256(abi.encode(net.seeds(0), uint64(1), keccak256(abi.encode(s1))));
        assertEq(net.seeds(1), expect, "seed");
    }

    function test_seed_fallbackWithoutReveals() public {
        _advancePast();
        _advancePast();
        assertTrue(net.seeds(1) != bytes32(0), "fallback seed");
    }

    function test_seed_unrevealedShareBlocksScoreReveal() public {
        _commitAll();
        vm.prank(v1);
        net.commitSeed(1, keccak256(abi.encode(bytes32("s"), v1, uint256(1))));
        _advancePast();
        _advancePast();
        uint16[][] memory rows = _rows(1, 2, 3);
        {
            bytes32 c_ = net.scoreCommitmentFor(1, v1, rows[0], "salt");
            vm.prank(v1);
            net.commitScores(1, c_);
        }
        _advancePast();
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.SeedNotRevealed.selector, v1, 1));
        net.revealScores(1, rows[0], "salt");
    }

    // ------------------------------------------------------------ phases

    function test_advance_revertsBeforeDeadline() public {
        uint256 deadline = net.phaseDeadline();
        vm.expectRevert(
            abi.encodeWithSelector(ITesseraNetwork.PhaseNotOver.selector, ITesseraNetwork.Phase.Commit, deadline, block.number)
        );
        net.advance();
    }

    function test_advance_throughAllPhases() public {
        for (uint256 p = 1; p <= 4; ++p) {
            _advancePast();
            assertEq(uint256(_phase()), p, "phase");
        }
        assertEq(net.phaseDeadline(), type(uint256).max, "no deadline");
        vm.expectRevert(
            abi.encodeWithSelector(ITesseraNetwork.WrongPhase.selector, ITesseraNetwork.Phase.ScoreReveal, ITesseraNetwork.Phase.Finalize)
        );
        net.advance();
    }

    // ------------------------------------------------------------ scores and finalize

    function test_fullRound_paysByConsensus() public {
        _commitAll();
        address[] memory ms = _miners3();
        uint16[][] memory rows = _rows(5000, 3000, 0);
        uint16[] memory med = _scoreAndFinalize(ms, _vals3(), rows, _all(3));
        assertEq(med[0], 5001, "median");
        assertEq(_round(), 2, "next round");
        uint256 mBudget = EMISSION - EMISSION / 5;
        assertEq(net.accountOf(ms[0]).owed, mBudget * 5001 / 8001, "miner0");
        assertEq(net.accountOf(ms[1]).owed, mBudget * 3000 / 8001, "miner1");
        assertEq(net.accountOf(ms[2]).owed, 0, "miner2");
        // v2 (5001) is exactly on consensus, v1 and v3 are 1 away: v2 earns the most.
        assertTrue(net.accountOf(v2).owed > net.accountOf(v1).owed, "closeness");
        assertEq(net.accountOf(v1).owed, net.accountOf(v3).owed, "symmetric");
    }

    function test_finalize_noReveals_noCommits() public {
        uint256 poolBefore = net.pool();
        _advancePast();
        _advancePast();
        _advancePast();
        vm.roll(net.phaseDeadline() + 1);
        net.finalize(1, new address[](0), new address[](0), new uint16[][](0), new uint16[](0));
        assertEq(_round(), 2, "round");
        assertEq(net.pool(), poolBefore, "nothing paid");
    }

    function test_finalize_nonRevealerLosesShare() public {
        _commitAll();
        bool[] memory rev = _all(3);
        rev[2] = false;
        _scoreAndFinalize(_miners3(), _vals3(), _rows(100, 100, 100), rev);
        assertEq(net.accountOf(v3).owed, 0, "non-revealer");
        assertTrue(net.accountOf(v1).owed > 0, "revealer");
    }

    function test_finalize_revertsTwice() public {
        _commitAll();
        address[] memory ms = _miners3();
        uint16[] memory med = _scoreAndFinalize(ms, _vals3(), _rows(1, 1, 1), _all(3));
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.WrongRound.selector, 2, 1));
        net.finalize(1, ms, new address[](0), new uint16[][](0), med);
    }

    function test_finalize_revertsBadMedianAndLists() public {
        _commitAll();
        address[] memory ms = _miners3();
        address[] memory vs = _vals3();
        uint16[][] memory rows = _rows(10, 20, 30);
        _advancePast();
        _advancePast();
        for (uint256 i; i < 3; ++i) {
            {
                bytes32 c_ = net.scoreCommitmentFor(1, vs[i], rows[i], "s");
                vm.prank(vs[i]);
                net.commitScores(1, c_);
            }
        }
        _advancePast();
        for (uint256 i; i < 3; ++i) {
            vm.prank(vs[i]);
            net.revealScores(1, rows[i], "s");
        }
        uint16[] memory med = new uint16[](3);
        med[0] = 11;
        med[1] = 20;
        med[2] = 30;
        uint256 deadline = net.phaseDeadline();
        vm.expectRevert(
            abi.encodeWithSelector(ITesseraNetwork.PhaseNotOver.selector, ITesseraNetwork.Phase.ScoreReveal, deadline, block.number)
        );
        net.finalize(1, ms, vs, rows, med);
        vm.roll(deadline + 1);
        address[] memory sv = _sortAddrs(_vals3());
        uint16[][] memory srows = new uint16[][](3);
        for (uint256 i; i < 3; ++i) {
            for (uint256 k; k < 3; ++k) {
                if (vs[k] == sv[i]) srows[i] = rows[k];
            }
        }
        med[0] = 10;
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.BadMedian.selector, 0, 10));
        net.finalize(1, ms, sv, srows, med);
        med[0] = 11;
        address[] memory dup = new address[](3);
        dup[0] = ms[0];
        dup[1] = ms[0];
        dup[2] = ms[1];
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NotAscending.selector, bytes32("miners"), 1));
        net.finalize(1, dup, sv, srows, med);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.LengthMismatch.selector, 3, 2));
        net.finalize(1, new address[](2), sv, srows, med);
        uint16[][] memory bad = new uint16[][](3);
        bad[0] = srows[1];
        bad[1] = srows[1];
        bad[2] = srows[2];
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.ScoresHashMismatch.selector, sv[0]));
        net.finalize(1, ms, sv, bad, med);
        net.finalize(1, ms, sv, srows, med);
    }

    function test_revealScores_reverts() public {
        _commitAll();
        _advancePast();
        _advancePast();
        uint16[][] memory rows = _rows(1, 2, 3);
        {
            bytes32 c_ = net.scoreCommitmentFor(1, v1, rows[0], "salt");
            vm.prank(v1);
            net.commitScores(1, c_);
        }
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.AlreadyDone.selector, v1, 1, bytes32("scores")));
        net.commitScores(1, "again");
        vm.prank(m1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NotRole.selector, m1, ITesseraNetwork.Role.Validator));
        net.commitScores(1, "x");
        _advancePast();
        vm.prank(v2);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NothingCommitted.selector, v2, 1, bytes32("scores")));
        net.revealScores(1, rows[0], "salt");
        // wrong salt
        bytes32 want = net.scoreCommitmentFor(1, v1, rows[0], "salt");
        bytes32 got = net.scoreCommitmentFor(1, v1, rows[0], "pepper");
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.RevealMismatch.selector, v1, 1, want, got));
        net.revealScores(1, rows[0], "pepper");
        // wrong length and range
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.LengthMismatch.selector, 3, 2));
        net.revealScores(1, new uint16[](2), "salt");
        uint16[] memory hi = new uint16[](3);
        hi[1] = 10_001;
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.ScoreOutOfRange.selector, 1, 10_001));
        net.revealScores(1, hi, "salt");
        vm.prank(v1);
        net.revealScores(1, rows[0], "salt");
        assertTrue(net.scoreEntry(1, v1).revealed, "revealed");
        // no double reveal
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.AlreadyDone.selector, v1, 1, bytes32("scores")));
        net.revealScores(1, rows[0], "salt");
        // late reveal
        uint256 deadline = net.phaseDeadline();
        vm.roll(deadline + 1);
        vm.prank(v2);
        vm.expectRevert(
            abi.encodeWithSelector(
                ITesseraNetwork.PhaseClosed.selector, ITesseraNetwork.Phase.ScoreReveal, deadline, deadline + 1
            )
        );
        net.revealScores(1, rows[1], "salt");
    }

    function test_copiedScoreCommitment_cannotBeRevealed() public {
        _commitAll();
        _advancePast();
        _advancePast();
        uint16[][] memory rows = _rows(1, 2, 3);
        bytes32 c = net.scoreCommitmentFor(1, v1, rows[0], "salt");
        vm.prank(v1);
        net.commitScores(1, c);
        vm.prank(v2);
        net.commitScores(1, c); // copy
        _advancePast();
        bytes32 got = net.scoreCommitmentFor(1, v2, rows[0], "salt");
        vm.prank(v2);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.RevealMismatch.selector, v2, 1, c, got));
        net.revealScores(1, rows[0], "salt");
    }

    // ------------------------------------------------------------ claim

    function test_claim_and_commitAndClaim() public {
        _commitAll();
        address[] memory ms = _miners3();
        _scoreAndFinalize(ms, _vals3(), _rows(100, 200, 300), _all(3));
        uint256 owed = net.accountOf(m1).owed;
        uint256 before = token.balanceOf(m1);
        vm.prank(m1);
        net.claim();
        assertEq(token.balanceOf(m1), before + owed, "paid");
        vm.prank(m1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NothingToWithdraw.selector, m1));
        net.claim();
        uint256 owed2 = net.accountOf(m2).owed;
        before = token.balanceOf(m2);
        bytes32 c = net.commitmentFor(2, m2, "d");
        vm.prank(m2);
        net.commitAndClaim(2, c);
        assertEq(token.balanceOf(m2), before + owed2, "commitAndClaim paid");
        assertEq(net.accountOf(m2).lastCommitRound, 2, "committed");
    }

    // ------------------------------------------------------------ slashing

    function test_slash_quorumBurnsFraction() public {
        uint256 supply = token.totalSupply();
        vm.prank(v1);
        net.proposeSlash(m1, 1, "evidence");
        assertEq(net.accountOf(m1).stake, MIN_MINER, "not yet");
        uint256 otherBefore = net.accountOf(m2).stake;
        vm.prank(v2);
        net.voteSlash("evidence", true);
        assertEq(net.accountOf(m1).stake, MIN_MINER - MIN_MINER / 10, "slashed");
        assertEq(token.totalSupply(), supply - MIN_MINER / 10, "burned");
        assertEq(net.accountOf(m2).stake, otherBefore, "others untouched");
        vm.prank(v3);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.EvidenceUsed.selector, bytes32("evidence")));
        net.voteSlash("evidence", true);
        vm.prank(v3);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.EvidenceUsed.selector, bytes32("evidence")));
        net.proposeSlash(m2, 1, "evidence");
    }

    function test_slash_secondProposalOfSameEvidenceCountsAsVote() public {
        // two validators that saw the same cheat both call proposeSlash (same block, any order)
        vm.prank(v1);
        net.proposeSlash(m1, 1, "same");
        vm.prank(v2);
        net.proposeSlash(m1, 1, "same");
        assertEq(net.accountOf(m1).stake, MIN_MINER - MIN_MINER / 10, "both counted: slashed");
        assertTrue(net.slashProposal("same").executed, "executed");
        // a different target on the same evidence is refused, as is a proposal after execution
        vm.prank(v3);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.EvidenceUsed.selector, bytes32("same")));
        net.proposeSlash(m1, 1, "same");
        vm.prank(v1);
        net.proposeSlash(m2, 1, "other");
        vm.prank(v2);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.EvidenceUsed.selector, bytes32("other")));
        net.proposeSlash(m1, 1, "other");
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.AlreadyVoted.selector, bytes32("other"), v1));
        net.proposeSlash(m2, 1, "other");
    }

    function test_slash_reverts() public {
        vm.prank(m1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NotRole.selector, m1, ITesseraNetwork.Role.Validator));
        net.proposeSlash(m2, 1, "e");
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NothingToSlash.selector, address(0xBEEF)));
        net.proposeSlash(address(0xBEEF), 1, "e");
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.UnknownEvidence.selector, bytes32("nope")));
        net.voteSlash("nope", true);
        vm.prank(v1);
        net.proposeSlash(v2, 1, "e");
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.AlreadyVoted.selector, bytes32("e"), v1));
        net.voteSlash("e", true);
        vm.prank(v2);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.TargetCannotVote.selector, bytes32("e"), v2));
        net.voteSlash("e", true);
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.TargetCannotVote.selector, bytes32("e2"), v1));
        net.proposeSlash(v1, 1, "e2");
    }

    function testFuzz_slash_bounded(uint256 stake, uint256 unbond) public {
        stake = bound(stake, MIN_MINER, 1_000 ether);
        unbond = bound(unbond, 0, stake);
        if (stake - unbond != 0 && stake - unbond < MIN_MINER) unbond = stake;
        address x = address(0xF00D);
        _fund(x, stake);
        vm.prank(x);
        net.registerMiner(stake);
        if (unbond != 0) {
            vm.prank(x);
            net.requestUnbond(unbond);
        }
        uint256 totalBefore = net.totalStake() + net.totalUnbonding();
        vm.prank(v1);
        net.proposeSlash(x, 1, "fz");
        vm.prank(v2);
        net.voteSlash("fz", true);
        uint256 after_ = net.accountOf(x).stake + net.unbondingOf(x).amount;
        assertEq(after_, stake - stake / 10, "fraction");
        assertEq(net.totalStake() + net.totalUnbonding(), totalBefore - stake / 10, "totals");
        assertEq(net.accountOf(m1).stake, MIN_MINER, "others");
    }

    function test_slash_bounded_concrete() public {
        address x = address(0xF00D);
        _fund(x, 500 ether);
        vm.prank(x);
        net.registerMiner(500 ether);
        vm.prank(x);
        net.requestUnbond(300 ether);
        vm.prank(v1);
        net.proposeSlash(x, 1, "fz");
        vm.prank(v2);
        net.voteSlash("fz", true);
        assertEq(net.accountOf(x).stake, 150 ether, "from stake first");
        assertEq(net.unbondingOf(x).amount, 300 ether, "unbonding untouched");
    }

    // ------------------------------------------------------------ certificates

    function _finalizeRound1() internal {
        _commitAll();
        _scoreAndFinalize(_miners3(), _vals3(), _rows(1, 2, 3), _all(3));
    }

    function _aggSig(uint256 mask, bytes32 msgHash) internal view returns (BLS.G2Point memory sig) {
        bool first = true;
        for (uint256 i; i < 3; ++i) {
            if ((mask >> i) & 1 == 0) continue;
            BLS.G2Point memory s = _sign(_validatorKey(i + 1), abi.encodePacked(msgHash));
            sig = first ? s : BLS.add(sig, s);
            first = false;
        }
    }

    function test_certifyCheckpoint_bls() public {
        _finalizeRound1();
        bytes32 digest = keccak256("theta_2");
        BLS.G2Point memory sig = _aggSig(3, net.checkpointMessage(1, digest));
        net.certifyCheckpoint(1, digest, 4, sig); // validator index 2 did not sign
        assertEq(net.checkpoints(2), digest, "certified");
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.CannotCertify.selector, 1));
        net.certifyCheckpoint(1, digest, 4, sig);
    }

    function test_certifyCheckpoint_bls_reverts() public {
        bytes32 digest = keccak256("theta_2");
        BLS.G2Point memory early = _aggSig(3, net.checkpointMessage(1, digest));
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.CannotCertify.selector, 1));
        net.certifyCheckpoint(1, digest, 4, early);
        _finalizeRound1();
        BLS.G2Point memory one = _aggSig(1, net.checkpointMessage(1, digest));
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.QuorumNotReached.selector, MIN_VALIDATOR, 3 * MIN_VALIDATOR));
        net.certifyCheckpoint(1, digest, 6, one);
        BLS.G2Point memory wrong = _aggSig(3, net.checkpointMessage(1, keccak256("other")));
        vm.expectRevert(ITesseraNetwork.InvalidSignature.selector);
        net.certifyCheckpoint(1, digest, 4, wrong);
        BLS.G2Point memory good = _aggSig(3, net.checkpointMessage(1, digest));
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.BadSigner.selector, 3));
        net.certifyCheckpoint(1, digest, 12, good);
    }

    function _ecdsaSigs(uint256 n, bytes32 msgHash) internal pure returns (bytes[] memory sigs) {
        bytes32 h = keccak256(abi.encodePacked("\x19Ethereum Signed Message:\n32", msgHash));
        uint256[] memory keys = new uint256[](n);
        for (uint256 i; i < n; ++i) {
            keys[i] = 0xA11CE + i + 1;
        }
        for (uint256 a = 1; a < n; ++a) {
            for (uint256 b = a; b > 0 && vm.addr(keys[b - 1]) > vm.addr(keys[b]); --b) {
                (keys[b - 1], keys[b]) = (keys[b], keys[b - 1]);
            }
        }
        sigs = new bytes[](n);
        for (uint256 i; i < n; ++i) {
            (uint8 v, bytes32 r, bytes32 s) = vm.sign(keys[i], h);
            sigs[i] = abi.encodePacked(r, s, v);
        }
    }

    function test_certifyCheckpoint_bls_allSigners() public {
        _finalizeRound1();
        bytes32 digest = keccak256("theta_2");
        BLS.G2Point memory sig = _aggSig(7, net.checkpointMessage(1, digest));
        net.certifyCheckpoint(1, digest, 0, sig);
        assertEq(net.checkpoints(2), digest, "certified");
    }

    function test_certifyCheckpoint_bls_missingSignerRejected() public {
        // claiming index 2 signed when it did not: the aggregate key includes it, the signature does not
        _finalizeRound1();
        bytes32 digest = keccak256("theta_2");
        BLS.G2Point memory sig = _aggSig(3, net.checkpointMessage(1, digest));
        vm.expectRevert(ITesseraNetwork.InvalidSignature.selector);
        net.certifyCheckpoint(1, digest, 0, sig);
    }

    function test_certifyCheckpoint_ecdsa() public {
        _finalizeRound1();
        bytes32 digest = keccak256("theta_2");
        net.certifyCheckpointEcdsa(1, digest, _ecdsaSigs(3, net.checkpointMessage(1, digest)));
        assertEq(net.checkpoints(2), digest, "certified");
    }

    function test_certifyCheckpoint_ecdsa_reverts() public {
        _finalizeRound1();
        bytes32 digest = keccak256("theta_2");
        bytes[] memory sigs = _ecdsaSigs(3, net.checkpointMessage(1, digest));
        bytes[] memory dup = new bytes[](2);
        dup[0] = sigs[0];
        dup[1] = sigs[0];
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NotAscending.selector, bytes32("signers"), 1));
        net.certifyCheckpointEcdsa(1, digest, dup);
        bytes[] memory one = new bytes[](1);
        one[0] = sigs[0];
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.QuorumNotReached.selector, MIN_VALIDATOR, 3 * MIN_VALIDATOR));
        net.certifyCheckpointEcdsa(1, digest, one);
    }

    // ------------------------------------------------------------ remaining reverts and views

    function test_registerValidator_revertsWhenFull() public {
        vm.store(address(net), bytes32(uint256(12)), bytes32(uint256(256))); // validators.length = 256
        address x = vm.addr(0xF011);
        BLS.G1Point memory pk = _pk(5);
        BLS.G2Point memory sig = _sign(5, "x");
        vm.prank(x);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.TooManyValidators.selector, 256));
        net.registerValidator(MIN_VALIDATOR, pk, sig);
    }

    function test_finalize_revertsWrongPhaseAndNonParticipant() public {
        _commit(m1, 1, "d");
        address[] memory one = new address[](1);
        one[0] = m2; // did not commit
        vm.expectRevert(
            abi.encodeWithSelector(ITesseraNetwork.WrongPhase.selector, ITesseraNetwork.Phase.ScoreReveal, ITesseraNetwork.Phase.Commit)
        );
        net.finalize(1, one, new address[](0), new uint16[][](0), new uint16[](1));
        for (uint256 i; i < 4; ++i) {
            _advancePast();
        }
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NotParticipant.selector, m2, 1));
        net.finalize(1, one, new address[](0), new uint16[][](0), new uint16[](1));
        one[0] = m1;
        net.finalize(1, one, new address[](0), new uint16[][](0), new uint16[](1));
    }

    function test_finalize_revertsUnsortedRevealers() public {
        _commitAll();
        address[] memory vs = _sortAddrs(_vals3());
        uint16[][] memory rows = _rows(1, 2, 3);
        _advancePast();
        _advancePast();
        for (uint256 i; i < 3; ++i) {
            bytes32 c_ = net.scoreCommitmentFor(1, vs[i], rows[i], "s");
            vm.prank(vs[i]);
            net.commitScores(1, c_);
        }
        _advancePast();
        for (uint256 i; i < 3; ++i) {
            vm.prank(vs[i]);
            net.revealScores(1, rows[i], "s");
        }
        vm.roll(net.phaseDeadline() + 1);
        address[] memory rev = new address[](3);
        (rev[0], rev[1], rev[2]) = (vs[1], vs[0], vs[2]);
        uint16[][] memory rs = new uint16[][](3);
        (rs[0], rs[1], rs[2]) = (rows[1], rows[0], rows[2]);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NotAscending.selector, bytes32("revealers"), 1));
        net.finalize(1, _miners3(), rev, rs, new uint16[](3));
    }

    function test_certifyCheckpoint_ecdsa_revertsNonValidatorSigner() public {
        _finalizeRound1();
        bytes32 digest = keccak256("theta_2");
        bytes32 h = keccak256(abi.encodePacked("\x19Ethereum Signed Message:\n32", net.checkpointMessage(1, digest)));
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(0xBAD, h);
        bytes[] memory sigs = new bytes[](1);
        sigs[0] = abi.encodePacked(r, s, v);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.BadSigner.selector, 0));
        net.certifyCheckpointEcdsa(1, digest, sigs);
    }

    function test_views_seedCommitmentAndHasVoted() public {
        bytes32 c = keccak256(abi.encode(bytes32("s"), v1, uint256(1)));
        vm.prank(v1);
        net.commitSeed(1, c);
        assertEq(net.seedCommitment(1, v1), c, "seed commitment");
        vm.prank(v1);
        net.proposeSlash(m1, 1, "e");
        assertTrue(net.hasVoted("e", v1), "voted");
        assertTrue(!net.hasVoted("e", v2), "not voted");
        vm.prank(m1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NotRole.selector, m1, ITesseraNetwork.Role.Validator));
        net.commitSeed(1, c);
    }

    function _checkStatus() internal view {
        (NetworkState.RoundState memory s, uint256 deadline, bytes32 cp, bytes32 seed, bytes32 assignSeed, uint256 b) =
            net.status();
        assertEq(s.round, _round(), "round");
        assertEq(uint256(s.phase), uint256(_phase()), "phase");
        assertEq(deadline, net.phaseDeadline(), "deadline");
        assertEq(cp, net.checkpoints(s.round), "checkpoint");
        assertEq(seed, net.seeds(s.round), "seed");
        assertEq(assignSeed, net.seeds(s.round - 1), "assignment seed");
        assertEq(b, block.number, "block");
    }

    function test_status_isTheSingleViewsInOneCall() public {
        _checkStatus();
        _commitAll();
        _advancePast(); // Reveal
        _checkStatus();
        _advancePast(); // ScoreCommit: the round's seed is fixed
        _checkStatus();
        (,,, bytes32 seed,,) = net.status();
        assertTrue(seed != bytes32(0), "seed set");
    }

    function test_commitment_boundToSender_concrete() public view {
        testFuzz_commitment_boundToSender(m1, m2, "update", "update");
    }

    function testFuzz_payouts_neverAboveBudget(uint16[6] memory med, uint96[4] memory w, uint16[4] memory cl, uint128 budget)
        public
        pure
    {
        uint256[] memory m = new uint256[](6);
        for (uint256 j; j < 6; ++j) {
            m[j] = med[j] % 10_001;
        }
        uint256[] memory pay = Consensus.minerPayouts(m, budget);
        uint256 sum;
        for (uint256 j; j < 6; ++j) {
            sum += pay[j];
        }
        assertLe(sum, budget, "miners");
        uint256[] memory ww = new uint256[](4);
        uint256[] memory cc = new uint256[](4);
        for (uint256 i; i < 4; ++i) {
            ww[i] = w[i];
            cc[i] = uint256(cl[i]) * 6;
        }
        pay = Consensus.validatorPayouts(ww, cc, budget);
        sum = 0;
        for (uint256 i; i < 4; ++i) {
            sum += pay[i];
        }
        assertLe(sum, budget, "validators");
    }

    function test_payouts_neverAboveBudget_concrete() public pure {
        testFuzz_payouts_neverAboveBudget(
            [uint16(3), 3, 3, 0, 0, 0], [uint96(1), 1, 1, 0], [uint16(1), 1, 1, 0], 10
        );
    }

    // ------------------------------------------------------------ gas figures (see .gas-snapshot)

    function test_gas_minerCommit() public {
        bytes32 c = net.commitmentFor(1, m1, "d");
        vm.prank(m1);
        net.commitUpdate(1, c);
    }

    // ------------------------------------------------------------ consensus check vs sorting

    function testFuzz_medianCheck_matchesSort(uint16[8] memory s, uint64[8] memory w, uint8 n) public pure {
        uint256 k = bound(n, 1, 8);
        uint256[] memory col = new uint256[](k);
        uint256[] memory wt = new uint256[](k);
        for (uint256 i; i < k; ++i) {
            col[i] = s[i] % 10_001;
            wt[i] = w[i];
        }
        uint256 m = _refMedian(col, wt);
        assertTrue(ConsensusHarness.isMedian(col, wt, m), "sorted median accepted");
        if (m > 0) assertTrue(!ConsensusHarness.isMedian(col, wt, m - 1), "below rejected");
        assertTrue(!ConsensusHarness.isMedian(col, wt, m + 1) || _allWeightZero(wt), "above rejected");
    }

    function test_medianCheck_matchesSort_concrete() public pure {
        uint16[8] memory s = [uint16(10), 50, 20, 40, 30, 0, 0, 0];
        uint64[8] memory w = [uint64(1), 1, 5, 1, 1, 0, 0, 0];
        testFuzz_medianCheck_matchesSort(s, w, 5);
    }

    function _allWeightZero(uint256[] memory w) internal pure returns (bool) {
        for (uint256 i; i < w.length; ++i) {
            if (w[i] != 0) return false;
        }
        return true;
    }
}

library ConsensusHarness {
    function isMedian(uint256[] memory c, uint256[] memory w, uint256 m) internal pure returns (bool) {
        return Consensus.isWeightedMedian(c, w, m);
    }
}
