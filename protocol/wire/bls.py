"""BLS12-381 keys and signatures for checkpoint certificates (py-ecc ``G2Basic``), in the EIP-2537 layout.

The scheme is the IETF ``BLS_SIG_BLS12381G2_XMD:SHA-256_SSWU_RO_NUL_`` suite that py-ecc calls
``G2Basic``: public keys are G1 points (48 bytes compressed), signatures G2 points (96 bytes compressed),
messages are hashed to G2 with the NUL domain tag — exactly what Solady's ``BLS.hashToG2`` computes, so
the contract verifies these signatures unchanged with the EIP-2537 precompiles. Aggregation is the sum of
signatures; the contract sums the signers' public keys. Rogue-key attacks are stopped by a proof of
possession at registration: the key signs ``TesseraNetwork.popMessage(validator, publicKey)``, a 32-byte
hash that binds the chain, the contract, the validator address and the key (a domain distinct from
checkpoint messages, which are hashes tagged ``tessera.checkpoint.v1``).

EIP-2537 encodes a base-field element as 64 bytes (16 zero bytes, then the 48-byte big-endian value); a
G1 point is ``x || y`` (128 bytes), a G2 point ``x.c0 || x.c1 || y.c0 || y.c1`` (256 bytes). The Solidity
structs split each 64-byte element into two ``bytes32`` words, which :func:`g1_words` and
:func:`g2_words` return ready for web3.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from eth_typing import BLSPubkey, BLSSignature

from protocol.errors import ProtocolError

# py_ecc runs ``sys.setrecursionlimit(100000)`` at import. With that limit CPython's C JSON decoder
# overflows the C stack (SIGSEGV) on deeply nested input instead of raising RecursionError, so restore
# the interpreter's limit (BLS sign/verify/aggregate need no deep recursion).
_recursion_limit = sys.getrecursionlimit()
try:
    from py_ecc.bls import G2Basic
    from py_ecc.bls.g2_primitives import G1_to_pubkey, pubkey_to_G1, signature_to_G2
    from py_ecc.optimized_bls12_381 import FQ, b, is_on_curve, normalize
finally:
    sys.setrecursionlimit(_recursion_limit)


class BlsError(ProtocolError):
    """A malformed key or signature, or an empty aggregate."""


def _fp(value: int) -> bytes:
    return value.to_bytes(64, "big")


def _split(blob: bytes) -> tuple[bytes, ...]:
    return tuple(blob[i : i + 32] for i in range(0, len(blob), 32))


def g1_eip2537(public_key: bytes) -> bytes:
    """128-byte EIP-2537 encoding of a compressed G1 public key."""
    try:
        point = normalize(pubkey_to_G1(public_key))  # type: ignore[arg-type]
    except Exception as exc:  # py-ecc raises ValueError/AssertionError variants
        raise BlsError(f"invalid G1 public key: {exc}") from exc
    x, y = point
    return _fp(int(x)) + _fp(int(y))


def g1_from_eip2537(blob: bytes) -> bytes:
    """The compressed (48-byte) G1 public key of a 128-byte EIP-2537 encoding (as the contract stores it)."""
    if len(blob) != 128 or blob[:16] != bytes(16) or blob[64:80] != bytes(16):
        raise BlsError("an EIP-2537 G1 point is two 64-byte field elements with 16 zero bytes each")
    x, y = int.from_bytes(blob[:64], "big"), int.from_bytes(blob[64:], "big")
    point = (FQ(x), FQ(y), FQ(1))
    if not is_on_curve(point, b):
        raise BlsError("the G1 point is not on the curve")
    return bytes(G1_to_pubkey(point))


def g2_eip2537(signature: bytes) -> bytes:
    """256-byte EIP-2537 encoding of a compressed G2 signature."""
    try:
        point = normalize(signature_to_G2(signature))  # type: ignore[arg-type]
    except Exception as exc:
        raise BlsError(f"invalid G2 signature: {exc}") from exc
    x, y = point
    return b"".join(_fp(int(c)) for c in (*x.coeffs, *y.coeffs))


def g1_words(public_key: bytes) -> tuple[bytes, ...]:
    """The ``BLS.G1Point`` struct (4 x bytes32) for web3."""
    return _split(g1_eip2537(public_key))


def g2_words(signature: bytes) -> tuple[bytes, ...]:
    """The ``BLS.G2Point`` struct (8 x bytes32) for web3."""
    return _split(g2_eip2537(signature))


@dataclass(frozen=True)
class BlsKeyPair:
    """A validator's BLS secret key and its G1 public key (48 bytes compressed)."""

    secret_key: int
    public_key: bytes

    @classmethod
    def generate(cls, ikm: bytes | None = None) -> BlsKeyPair:
        """A new key from 32+ bytes of input key material (random if omitted), per the IETF KeyGen."""
        sk = G2Basic.KeyGen(ikm if ikm is not None else secrets.token_bytes(32))
        return cls(secret_key=sk, public_key=bytes(G2Basic.SkToPk(sk)))

    @classmethod
    def from_secret(cls, secret_key: int) -> BlsKeyPair:
        """The key pair of a known secret scalar."""
        return cls(secret_key=secret_key, public_key=bytes(G2Basic.SkToPk(secret_key)))

    def sign(self, message: bytes) -> bytes:
        """A 96-byte compressed G2 signature of ``message`` (hash-to-G2 with the NUL tag)."""
        return bytes(G2Basic.Sign(self.secret_key, message))

    def proof_of_possession(self, pop_message: bytes) -> bytes:
        """Signs the contract's ``popMessage(validator, publicKey)`` (32 bytes)."""
        return self.sign(pop_message)


def aggregate(signatures: Sequence[bytes]) -> bytes:
    """Aggregates compressed G2 signatures into one."""
    if not signatures:
        raise BlsError("cannot aggregate zero signatures")
    return bytes(G2Basic.Aggregate([BLSSignature(s) for s in signatures]))


def verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Verifies one signature locally (the contract does the same with precompiles)."""
    return bool(G2Basic.Verify(BLSPubkey(public_key), message, BLSSignature(signature)))
