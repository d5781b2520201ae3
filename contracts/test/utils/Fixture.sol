// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.30;

import {BLS} from "solady/utils/ext/ithaca/BLS.sol";
import {ITesseraNetwork} from "../../src/ITesseraNetwork.sol";
import {TesseraNetwork} from "../../src/TesseraNetwork.sol";
import {NetworkState} from "../../src/NetworkState.sol";
import {TesseraToken} from "../../src/TesseraToken.sol";
import {TestBase} from "./Vm.sol";

/// @notice A deployed network plus helpers to register actors and drive rounds.
abstract contract Fixture is TestBase {
    TesseraNetwork internal net;
    TesseraToken internal token;

    uint256 internal constant MIN_MINER = 100 ether;
    uint256 internal constant MIN_VALIDATOR = 1_000 ether;
    uint256 internal constant EMISSION = 1_000 ether;
    uint64 internal constant UNBONDING = 50;
    uint64 internal constant PHASE = 10;

    function _params() internal pure returns (NetworkState.Params memory p) {
        p = NetworkState.Params({
            minMinerStake: MIN_MINER,
            minValidatorStake: MIN_VALIDATOR,
            unbondingBlocks: UNBONDING,
            commitBlocks: PHASE,
            revealBlocks: PHASE,
            scoreCommitBlocks: PHASE,
            scoreRevealBlocks: PHASE,
            emissionPerRound: EMISSION,
            validatorShareBps: 2_000,
            slashBps: 1_000,
            poolSupply: 1_000_000 ether,
            genesisSupply: 10_000_000 ether,
            genesisCheckpoint: keccak256("theta_1"),
            auditRateBps: 10_000,
            committeeSize: 0,
            vestingRounds: 0
        });
    }

    function _deploy() internal {
        _deployWith(_params());
    }

    function _deployWith(NetworkState.Params memory p) internal {
        vm.roll(100);
        net = new TesseraNetwork(p);
        token = net.token();
    }

    function _fund(address who, uint256 amount) internal {
        token.transfer(who, amount);
        vm.prank(who);
        token.approve(address(net), type(uint256).max);
    }

    function _miner(uint256 i) internal returns (address m) {
        m = address(uint160(0x1000 + i));
        _fund(m, MIN_MINER * 10);
        vm.prank(m);
        net.registerMiner(MIN_MINER);
    }

    // ---------------------------------------------------------------- BLS helpers (keys via precompiles)

    function _g1() internal pure returns (BLS.G1Point memory) {
        return BLS.G1Point(
            0x0000000000000000000000000000000017f1d3a73197d7942695638c4fa9ac0f,
            0xc3688c4f9774b905a14e3a3f171bac586c55e83ff97a1aeffb3af00adb22c6bb,
            0x0000000000000000000000000000000008b3f481e3aaa0f1a09e30ed741d8ae4,
            0xfcf5e095d5d00af600db18cb2c04b3edd03cc744a2888ae40caa232946c5e7e1
        );
    }

    function _pk(uint256 sk) internal view returns (BLS.G1Point memory) {
        BLS.G1Point[] memory pts = new BLS.G1Point[](1);
        bytes32[] memory sc = new bytes32[](1);
        pts[0] = _g1();
        sc[0] = bytes32(sk);
        return BLS.msm(pts, sc);
    }

    function _sign(uint256 sk, bytes memory message) internal view returns (BLS.G2Point memory) {
        BLS.G2Point[] memory pts = new BLS.G2Point[](1);
        bytes32[] memory sc = new bytes32[](1);
        pts[0] = BLS.hashToG2(message);
        sc[0] = bytes32(sk);
        return BLS.msm(pts, sc);
    }

    function _validatorKey(uint256 i) internal pure returns (uint256) {
        return 0xB15 + i * 7919;
    }

    function _validator(uint256 i) internal returns (address v) {
        return _validatorWithStake(i, MIN_VALIDATOR);
    }

    function _validatorWithStake(uint256 i, uint256 stake) internal returns (address v) {
        v = vm.addr(0xA11CE + i);
        _fund(v, stake * 2);
        uint256 sk = _validatorKey(i);
        BLS.G1Point memory pk = _pk(sk);
        BLS.G2Point memory pop = _sign(sk, net.popMessage(v, pk));
        vm.prank(v);
        net.registerValidator(stake, pk, pop);
    }

    // ---------------------------------------------------------------- round helpers

    function _round() internal view returns (uint256 r) {
        (uint64 round,,,,,) = net.state();
        r = round;
    }

    function _phase() internal view returns (ITesseraNetwork.Phase p) {
        (, p,,,,) = net.state();
    }

    function _advancePast() internal {
        vm.roll(net.phaseDeadline() + 1);
        net.advance();
    }

    function _commit(address m, uint256 r, bytes32 digest) internal {
        bytes32 c = net.commitmentFor(r, m, digest);
        vm.prank(m);
        net.commitUpdate(r, c);
    }

    function _sortAddrs(address[] memory a) internal pure returns (address[] memory) {
        for (uint256 i = 1; i < a.length; ++i) {
            address x = a[i];
            uint256 j = i;
            while (j > 0 && a[j - 1] > x) {
                a[j] = a[j - 1];
                --j;
            }
            a[j] = x;
        }
        return a;
    }

    /// @dev Lower weighted median by sorting (the reference the on-chain check is compared to).
    function _refMedian(uint256[] memory col, uint256[] memory w) internal pure returns (uint256) {
        uint256 n = col.length;
        uint256 total;
        for (uint256 i; i < n; ++i) {
            total += w[i];
        }
        if (total == 0) return 0;
        uint256[] memory idx = new uint256[](n);
        for (uint256 i; i < n; ++i) {
            idx[i] = i;
        }
        for (uint256 i = 1; i < n; ++i) {
            uint256 x = idx[i];
            uint256 j = i;
            while (j > 0 && col[idx[j - 1]] > col[x]) {
                idx[j] = idx[j - 1];
                --j;
            }
            idx[j] = x;
        }
        uint256 acc;
        for (uint256 k; k < n; ++k) {
            acc += w[idx[k]];
            if (2 * acc >= total) return col[idx[k]];
        }
        return col[idx[n - 1]];
    }

    /// @dev Runs the score phases for `vals` with the given score rows and finalizes with correct
    ///      medians. `reveal[i]` false leaves validator i unrevealed. Miners must be ascending.
    function _scoreAndFinalize(
        address[] memory miners,
        address[] memory vals,
        uint16[][] memory rows,
        bool[] memory reveal
    ) internal returns (uint16[] memory medians) {
        uint256 r = _round();
        if (_phase() == ITesseraNetwork.Phase.Commit) _advancePast();
        if (_phase() == ITesseraNetwork.Phase.Reveal) _advancePast();
        for (uint256 i; i < vals.length; ++i) {
            bytes32 salt = keccak256(abi.encode(i, r));
            {
                bytes32 c_ = net.scoreCommitmentFor(r, vals[i], rows[i], salt);
                vm.prank(vals[i]);
                net.commitScores(r, c_);
            }
        }
        _advancePast();
        uint256 nRev;
        for (uint256 i; i < vals.length; ++i) {
            if (!reveal[i]) continue;
            vm.prank(vals[i]);
            net.revealScores(r, rows[i], keccak256(abi.encode(i, r)));
            ++nRev;
        }
        vm.roll(net.phaseDeadline() + 1);
        // revealers ascending with their rows
        address[] memory rv = new address[](nRev);
        uint16[][] memory rs = new uint16[][](nRev);
        uint256[] memory w = new uint256[](nRev);
        uint256 k;
        for (uint256 i; i < vals.length; ++i) {
            if (!reveal[i]) continue;
            rv[k] = vals[i];
            rs[k] = rows[i];
            w[k] = net.scoreEntry(r, vals[i]).weight;
            ++k;
        }
        for (uint256 a = 1; a < nRev; ++a) {
            for (uint256 b = a; b > 0 && rv[b - 1] > rv[b]; --b) {
                (rv[b - 1], rv[b]) = (rv[b], rv[b - 1]);
                (rs[b - 1], rs[b]) = (rs[b], rs[b - 1]);
                (w[b - 1], w[b]) = (w[b], w[b - 1]);
            }
        }
        medians = _medians(r, miners, rv, rs, w);
        net.finalize(r, miners, rv, rs, medians);
    }

    /// @dev The consensus of each miner by sorting, on its committee's revealers where it is audited
    ///      (read from `auditDraw`, with the contract's fall-back to everyone when none of them revealed).
    function _medians(uint256 r, address[] memory miners, address[] memory rv, uint16[][] memory rs, uint256[] memory w)
        internal
        view
        returns (uint16[] memory medians)
    {
        medians = new uint16[](miners.length);
        uint256[] memory col = new uint256[](rv.length);
        for (uint256 j; j < miners.length; ++j) {
            (bool audited, uint256 committee) = net.auditDraw(r, miners[j]);
            uint256[] memory wj = new uint256[](rv.length);
            uint256 total;
            for (uint256 i; i < rv.length; ++i) {
                col[i] = rs[i][j];
                uint256 idx = net.accountOf(rv[i]).validatorIndex;
                if (!audited || (committee >> idx) & 1 == 1) {
                    wj[i] = w[i];
                    total += w[i];
                }
            }
            medians[j] = uint16(_refMedian(col, total == 0 ? w : wj));
        }
    }
}
