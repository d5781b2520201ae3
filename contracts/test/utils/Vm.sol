// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.30;

/// @notice The subset of Foundry's cheatcodes these tests use (forge-std is not installable from npm).
interface Vm {
    function prank(address sender) external;
    function startPrank(address sender) external;
    function stopPrank() external;
    function roll(uint256 newHeight) external;
    function expectRevert(bytes calldata revertData) external;
    function expectRevert(bytes4 revertData) external;
    function expectRevert() external;
    function expectEmit() external;
    function assume(bool condition) external pure;
    function addr(uint256 privateKey) external pure returns (address);
    function sign(uint256 privateKey, bytes32 digest) external pure returns (uint8 v, bytes32 r, bytes32 s);
    function readFile(string calldata path) external view returns (string memory);
    function parseJsonUint(string calldata json, string calldata key) external pure returns (uint256);
    function parseJsonUintArray(string calldata json, string calldata key) external pure returns (uint256[] memory);
    function parseJsonBytes32(string calldata json, string calldata key) external pure returns (bytes32);
    function parseJsonAddress(string calldata json, string calldata key) external pure returns (address);
    function label(address account, string calldata newLabel) external;
    function store(address target, bytes32 slot, bytes32 value) external;
    function toString(uint256 value) external pure returns (string memory);
}

/// @notice Minimal test base: the cheatcode handle and assertions that revert with context.
abstract contract TestBase {
    Vm internal constant vm = Vm(address(uint160(uint256(keccak256("hevm cheat code")))));

    error AssertionFailed(string what, uint256 a, uint256 b);

    function assertEq(uint256 a, uint256 b, string memory what) internal pure {
        if (a != b) revert AssertionFailed(what, a, b);
    }

    function assertEq(bytes32 a, bytes32 b, string memory what) internal pure {
        if (a != b) revert AssertionFailed(what, uint256(a), uint256(b));
    }

    function assertEq(address a, address b, string memory what) internal pure {
        if (a != b) revert AssertionFailed(what, uint160(a), uint160(b));
    }

    function assertLe(uint256 a, uint256 b, string memory what) internal pure {
        if (a > b) revert AssertionFailed(what, a, b);
    }

    function assertTrue(bool c, string memory what) internal pure {
        if (!c) revert AssertionFailed(what, 0, 1);
    }

    function bound(uint256 x, uint256 lo, uint256 hi) internal pure returns (uint256) {
        if (hi <= lo) return lo;
        return lo + x % (hi - lo + 1);
    }
}
