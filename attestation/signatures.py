"""ECDSA with raw r||s signatures, as the TEE vendors encode them."""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature


def raw_to_der(sig: bytes) -> bytes | None:
    """DER-encode a raw big-endian r||s signature; None if it is not an even, non-empty length."""
    if not sig or len(sig) % 2:
        return None
    half = len(sig) // 2
    return encode_dss_signature(int.from_bytes(sig[:half], "big"), int.from_bytes(sig[half:], "big"))


def ecdsa_ok(key: object, raw_sig: bytes, data: bytes, algorithm: hashes.HashAlgorithm) -> bool:
    """Whether ``raw_sig`` (r||s) is a valid ECDSA signature of ``data`` by the EC public ``key``."""
    if not isinstance(key, ec.EllipticCurvePublicKey):
        return False
    der = raw_to_der(raw_sig)
    if der is None:
        return False
    try:
        key.verify(der, data, ec.ECDSA(algorithm))
    except (InvalidSignature, ValueError):
        return False
    return True


def p256_key_from_raw(xy: bytes) -> ec.EllipticCurvePublicKey | None:
    """The P-256 public key of raw x||y (64 bytes); None if it is not a point of the curve."""
    if len(xy) != 64:
        return None
    try:
        return ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b"\x04" + xy)
    except ValueError:
        return None
