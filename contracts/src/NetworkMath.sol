// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.30;

import {BLS} from "solady/utils/ext/ithaca/BLS.sol";
import {Consensus} from "./Consensus.sol";

/// @title NetworkMath
/// @notice The network's stateless computations as a contract: the {Consensus} math of a round and the
///         BLS pairing check. `TesseraNetwork` creates one in its constructor and calls it (STATICCALL)
///         once per `finalize`, certificate and validator registration, which keeps the network's
///         runtime code under the EIP-170 limit (24,576 bytes) since issue 26 added audits, vesting and
///         proof votes.
contract NetworkMath {
    /// @notice A submitted median is not the stake-weighted median of its (committee's) column.
    error BadMedian(uint256 index, uint256 median);

    /// @notice What `finalize` needs settled.
    struct Round {
        bytes32 seed; // the round seed (audit draw)
        uint256 n; // validators registered when the seed was fixed
        uint256 rateBps; // q
        uint256 size; // c
        address[] miners; // committed miners, ascending
        uint256[] indices; // validator index of each revealer (empty: every miner settled on everyone)
        uint256[] weights; // revealers' weights
        uint256 minerBudget;
        uint256 validatorBudget;
    }

    /// @notice Checks each submitted median (on its committee where the miner is audited and `indices`
    ///         is given) and computes the payouts.
    /// @return m The medians, widened.
    /// @return minerPay Each miner's pay.
    /// @return validatorPay Each revealer's pay.
    function settle(Round calldata r, uint16[][] calldata scores, uint16[] calldata medians)
        external
        pure
        returns (uint256[] memory m, uint256[] memory minerPay, uint256[] memory validatorPay)
    {
        m = new uint256[](medians.length);
        uint256[] memory weights = r.weights;
        uint256[] memory indices = r.indices;
        uint256[] memory column = new uint256[](scores.length);
        for (uint256 j; j < medians.length; ++j) {
            for (uint256 i; i < scores.length; ++i) {
                column[i] = scores[i][j];
            }
            uint256[] memory w = weights;
            if (indices.length != 0) {
                (bool audited, uint256 committee) = Consensus.auditDraw(r.seed, r.miners[j], r.n, r.rateBps, r.size);
                if (audited) w = Consensus.restrict(weights, indices, committee);
            }
            m[j] = medians[j];
            if (!Consensus.isWeightedMedian(column, w, m[j])) revert BadMedian(j, m[j]);
        }
        minerPay = Consensus.minerPayouts(m, r.minerBudget);
        uint256[] memory closeness = new uint256[](scores.length);
        uint256[] memory row = new uint256[](m.length);
        for (uint256 i; i < scores.length; ++i) {
            for (uint256 j; j < m.length; ++j) {
                row[j] = scores[i][j];
            }
            closeness[i] = Consensus.closeness(row, m);
        }
        validatorPay = Consensus.validatorPayouts(weights, closeness, r.validatorBudget);
    }

    /// @notice `Consensus.auditDraw`, for the network's view and its committee checks.
    function auditDraw(bytes32 seed, address miner, uint256 n, uint256 rateBps, uint256 size)
        external
        pure
        returns (bool audited, uint256 committee)
    {
        return Consensus.auditDraw(seed, miner, n, rateBps, size);
    }

    /// @notice `Consensus.witnessDraw`: the witnesses of an unanswered-audit report.
    function witnessDraw(bytes32 seed, address miner, uint256 n, uint256 committee, uint256 size)
        external
        pure
        returns (uint256 witnesses)
    {
        return Consensus.witnessDraw(seed, miner, n, committee, size);
    }

    /// @notice Whether `sig` is a BLS (G2Basic, hash-to-G2 with the NUL DST) signature of `message` by `pk`.
    function blsVerify(BLS.G1Point calldata pk, bytes calldata message, BLS.G2Point calldata sig)
        external
        view
        returns (bool)
    {
        BLS.G1Point[] memory g1 = new BLS.G1Point[](2);
        BLS.G2Point[] memory g2 = new BLS.G2Point[](2);
        g1[0] = BLS.G1Point(
            0x0000000000000000000000000000000017f1d3a73197d7942695638c4fa9ac0f,
            0xc3688c4f9774b905a14e3a3f171bac586c55e83ff97a1aeffb3af00adb22c6bb,
            0x00000000000000000000000000000000114d1d6855d545a8aa7d76c8cf2e21f2,
            0x67816aef1db507c96655b9d5caac42364e6f38ba0ecb751bad54dcd6b939c2ca
        ); // -G1
        g1[1] = pk;
        g2[0] = sig;
        g2[1] = BLS.hashToG2(message);
        return BLS.pairing(g1, g2);
    }
}
