"""The 64 bytes a quote's report data carries: which chain, round, miner and update it attests.

Encoding (all integers big-endian, the miner a 20-byte EVM address, the update digest 32 bytes)::

    commitment = SHA-256(b"tessera/attestation/report-data/v1" || u256 chain_id || u256 round
                         || miner[20] || update_digest[32])
    identity   = SHA-256(b"tessera/attestation/miner/v1" || u256 chain_id || miner[20])[:16]

    report_data[0:32]  = commitment        (also the 32-byte NVIDIA SPDM request nonce)
    report_data[32:48] = identity
    report_data[48:56] = u64 round
    report_data[56:64] = 8 zero bytes (reserved)

The commitment alone binds everything. The identity and the clear round let a validator tell a replay
(right chain and miner, wrong round or update) from evidence made for someone else.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from attestation.errors import BindingMismatchError, ReplayError

DOMAIN_REPORT_DATA = b"tessera/attestation/report-data/v1"
DOMAIN_MINER = b"tessera/attestation/miner/v1"
REPORT_DATA_LEN = 64
NONCE_LEN = 32


def _miner_bytes(miner: bytes | str) -> bytes:
    if isinstance(miner, str):
        text = miner[2:] if miner.lower().startswith("0x") else miner
        try:
            miner = bytes.fromhex(text)
        except ValueError:
            raise ValueError(f"miner address {miner!r} is not hex") from None
    if len(miner) != 20:
        raise ValueError(f"miner address must be 20 bytes, got {len(miner)}")
    return miner


def _u256(value: int, name: str) -> bytes:
    if not 0 <= value < 2**256:
        raise ValueError(f"{name} out of range")
    return value.to_bytes(32, "big")


@dataclass(frozen=True)
class Binding:
    """What a piece of evidence must be bound to: (chain id, round, miner, update digest)."""

    chain_id: int
    round: int
    miner: bytes | str
    """20-byte EVM address, as bytes or "0x..." hex (stored as bytes)."""
    update_digest: bytes

    def __post_init__(self) -> None:
        object.__setattr__(self, "miner", _miner_bytes(self.miner))
        if len(self.update_digest) != 32:
            raise ValueError(f"update digest must be 32 bytes, got {len(self.update_digest)}")
        if not 0 <= self.round < 2**64:
            raise ValueError("round must fit in 64 bits")
        _u256(self.chain_id, "chain id")

    @property
    def miner_bytes(self) -> bytes:
        """The miner address as 20 bytes."""
        return _miner_bytes(self.miner)

    def report_data(self) -> bytes:
        """The 64 report-data bytes for this binding."""
        return report_data(self.chain_id, self.round, self.miner, self.update_digest)

    def nonce(self) -> bytes:
        """The 32-byte NVIDIA SPDM nonce for this binding (the report data's commitment half)."""
        return self.report_data()[:NONCE_LEN]


def miner_identity(chain_id: int, miner: bytes | str) -> bytes:
    """The 16-byte identity tag of (chain id, miner) carried in report_data[32:48]."""
    return hashlib.sha256(DOMAIN_MINER + _u256(chain_id, "chain id") + _miner_bytes(miner)).digest()[:16]


def report_data(chain_id: int, round: int, miner: bytes | str, update_digest: bytes) -> bytes:
    """The 64-byte report data binding (chain id, round, miner, update digest); see the module doc."""
    miner_b = _miner_bytes(miner)
    if len(update_digest) != 32:
        raise ValueError(f"update digest must be 32 bytes, got {len(update_digest)}")
    if not 0 <= round < 2**64:
        raise ValueError("round must fit in 64 bits")
    commitment = hashlib.sha256(
        DOMAIN_REPORT_DATA + _u256(chain_id, "chain id") + _u256(round, "round") + miner_b + update_digest
    ).digest()
    return commitment + miner_identity(chain_id, miner_b) + round.to_bytes(8, "big") + bytes(8)


def check_report_data(actual: bytes, expected: Binding) -> None:
    """Raise unless ``actual`` (64 bytes) is exactly ``expected.report_data()``.

    ReplayError when it binds the same chain and miner but another round or update;
    BindingMismatchError otherwise.
    """
    want = expected.report_data()
    if actual == want:
        return
    if len(actual) == REPORT_DATA_LEN and actual[32:48] == want[32:48] and actual[56:] == bytes(8):
        got_round = int.from_bytes(actual[48:56], "big")
        if got_round != expected.round:
            raise ReplayError(
                f"the evidence was made for round {got_round}, this is round {expected.round}: replayed "
                f"evidence is refused; attest again inside round {expected.round}"
            )
        raise ReplayError(
            f"the evidence binds another update of round {expected.round} (not digest "
            f"{expected.update_digest.hex()}): attest the update you actually committed"
        )
    raise BindingMismatchError(
        f"the report data {actual.hex()[:32]}... does not bind chain {expected.chain_id}, miner "
        f"0x{expected.miner_bytes.hex()} and update {expected.update_digest.hex()}; put "
        f"attestation.binding.report_data(chain_id, round, miner, update_digest) in the quote's report data"
    )


def check_nonce(actual: bytes, expected: Binding) -> None:
    """Raise unless the NVIDIA request nonce is the binding's commitment (no identity half to compare)."""
    if actual != expected.nonce():
        raise BindingMismatchError(
            f"the GPU report's nonce {actual.hex()} is not the binding of chain {expected.chain_id}, round "
            f"{expected.round}, miner 0x{expected.miner_bytes.hex()} and update {expected.update_digest.hex()}: "
            f"request the GPU report with nonce = report_data(...)[:32] for this round and update"
        )


def check_raw(actual: bytes, expected: bytes, what: str = "report data") -> None:
    """Raise BindingMismatchError unless ``actual == expected`` (raw, non-Tessera bindings)."""
    if actual != expected:
        raise BindingMismatchError(f"the {what} is {actual.hex()}, expected {expected.hex()}")
