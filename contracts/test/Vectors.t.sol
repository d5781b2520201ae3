// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.30;

import {Consensus} from "../src/Consensus.sol";
import {TestBase} from "./utils/Vm.sol";

/// @notice Replays the vectors written by the Python reference (protocol/rounds/consensus.py): medians and
///         payouts must agree to the wei. Regenerate with `npm run vectors`.
contract VectorsTest is TestBase {
    function _key(uint256 i, string memory field) internal pure returns (string memory) {
        return string.concat(".cases[", vm.toString(i), "].", field);
    }

    function test_pythonVectors_agreeToTheWei() public view {
        string memory json = vm.readFile("test/vectors/consensus.json");
        uint256 count = vm.parseJsonUint(json, ".count");
        assertTrue(count >= 40, "too few vectors");
        for (uint256 c; c < count; ++c) {
            uint256 nv = vm.parseJsonUint(json, _key(c, "n_validators"));
            uint256 nm = vm.parseJsonUint(json, _key(c, "n_miners"));
            uint256[] memory flat = vm.parseJsonUintArray(json, _key(c, "scores"));
            uint256[] memory weights = vm.parseJsonUintArray(json, _key(c, "weights"));
            uint256[] memory medians = vm.parseJsonUintArray(json, _key(c, "medians"));
            uint256[] memory minerPay = vm.parseJsonUintArray(json, _key(c, "miner_pay"));
            uint256[] memory valPay = vm.parseJsonUintArray(json, _key(c, "validator_pay"));
            uint256 budget = vm.parseJsonUint(json, _key(c, "budget"));
            uint256 bps = vm.parseJsonUint(json, _key(c, "validator_share_bps"));
            uint256[] memory committees = vm.parseJsonUintArray(json, _key(c, "committees"));
            assertEq(flat.length, nv * nm, "shape");
            uint256[] memory col = new uint256[](nv);
            uint256[] memory positions = new uint256[](nv);
            for (uint256 i; i < nv; ++i) {
                positions[i] = i;
            }
            for (uint256 j; j < nm; ++j) {
                for (uint256 i; i < nv; ++i) {
                    col[i] = flat[i * nm + j];
                }
                uint256[] memory w = Consensus.restrict(weights, positions, committees[j]);
                assertTrue(Consensus.isWeightedMedian(col, w, medians[j]), "median rejected");
                if (medians[j] > 0) assertTrue(!Consensus.isWeightedMedian(col, w, medians[j] - 1), "lower");
            }
            uint256 vBudget = budget * bps / Consensus.BPS;
            uint256[] memory mp = Consensus.minerPayouts(medians, budget - vBudget);
            for (uint256 j; j < nm; ++j) {
                assertEq(mp[j], minerPay[j], "miner pay");
            }
            uint256[] memory closeness = new uint256[](nv);
            uint256[] memory row = new uint256[](nm);
            for (uint256 i; i < nv; ++i) {
                for (uint256 j; j < nm; ++j) {
                    row[j] = flat[i * nm + j];
                }
                closeness[i] = Consensus.closeness(row, medians);
            }
            uint256[] memory vp = Consensus.validatorPayouts(weights, closeness, vBudget);
            for (uint256 i; i < nv; ++i) {
                assertEq(vp[i], valPay[i], "validator pay");
            }
        }
    }

    /// The audit and witness draws of protocol/rounds/audits.py and `Consensus.auditDraw` /
    /// `Consensus.witnessDraw` agree on every vector.
    function test_auditDrawVectors_agree() public view {
        string memory json = vm.readFile("test/vectors/audits.json");
        uint256 count = vm.parseJsonUint(json, ".count");
        assertTrue(count >= 80, "too few vectors");
        uint256 withWitnesses;
        for (uint256 c; c < count; ++c) {
            bytes32 seed = vm.parseJsonBytes32(json, _key(c, "seed"));
            address miner = vm.parseJsonAddress(json, _key(c, "miner"));
            uint256 n = vm.parseJsonUint(json, _key(c, "n"));
            uint256 size = vm.parseJsonUint(json, _key(c, "size"));
            (bool audited, uint256 committee) =
                Consensus.auditDraw(seed, miner, n, vm.parseJsonUint(json, _key(c, "rate_bps")), size);
            assertEq(audited ? 1 : 0, vm.parseJsonUint(json, _key(c, "audited")), "audited");
            assertEq(committee, vm.parseJsonUint(json, _key(c, "committee")), "committee");
            uint256 witnesses = Consensus.witnessDraw(seed, miner, n, committee, size);
            assertEq(witnesses, vm.parseJsonUint(json, _key(c, "witnesses")), "witnesses");
            if (witnesses != 0) ++withWitnesses;
        }
        assertTrue(withWitnesses >= 30, "too few witness draws");
    }
}
