"""The sender-bound commitments the settlement contract checks, computed exactly as it does.

One definition for the chain client, the in-memory coordinator, miners and validators.
"""

from __future__ import annotations

from collections.abc import Sequence

from eth_abi import encode as abi_encode
from eth_utils import keccak, to_checksum_address


def update_commitment(chain_id: int, contract: str, round: int, miner: str, update_digest: bytes) -> bytes:
    """``keccak256(abi.encode(chainid, contract, round, miner, digest))``: the sender-bound commitment."""
    return keccak(
        abi_encode(
            ["uint256", "address", "uint256", "address", "bytes32"],
            [chain_id, to_checksum_address(contract), round, to_checksum_address(miner), update_digest],
        )
    )


def score_commitment(
    chain_id: int, contract: str, round: int, validator: str, scores: Sequence[int], salt: bytes
) -> bytes:
    """``keccak256(abi.encode(chainid, contract, round, validator, uint16[] scores, salt))``."""
    return keccak(
        abi_encode(
            ["uint256", "address", "uint256", "address", "uint16[]", "bytes32"],
            [
                chain_id,
                to_checksum_address(contract),
                round,
                to_checksum_address(validator),
                list(scores),
                salt,
            ],
        )
    )


def seed_commitment(secret: bytes, validator: str, round: int) -> bytes:
    """``keccak256(abi.encode(secret, validator, round))``."""
    return keccak(
        abi_encode(["bytes32", "address", "uint256"], [secret, to_checksum_address(validator), round])
    )


UNANSWERED_TAG = b"tessera.unanswered.v1".ljust(32, b"\0")
"""The Solidity ``bytes32("tessera.unanswered.v1")`` that tags an unanswered-audit report's evidence."""


def unanswered_evidence(chain_id: int, contract: str, miner: str, round: int) -> bytes:
    """``unansweredEvidence(miner, round)``: ``keccak256(abi.encode(tag, chainid, contract, miner, round))``,
    the evidence hash of the unanswered-audit report on ``miner`` in ``round`` (computed, not
    asked, so reading a report is one round trip)."""
    return keccak(
        abi_encode(
            ["bytes32", "uint256", "address", "address", "uint256"],
            [UNANSWERED_TAG, chain_id, to_checksum_address(contract), to_checksum_address(miner), round],
        )
    )
