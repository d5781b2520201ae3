// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.30;

import {ITesseraNetwork} from "../src/ITesseraNetwork.sol";
import {TesseraNetwork} from "../src/TesseraNetwork.sol";
import {NetworkState} from "../src/NetworkState.sol";
import {Consensus} from "../src/Consensus.sol";
import {Fixture} from "./utils/Fixture.sol";

/// @notice The settlement rules of issue 26: vesting, fraud proofs that override the median, unanswered
///         audits, committees drawn from the seed, and the cost of a rejected proof.
contract SettlementTest is Fixture {
    address internal m1;
    address internal m2;
    address internal v1;
    address internal v2;
    address internal v3;

    function _setUp(uint16 rateBps, uint16 committee, uint16 vesting) internal {
        NetworkState.Params memory p = _params();
        p.auditRateBps = rateBps;
        p.committeeSize = committee;
        p.vestingRounds = vesting;
        _deployWith(p);
        m1 = _miner(1);
        m2 = _miner(2);
        v1 = _validator(1);
        v2 = _validator(2);
        v3 = _validator(3);
    }

    function _ms() internal view returns (address[] memory ms) {
        ms = new address[](2);
        ms[0] = m1;
        ms[1] = m2;
        ms = _sortAddrs(ms);
    }

    function _vs() internal view returns (address[] memory vs) {
        vs = new address[](3);
        vs[0] = v1;
        vs[1] = v2;
        vs[2] = v3;
    }

    /// rows[i] = (a_i, b) for validator i over the two sorted miners
    function _rows(uint16 a1, uint16 a2, uint16 a3, uint16 b) internal pure returns (uint16[][] memory rows) {
        rows = new uint16[][](3);
        uint16[3] memory a = [a1, a2, a3];
        for (uint256 i; i < 3; ++i) {
            rows[i] = new uint16[](2);
            rows[i][0] = a[i];
            rows[i][1] = b;
        }
    }

    function _all() internal pure returns (bool[] memory r) {
        r = new bool[](3);
        r[0] = true;
        r[1] = true;
        r[2] = true;
    }

    /// Both miners commit and every validator scores (a, b): a round paying both equally.
    function _payingRound(uint16 a) internal returns (address[] memory ms) {
        uint256 r = _round();
        ms = _ms();
        _commit(ms[0], r, keccak256(abi.encode("u", r, 0)));
        _commit(ms[1], r, keccak256(abi.encode("u", r, 1)));
        _scoreAndFinalize(ms, _vs(), _rows(a, a, a, 5_000), _all());
    }

    function _emptyRound() internal {
        uint256 r = _round();
        _advancePast();
        _advancePast();
        _advancePast();
        vm.roll(net.phaseDeadline() + 1);
        net.finalize(r, new address[](0), new address[](0), new uint16[][](0), new uint16[](0));
    }

    function _paid(address[] memory) internal pure returns (uint256) {
        return (EMISSION - EMISSION / 5) / 2; // two miners scored equally
    }

    // ------------------------------------------------------------ vesting

    function test_vesting_paysOnlyAfterKRounds() public {
        _setUp(10_000, 0, 2);
        address[] memory ms = _payingRound(5_000);
        uint256 pay = _paid(ms);
        assertEq(net.accountOf(ms[0]).owed, 0, "nothing owed at once");
        assertEq(net.unvestedOf(ms[0]), pay, "unvested");
        assertEq(net.totalUnvested(), 2 * pay, "total unvested");
        vm.prank(ms[0]);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NothingToWithdraw.selector, ms[0]));
        net.claim();
        _emptyRound(); // round 2
        vm.prank(ms[0]);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NothingToWithdraw.selector, ms[0]));
        net.claim();
        _emptyRound(); // round 3 = 1 + K finalized: round 1's pay vests
        uint256 before = token.balanceOf(ms[0]);
        vm.prank(ms[0]);
        net.claim();
        assertEq(token.balanceOf(ms[0]) - before, pay, "claimed after K rounds");
        assertEq(net.unvestedOf(ms[0]), 0, "none left");
        assertEq(net.totalUnvested(), pay, "the other miner's stays");
    }

    function test_vesting_rollsOverWhileMining() public {
        _setUp(10_000, 0, 2);
        address[] memory ms = _payingRound(5_000); // round 1
        uint256 pay = _paid(ms);
        _payingRound(5_000); // round 2
        assertEq(net.accountOf(ms[0]).owed, 0, "round 1 not vested after round 2");
        _payingRound(5_000); // round 3: round 1's slot is reused, its pay vests into owed
        assertEq(net.accountOf(ms[0]).owed, pay, "round 1 vested");
        assertEq(net.unvestedOf(ms[0]), 2 * pay, "rounds 2 and 3 unvested");
        // commitAndClaim pays exactly the vested part
        uint256 before = token.balanceOf(ms[0]);
        bytes32 c = net.commitmentFor(4, ms[0], "x");
        vm.prank(ms[0]);
        net.commitAndClaim(4, c);
        assertEq(token.balanceOf(ms[0]) - before, pay, "vested only");
    }

    /// A miner that stops committing for K rounds then commits again with commitAndClaim is paid its
    /// vested pay (its slots were not rolled over by later pay, so only a sweep vests them), like claim.
    function test_commitAndClaim_vestsLikeClaim() public {
        _setUp(10_000, 0, 2);
        address[] memory ms = _payingRound(5_000); // round 1
        uint256 pay = _paid(ms);
        _emptyRound(); // round 2
        _emptyRound(); // round 3 = 1 + K finalized: round 1's pay has vested, still in its slot
        assertEq(net.accountOf(ms[0]).owed, 0, "not swept yet");
        assertEq(net.unvestedOf(ms[0]), 0, "vested");
        uint256 before = token.balanceOf(ms[0]);
        uint256 unvestedBefore = net.totalUnvested();
        bytes32 c = net.commitmentFor(4, ms[0], "x");
        vm.prank(ms[0]);
        net.commitAndClaim(4, c);
        assertEq(token.balanceOf(ms[0]) - before, pay, "vested pay claimed");
        assertEq(net.totalUnvested(), unvestedBefore - pay, "left the unvested total");
        assertEq(net.accountOf(ms[0]).lastCommitRound, 4, "committed");
        vm.prank(ms[0]);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NothingToWithdraw.selector, ms[0]));
        net.claim();
    }

    /// commitAndClaim pays nothing that has not vested: a proof confirmed afterwards still forfeits it.
    function test_commitAndClaim_leavesUnvestedForfeitable() public {
        _setUp(10_000, 0, 2);
        address[] memory ms = _payingRound(5_000); // round 1
        uint256 pay = _paid(ms);
        uint256 before = token.balanceOf(ms[0]);
        bytes32 c = net.commitmentFor(2, ms[0], "x");
        vm.prank(ms[0]);
        net.commitAndClaim(2, c);
        assertEq(token.balanceOf(ms[0]), before, "round 1 not vested: nothing paid");
        assertEq(net.unvestedOf(ms[0]), pay, "still vesting");
        vm.prank(v1);
        net.proposeSlash(ms[0], 1, "late");
        vm.prank(v2);
        net.voteSlash("late", true);
        assertTrue(net.slashProposal("late").executed, "confirmed");
        assertEq(net.unvestedOf(ms[0]), 0, "forfeited");
        assertEq(net.accountOf(ms[0]).owed, 0, "nothing owed");
    }

    // ------------------------------------------------------------ fraud proofs override the median

    function test_fraudProof_beforeSettlement_zeroesPayWhateverTheMedian() public {
        _setUp(10_000, 0, 0);
        address[] memory ms = _ms();
        _commit(ms[0], 1, "a");
        _commit(ms[1], 1, "b");
        _advancePast();
        _advancePast();
        // v1 proves ms[0] faked; v2 and v3 (who replayed other segments) still score it high
        vm.prank(v1);
        net.proposeSlash(ms[0], 1, "proof");
        _scoreAndFinalize(ms, _vs(), _rows(0, 9_000, 9_000, 5_000), _all());
        assertEq(net.accountOf(ms[0]).owed, 0, "paid nothing despite median 9000");
        uint256 held = net.slashProposal("proof").held;
        assertTrue(held > 0, "pay held");
        assertEq(net.totalUnvested(), held, "held counted");
        uint256 poolBefore = net.pool();
        vm.prank(v2);
        net.voteSlash("proof", true); // v1 + v2 hold 2/3
        assertTrue(net.slashProposal("proof").executed, "confirmed");
        assertEq(net.pool(), poolBefore + held, "held pay forfeited to the pool");
        assertEq(net.accountOf(ms[0]).stake, MIN_MINER - MIN_MINER / 10, "slashed slashBps");
        assertEq(net.totalUnvested(), 0, "nothing held");
    }

    function test_fraudProof_confirmedBeforeSettlement_keepsPayInPool() public {
        _setUp(10_000, 0, 0);
        address[] memory ms = _ms();
        _commit(ms[0], 1, "a");
        _commit(ms[1], 1, "b");
        vm.prank(v1);
        net.proposeSlash(ms[0], 1, "proof");
        vm.prank(v2);
        net.voteSlash("proof", true);
        assertTrue(net.slashProposal("proof").executed, "confirmed");
        _scoreAndFinalize(ms, _vs(), _rows(9_000, 9_000, 9_000, 5_000), _all());
        assertEq(net.accountOf(ms[0]).owed, 0, "not paid");
        assertEq(net.totalUnvested(), 0, "nothing held");
        assertEq(net.accountOf(ms[1]).owed, (EMISSION - EMISSION / 5) * 5_000 / 14_000, "the other is paid");
    }

    function test_fraudProof_afterSettlement_holdsAllUnvested() public {
        _setUp(10_000, 0, 3);
        address[] memory ms = _payingRound(5_000); // round 1
        _payingRound(5_000); // round 2
        uint256 pay = _paid(ms);
        assertEq(net.unvestedOf(ms[0]), 2 * pay, "two rounds unvested");
        vm.prank(v1);
        net.proposeSlash(ms[0], 1, "late");
        assertEq(net.slashProposal("late").held, 2 * pay, "rounds 1 and 2 held, not only the proof's");
        assertEq(net.unvestedOf(ms[0]), 0, "nothing left to vest while the vote is open");
        assertEq(net.totalUnvested(), 4 * pay, "held pay still counted");
        uint256 poolBefore = net.pool();
        vm.prank(v2);
        net.voteSlash("late", true);
        assertTrue(net.slashProposal("late").executed, "confirmed");
        assertEq(net.pool(), poolBefore + 2 * pay, "held and unvested forfeited");
        assertEq(net.unvestedOf(ms[0]), 0, "nothing left to vest");
    }

    function test_fraudProof_rejected_releasesPayAndCostsProposer() public {
        _setUp(10_000, 0, 3);
        address[] memory ms = _payingRound(5_000);
        uint256 pay = _paid(ms);
        vm.prank(v1);
        net.proposeSlash(ms[0], 1, "lie");
        vm.prank(v2);
        net.voteSlash("lie", false);
        assertTrue(!net.slashProposal("lie").rejected, "one third is not enough");
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.AlreadyVoted.selector, bytes32("lie"), v1));
        net.voteSlash("lie", false);
        vm.prank(v3);
        net.voteSlash("lie", false);
        NetworkState.SlashProposal memory p = net.slashProposal("lie");
        assertTrue(p.rejected && !p.executed, "rejected");
        assertEq(net.accountOf(ms[0]).owed, pay, "held pay released");
        assertEq(net.accountOf(ms[0]).stake, MIN_MINER, "miner untouched");
        assertEq(net.accountOf(v1).stake, MIN_VALIDATOR - MIN_VALIDATOR / 10, "the liar pays");
        vm.prank(v2);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.EvidenceUsed.selector, bytes32("lie")));
        net.voteSlash("lie", true);
    }

    function test_fraudProof_reverts() public {
        _setUp(10_000, 0, 0);
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.RoundNotReached.selector, 2, 1));
        net.proposeSlash(m1, 2, "e");
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.RoundNotReached.selector, 0, 1));
        net.proposeSlash(m1, 0, "e");
        vm.prank(v1);
        net.proposeSlash(m1, 1, "e");
        vm.prank(v2);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.EvidenceUsed.selector, bytes32("e")));
        net.proposeSlash(m2, 1, "e");
        vm.prank(v2);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.UnknownEvidence.selector, bytes32("none")));
        net.voteSlash("none", false);
        vm.prank(m1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NotRole.selector, m1, ITesseraNetwork.Role.Validator));
        net.voteSlash("e", false);
    }

    // ------------------------------------------------------------ committees and unanswered audits

    function test_committee_settlesAuditedMinerOnItsCommitteeOnly() public {
        _setUp(10_000, 1, 0);
        address[] memory ms = _ms();
        _commit(ms[0], 1, "a");
        _commit(ms[1], 1, "b");
        _advancePast();
        _advancePast();
        (bool audited, uint256 committee) = net.auditDraw(1, ms[0]);
        assertTrue(audited, "q = 1");
        assertEq(_popcount(committee), 1, "c = 1");
        // the committee member scores 0, the two others 9000: the median is the committee's 0
        address[] memory vs = _vs();
        uint16[3] memory a;
        for (uint256 i; i < 3; ++i) {
            a[i] = (committee >> net.accountOf(vs[i]).validatorIndex) & 1 == 1 ? 0 : 9_000;
        }
        uint16[] memory med = _scoreAndFinalize(ms, vs, _rows(a[0], a[1], a[2], 5_000), _all());
        assertEq(med[0], 0, "committee's score");
        assertEq(net.accountOf(ms[0]).owed, 0, "unpaid");
    }

    function test_committee_allValidatorsByDefault() public {
        _setUp(10_000, 0, 0);
        _commit(m1, 1, "a");
        _advancePast();
        _advancePast();
        (bool audited, uint256 committee) = net.auditDraw(1, m1);
        assertTrue(audited, "audited");
        assertEq(committee, 7, "all three");
        assertEq(net.drawSize(1), 3, "n at the seed");
    }

    function test_auditDraw_revertsBeforeSeed() public {
        _setUp(10_000, 1, 0);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.SeedNotFixed.selector, 1));
        net.auditDraw(1, m1);
    }

    function test_unanswered_committeeQuorumSlashesLikeAFake() public {
        _setUp(10_000, 2, 2);
        address[] memory ms = _payingRound(5_000); // round 1 paid, unvested
        uint256 pay = _paid(ms);
        (, uint256 committee) = net.auditDraw(1, ms[0]);
        address[] memory vs = _vs();
        address outsider;
        address[2] memory members;
        uint256 k;
        for (uint256 i; i < 3; ++i) {
            if ((committee >> net.accountOf(vs[i]).validatorIndex) & 1 == 1) members[k++] = vs[i];
            else outsider = vs[i];
        }
        assertEq(k, 2, "c = 2");
        vm.prank(outsider);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NotInCommittee.selector, outsider, ms[0], 1));
        net.reportUnanswered(ms[0], 1);
        vm.prank(members[0]);
        net.reportUnanswered(ms[0], 1);
        bytes32 ev = net.unansweredEvidence(ms[0], 1);
        assertEq(net.slashProposal(ev).held, pay, "round 1 held");
        assertTrue(!net.slashProposal(ev).executed, "one of two is not 2/3");
        vm.prank(members[1]);
        net.reportUnanswered(ms[0], 1);
        assertTrue(net.slashProposal(ev).executed, "committee quorum");
        assertEq(net.accountOf(ms[0]).stake, MIN_MINER - MIN_MINER / 10, "slashed like a fake");
        assertEq(net.unvestedOf(ms[0]), 0, "forfeited");
        vm.prank(outsider);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.EvidenceUsed.selector, ev));
        net.reportUnanswered(ms[0], 1);
    }

    /// The committee member, the witness and the third validator of miner 0's audit in round 1 (c = 1).
    function _roles(address miner) internal view returns (address member, address witness, address other) {
        return _rolesAt(1, miner);
    }

    function _rolesAt(uint256 round, address miner)
        internal
        view
        returns (address member, address witness, address other)
    {
        (, uint256 committee) = net.auditDraw(round, miner);
        uint256 witnesses = net.auditWitnesses(round, miner);
        assertEq(committee & witnesses, 0, "disjoint");
        address[] memory vs = _vs();
        for (uint256 i; i < 3; ++i) {
            uint256 bit = uint256(1) << net.accountOf(vs[i]).validatorIndex;
            if (committee & bit != 0) member = vs[i];
            else if (witnesses & bit != 0) witness = vs[i];
            else other = vs[i];
        }
        assertTrue(member != address(0) && witness != address(0) && other != address(0), "1 + 1 + 1");
    }

    function test_unanswered_liarOfACommitteeOfOneCannotSlash() public {
        _setUp(10_000, 1, 2);
        address[] memory ms = _payingRound(5_000); // round 1 paid, unvested
        uint256 pay = _paid(ms);
        (address liar, address witness, address other) = _roles(ms[0]);
        vm.prank(liar);
        net.reportUnanswered(ms[0], 1);
        bytes32 ev = net.unansweredEvidence(ms[0], 1);
        assertEq(net.slashProposal(ev).held, pay, "round 1 held");
        assertTrue(!net.slashProposal(ev).executed, "the committee of one is half of its electorate");
        // neither committee nor witness: refused, for and against
        vm.prank(other);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NotInCommittee.selector, other, ms[0], 1));
        net.voteSlash(ev, false);
        vm.prank(other);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NotInCommittee.selector, other, ms[0], 1));
        net.reportUnanswered(ms[0], 1);
        // the witness was served and checked the states: contested (1/2 for, 1/2 against)
        vm.prank(witness);
        net.voteSlash(ev, false);
        assertTrue(!net.slashProposal(ev).executed && !net.slashProposal(ev).rejected, "contested");
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.ReportStillOpen.selector, ev, 3));
        net.expireReport(ev);
        _emptyRound(); // round 2 settled: now round 3, the last one of the window
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.ReportStillOpen.selector, ev, 3));
        net.expireReport(ev);
        _emptyRound(); // now round 4
        vm.prank(witness);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.VotingClosed.selector, ev, 3));
        net.voteSlash(ev, true);
        uint256 owed = net.accountOf(ms[0]).owed;
        uint256 liarStake = net.accountOf(liar).stake;
        vm.prank(ms[1]); // anyone
        net.expireReport(ev);
        assertEq(net.accountOf(ms[0]).owed, owed + pay, "the held pay is released");
        assertEq(net.accountOf(ms[0]).stake, MIN_MINER, "not slashed");
        assertEq(net.accountOf(liar).stake, liarStake, "nobody slashed on a contested report");
        assertTrue(net.slashProposal(ev).rejected, "closed");
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.EvidenceUsed.selector, ev));
        net.expireReport(ev);
        // the round-1 slot vested meanwhile: the miner claims its whole pay
        assertEq(net.unvestedOf(ms[0]), 0, "nothing left frozen");
    }

    function test_unanswered_withholderSlashedByCommitteeAndWitness() public {
        _setUp(10_000, 1, 2);
        address[] memory ms = _payingRound(5_000);
        (address member, address witness,) = _roles(ms[0]);
        vm.prank(member);
        net.reportUnanswered(ms[0], 1);
        bytes32 ev = net.unansweredEvidence(ms[0], 1);
        // the witness was not served either
        vm.prank(witness);
        net.voteSlash(ev, true);
        assertTrue(net.slashProposal(ev).executed, "committee + witness");
        assertEq(net.accountOf(ms[0]).stake, MIN_MINER - MIN_MINER / 10, "slashed like a fake");
        assertEq(net.unvestedOf(ms[0]), 0, "forfeited");
        assertEq(net.accountOf(ms[0]).owed, 0, "nothing paid");
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.UnknownEvidence.selector, bytes32(0)));
        net.expireReport(bytes32(0));
    }

    function test_unanswered_rejectedByTwoThirdsSlashesTheProposer() public {
        _setUp(10_000, 1, 2);
        address[] memory ms = _payingRound(5_000);
        (address liar, address witness,) = _roles(ms[0]);
        // the witness holds twice the liar's stake: its "served" alone is 2/3 against
        uint256 extra = net.accountOf(liar).stake;
        vm.prank(witness);
        net.addStake(extra);
        vm.prank(liar);
        net.reportUnanswered(ms[0], 1);
        bytes32 ev = net.unansweredEvidence(ms[0], 1);
        uint256 liarStake = net.accountOf(liar).stake;
        vm.prank(witness);
        net.voteSlash(ev, false);
        assertTrue(net.slashProposal(ev).rejected, "rejected");
        assertEq(net.accountOf(liar).stake, liarStake - liarStake / 10, "the proposer pays");
        assertEq(net.accountOf(ms[0]).owed, _paid(ms), "released");
    }

    function test_unanswered_expiryReleasesNothingOfAProvenFake() public {
        _setUp(10_000, 1, 2);
        address[] memory ms = _payingRound(5_000);
        (address member, address witness, address other) = _roles(ms[0]);
        vm.prank(member);
        net.reportUnanswered(ms[0], 1);
        bytes32 ev = net.unansweredEvidence(ms[0], 1);
        // the witness was served a fake: its fraud proof, confirmed by 2/3 of all validators
        bytes32 proof = keccak256("fake");
        vm.prank(witness);
        net.proposeSlash(ms[0], 1, proof);
        vm.prank(other);
        net.voteSlash(proof, true);
        assertTrue(net.slashProposal(proof).executed, "proven");
        assertEq(net.totalUnvested(), net.unvestedOf(ms[1]), "the report's held pay forfeited with the proof");
        _emptyRound();
        _emptyRound();
        uint256 owed = net.accountOf(ms[0]).owed;
        net.expireReport(ev);
        assertEq(net.accountOf(ms[0]).owed, owed, "nothing released to a proven fake");
    }

    // ------------------------------------------------------------ all unvested pay held while a vote is open

    /// token balance = stakes + unbonding + owed + pool + unvested and held pay (Invariants.t.sol's)
    function _checkBalance() internal view {
        address[5] memory a = [m1, m2, v1, v2, v3];
        uint256 owed;
        for (uint256 i; i < a.length; ++i) {
            owed += net.accountOf(a[i]).owed;
        }
        assertEq(
            token.balanceOf(address(net)),
            net.totalStake() + net.totalUnbonding() + owed + net.pool() + net.totalUnvested(),
            "balance"
        );
    }

    /// K = 2: rounds 1 and 2 paid, miner 0 hangs on its round-2 audit and is reported in round 3.
    function _reportedWithTwoRoundsUnvested()
        internal
        returns (address[] memory ms, uint256 pay, bytes32 ev, address member, address witness, address other)
    {
        _setUp(10_000, 1, 2);
        ms = _payingRound(5_000); // round 1
        _payingRound(5_000); // round 2
        pay = _paid(ms);
        (member, witness, other) = _rolesAt(2, ms[0]);
        vm.prank(member);
        net.reportUnanswered(ms[0], 2);
        ev = net.unansweredEvidence(ms[0], 2);
    }

    /// Round 1's pay would vest when round 3 settles, inside the report's window: held, it is forfeited
    /// when the witness confirms in round 4 (before the fix the miner kept it: issue 38).
    function test_unanswered_payVestingDuringTheVoteIsForfeited() public {
        (address[] memory ms, uint256 pay, bytes32 ev,, address witness,) = _reportedWithTwoRoundsUnvested();
        assertEq(net.slashProposal(ev).held, 2 * pay, "rounds 1 and 2 held");
        assertEq(net.unvestedOf(ms[0]), 0, "nothing left to vest");
        _checkBalance();
        _payingRound(5_000); // round 3 settles: round 1 would vest now
        vm.prank(ms[0]);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NothingToWithdraw.selector, ms[0]));
        net.claim();
        assertEq(net.unvestedOf(ms[0]), pay, "round 3 vesting");
        uint256 poolBefore = net.pool();
        vm.prank(witness); // round 4, last of the window
        net.voteSlash(ev, true);
        assertTrue(net.slashProposal(ev).executed, "confirmed");
        assertEq(net.pool(), poolBefore + 3 * pay, "rounds 1, 2 (held) and 3 (unvested) forfeited");
        assertEq(net.accountOf(ms[0]).owed, 0, "nothing owed");
        assertEq(net.accountOf(ms[0]).stake, MIN_MINER - MIN_MINER / 10, "slashed");
        assertEq(net.totalUnvested(), net.unvestedOf(ms[1]), "only the other miner's pay vests");
        _checkBalance();
    }

    function test_unanswered_expiryReleasesAllHeldPay() public {
        (address[] memory ms, uint256 pay, bytes32 ev,, address witness,) = _reportedWithTwoRoundsUnvested();
        vm.prank(witness);
        net.voteSlash(ev, false); // served: contested
        _payingRound(5_000); // round 3
        _emptyRound(); // round 4
        assertEq(net.accountOf(ms[0]).owed, 0, "held, not vested");
        vm.expectEmit();
        emit ITesseraNetwork.ReportExpired(ev, ms[0], 2, 2 * pay);
        net.expireReport(ev);
        assertEq(net.accountOf(ms[0]).owed, 2 * pay, "rounds 1 and 2 released");
        assertEq(net.unvestedOf(ms[0]), pay, "round 3 vests as usual");
        assertEq(net.accountOf(ms[0]).stake, MIN_MINER, "not slashed");
        _checkBalance();
    }

    function test_unanswered_rejectionReleasesAllHeldPay() public {
        (address[] memory ms, uint256 pay, bytes32 ev, address liar, address witness,) =
            _reportedWithTwoRoundsUnvested();
        uint256 extra = net.accountOf(liar).stake; // read before the prank
        vm.prank(witness);
        net.addStake(extra); // its "served" alone is 2/3 against
        vm.prank(witness);
        net.voteSlash(ev, false);
        assertTrue(net.slashProposal(ev).rejected, "rejected");
        assertEq(net.accountOf(ms[0]).owed, 2 * pay, "rounds 1 and 2 released");
        assertEq(net.unvestedOf(ms[0]), 0, "nothing put back to vest");
        _checkBalance();
    }

    /// A second proposal holds what is unvested then; the hold is released only when the last open one
    /// closes unconfirmed.
    function test_hold_releasedWhenTheLastOpenProposalCloses() public {
        (address[] memory ms, uint256 pay, bytes32 ev, address member, address witness, address other) =
            _reportedWithTwoRoundsUnvested();
        _payingRound(5_000); // round 3, vesting
        vm.prank(other);
        net.proposeSlash(ms[0], 3, "lie");
        assertEq(net.slashProposal("lie").held, pay, "round 3 held by the second");
        vm.prank(witness);
        net.voteSlash("lie", false);
        vm.prank(member);
        net.voteSlash("lie", false);
        assertTrue(net.slashProposal("lie").rejected, "the proof is rejected");
        assertEq(net.accountOf(ms[0]).owed, 0, "the report still holds everything");
        vm.prank(witness);
        net.voteSlash(ev, false); // contested
        _emptyRound(); // round 5
        net.expireReport(ev);
        assertEq(net.accountOf(ms[0]).owed, 3 * pay, "all three rounds released by the last one");
        _checkBalance();
    }

    /// A confirmed proof about another round forfeits what an open report holds: its expiry releases nothing.
    function test_hold_forfeitedByAConfirmedProofOfAnotherRound() public {
        (address[] memory ms, uint256 pay, bytes32 ev,, address witness, address other) =
            _reportedWithTwoRoundsUnvested();
        _payingRound(5_000); // round 3
        uint256 poolBefore = net.pool();
        vm.prank(other);
        net.proposeSlash(ms[0], 3, "fake");
        vm.prank(witness);
        net.voteSlash("fake", true);
        assertTrue(net.slashProposal("fake").executed, "proven");
        assertEq(net.pool(), poolBefore + 3 * pay, "all held pay forfeited");
        vm.prank(witness);
        net.voteSlash(ev, false);
        _emptyRound(); // round 4
        _emptyRound(); // round 5
        net.expireReport(ev);
        assertEq(net.accountOf(ms[0]).owed, 0, "nothing released to a proven fake");
        _checkBalance();
    }

    function test_unanswered_reportAfterTheWindowRefused() public {
        _setUp(10_000, 1, 2);
        address[] memory ms = _payingRound(5_000);
        (address member,,) = _roles(ms[0]);
        _emptyRound();
        _emptyRound(); // now round 4
        bytes32 ev = net.unansweredEvidence(ms[0], 1);
        vm.prank(member);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.VotingClosed.selector, ev, 3));
        net.reportUnanswered(ms[0], 1);
    }

    function testFuzz_witnessDraw(bytes32 seed, address miner, uint8 n, uint8 size) public pure {
        uint256 nn = bound(n, 1, 256);
        uint256 c = bound(size, 0, nn + 1);
        (, uint256 committee) = Consensus.auditDraw(seed, miner, nn, 10_000, c);
        uint256 w = Consensus.witnessDraw(seed, miner, nn, committee, c);
        assertEq(committee & w, 0, "disjoint");
        uint256 members = _popcount(committee);
        uint256 expect = c == 0 || members >= nn ? 0 : (c < nn - members ? c : nn - members);
        assertEq(_popcount(w), expect, "min(c, n - c) witnesses");
        if (nn < 256) assertEq(w >> nn, 0, "indices below n");
    }

    function test_unanswered_revertsWhenNotAudited() public {
        _setUp(0, 1, 0);
        _commit(m1, 1, "a");
        _advancePast();
        _advancePast();
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NotAudited.selector, m1, 1));
        net.reportUnanswered(m1, 1);
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(ITesseraNetwork.NotRole.selector, v2, ITesseraNetwork.Role.Miner));
        net.reportUnanswered(v2, 1);
    }

    // ------------------------------------------------------------ the draw itself

    function _popcount(uint256 x) internal pure returns (uint256 c) {
        for (; x != 0; x &= x - 1) {
            ++c;
        }
    }

    function _checkDraw(bytes32 seed, address miner, uint256 n, uint256 rate, uint256 size) internal pure {
        (bool audited, uint256 committee) = Consensus.auditDraw(seed, miner, n, rate, size);
        if (rate >= 10_000) assertTrue(audited, "q = 1 audits all");
        if (rate == 0) assertTrue(!audited, "q = 0 audits none");
        if (!audited || n == 0) {
            assertEq(committee, 0, "no committee");
            return;
        }
        uint256 want = size == 0 || size >= n ? n : size;
        assertEq(_popcount(committee), want, "committee size");
        if (n < 256) assertEq(committee >> n, 0, "indices below n");
    }

    function testFuzz_auditDraw_sizeAndRange(bytes32 seed, address miner, uint256 n, uint256 rate, uint256 size)
        public
        pure
    {
        _checkDraw(seed, miner, bound(n, 0, 256), bound(rate, 0, 10_000), bound(size, 0, 40));
    }

    function test_auditDraw_sizeAndRange_concrete() public pure {
        _checkDraw(keccak256("s"), address(0xBEEF), 3, 10_000, 1);
        _checkDraw(keccak256("s"), address(0xBEEF), 256, 5_000, 7);
        _checkDraw(keccak256("s"), address(0xBEEF), 256, 10_000, 0);
        _checkDraw(keccak256("s"), address(0xBEEF), 0, 10_000, 3);
        _checkDraw(keccak256("t"), address(0xCAFE), 5, 0, 2);
    }
}
