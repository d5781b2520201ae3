// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.30;

/// @title Consensus
/// @notice The scoring math of a round, shared by the network contract and the tests. The Python
///         reference (protocol/rounds/consensus.py) implements the same functions to the wei; the JSON vectors
///         in test/vectors/ keep both sides equal.
/// @dev Scores are integers in [0, SCORE_MAX]. The consensus score of a miner is the stake-weighted
///      lower median of the revealed validator scores (Yuma consensus with kappa = 1/2): the smallest
///      score m such that the validators who scored at most m hold at least half the revealed weight.
///      A submitted median is checked in O(validators) instead of sorting:
///      2 * weight(score < m) < W <= 2 * weight(score <= m).
library Consensus {
    /// @notice The largest score a validator may give a miner.
    uint256 internal constant SCORE_MAX = 10_000;
    /// @notice Basis-point denominator.
    uint256 internal constant BPS = 10_000;

    /// @notice Whether `m` is the stake-weighted lower median of `column` under `weights`.
    /// @dev With no weight (W == 0) the only valid median is 0.
    function isWeightedMedian(uint256[] memory column, uint256[] memory weights, uint256 m)
        internal
        pure
        returns (bool)
    {
        uint256 below;
        uint256 atOrBelow;
        uint256 total;
        for (uint256 i; i < column.length; ++i) {
            uint256 w = weights[i];
            total += w;
            if (column[i] < m) below += w;
            if (column[i] <= m) atOrBelow += w;
        }
        if (total == 0) return m == 0;
        return 2 * below < total && 2 * atOrBelow >= total;
    }

    /// @notice Splits `budget` over miners in proportion to their consensus scores (floor division).
    /// @return pay The payout of each miner; their sum never exceeds `budget`.
    function minerPayouts(uint256[] memory medians, uint256 budget) internal pure returns (uint256[] memory pay) {
        pay = new uint256[](medians.length);
        uint256 sum;
        for (uint256 j; j < medians.length; ++j) {
            sum += medians[j];
        }
        if (sum == 0) return pay;
        for (uint256 j; j < medians.length; ++j) {
            pay[j] = budget * medians[j] / sum;
        }
    }

    /// @notice The closeness of a validator's score vector to consensus:
    ///         n * SCORE_MAX - sum_j |s_j - m_j| (n = number of miners), so a perfect match scores
    ///         n * SCORE_MAX and the worst possible vector scores 0. With no miners it is 1.
    function closeness(uint256[] memory scores, uint256[] memory medians) internal pure returns (uint256) {
        uint256 n = medians.length;
        if (n == 0) return 1;
        uint256 dist;
        for (uint256 j; j < n; ++j) {
            uint256 s = scores[j];
            uint256 m = medians[j];
            dist += s > m ? s - m : m - s;
        }
        return n * SCORE_MAX - dist;
    }

    /// @notice Splits `budget` over validators in proportion to weight * closeness (floor division).
    /// @return pay The payout of each validator; their sum never exceeds `budget`.
    function validatorPayouts(uint256[] memory weights, uint256[] memory closenesses, uint256 budget)
        internal
        pure
        returns (uint256[] memory pay)
    {
        pay = new uint256[](weights.length);
        uint256 sum;
        for (uint256 i; i < weights.length; ++i) {
            sum += weights[i] * closenesses[i];
        }
        if (sum == 0) return pay;
        for (uint256 i; i < weights.length; ++i) {
            pay[i] = budget * (weights[i] * closenesses[i]) / sum;
        }
    }

    /// @notice Tag of the audit coin in {auditDraw}.
    bytes32 internal constant AUDIT_TAG = "audit";

    /// @notice The audit draw of `miner` under the round seed `seed` (protocol/rounds/audits.py mirrors it):
    ///         audited when `keccak(seed, miner, "audit") % BPS < rateBps` (always when rateBps >= BPS);
    ///         an audited miner's committee is `size` distinct validator indices below `n`, the k-th try
    ///         being `keccak(seed, miner, k) % n` (k = 0, 1, ...; repeats skipped), as a bitmap (bit i =
    ///         validators[i]). `size` 0 or >= n: every validator. Not audited: committee 0.
    function auditDraw(bytes32 seed, address miner, uint256 n, uint256 rateBps, uint256 size)
        internal
        pure
        returns (bool audited, uint256 committee)
    {
        audited = rateBps >= BPS || uint256(keccak256(abi.encode(seed, miner, AUDIT_TAG))) % BPS < rateBps;
        if (!audited || n == 0) return (audited, 0);
        if (size == 0 || size >= n) return (true, n >= 256 ? type(uint256).max : (uint256(1) << n) - 1);
        for (uint256 k; size != 0; ++k) {
            uint256 bit = uint256(1) << (uint256(keccak256(abi.encode(seed, miner, k))) % n);
            if (committee & bit == 0) {
                committee |= bit;
                --size;
            }
        }
    }

    /// @notice Tag of the witness draw in {witnessDraw}.
    bytes32 internal constant WITNESS_TAG = "witness";

    /// @notice The witnesses of an unanswered-audit report on `miner` (issue 26, the reverse attack): up
    ///         to `size` validator indices below `n` outside `committee` (all the others when fewer are
    ///         left), the k-th try being `keccak(seed, miner, "witness", k) % n` (repeats and committee
    ///         members skipped), as a bitmap. None when the committee is every validator (`size` 0 or
    ///         >= n, or a one-validator network): the electorate is then the whole set already.
    function witnessDraw(bytes32 seed, address miner, uint256 n, uint256 committee, uint256 size)
        internal
        pure
        returns (uint256 witnesses)
    {
        uint256 members;
        for (uint256 x = committee; x != 0; x &= x - 1) {
            ++members;
        }
        if (committee == 0 || members >= n) return 0;
        uint256 left = n - members;
        uint256 w = size < left ? size : left;
        for (uint256 k; w != 0; ++k) {
            uint256 bit = uint256(1) << (uint256(keccak256(abi.encode(seed, miner, WITNESS_TAG, k))) % n);
            if ((committee | witnesses) & bit == 0) {
                witnesses |= bit;
                --w;
            }
        }
    }

    /// @notice The weights of an audited miner's column: a revealer counts only if its validator index
    ///         (`indices[i]`) is in `committee`; when no committee member revealed (restricted weight 0),
    ///         every revealer counts, so an honest miner is never left unsettled by absent auditors.
    function restrict(uint256[] memory weights, uint256[] memory indices, uint256 committee)
        internal
        pure
        returns (uint256[] memory out)
    {
        out = new uint256[](weights.length);
        uint256 total;
        for (uint256 i; i < weights.length; ++i) {
            if ((committee >> indices[i]) & 1 == 1) {
                out[i] = weights[i];
                total += weights[i];
            }
        }
        if (total == 0) return weights;
    }
}
