// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.30;

import {ERC20} from "solady/tokens/ERC20.sol";

/// @title TesseraToken
/// @notice The reward and staking token of a Tessera training run (symbol TSR, 18 decimals).
/// @dev The whole supply is minted once, in the constructor: `poolAmount` to the network contract (the
///      reward pool that pays the fixed per-round emission) and `genesisAmount` to the deployer (to hand
///      out as stake). Nothing can mint afterwards. Slashed stake is burned through {burn}, so the supply
///      only ever shrinks.
contract TesseraToken is ERC20 {
    /// @notice Mints the fixed supply.
    /// @param pool The network contract that holds the reward pool.
    /// @param poolAmount Tokens minted to `pool`.
    /// @param genesis The account that receives the genesis allocation (stake to distribute).
    /// @param genesisAmount Tokens minted to `genesis`.
    constructor(address pool, uint256 poolAmount, address genesis, uint256 genesisAmount) {
        _mint(pool, poolAmount);
        _mint(genesis, genesisAmount);
    }

    /// @notice The token name.
    /// @return The string "Tessera".
    function name() public pure override returns (string memory) {
        return "Tessera";
    }

    /// @notice The token symbol.
    /// @return The string "TSR".
    function symbol() public pure override returns (string memory) {
        return "TSR";
    }

    /// @notice Burns `amount` of the caller's tokens (the network burns slashed stake this way).
    /// @param amount Tokens to destroy.
    function burn(uint256 amount) external {
        _burn(msg.sender, amount);
    }

    /// @dev No implicit Permit2 allowance: approvals are explicit.
    function _givePermit2InfiniteAllowance() internal pure override returns (bool) {
        return false;
    }
}
