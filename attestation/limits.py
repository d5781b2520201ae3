"""Caps on what a verifier accepts to work on: sizes and counts, checked before anything is parsed.

Every cap is far above what a real quote, report or collateral document needs (the figures in the
comments are the real vectors'), and low enough that the worst accepted input costs milliseconds and a
few megabytes (docs/security.md, section "Attestation evidence: bounded work"). A policy carries its
``Limits`` (``Policy.limits``); ``DEFAULT_LIMITS`` is what ``Policy()`` uses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from attestation.errors import CollateralTooLargeError, EvidenceTooLargeError, MalformedCollateralError

KiB = 1024
PEM_CERT_MARKER = b"-----BEGIN CERTIFICATE-----"


@dataclass(frozen=True)
class Limits:
    """Size and count caps, each checked before the input it bounds is parsed."""

    max_evidence_bytes: int = 64 * KiB
    """A quote or report (real: Intel 4.6-5 KB, SEV-SNP 1,184 bytes, H100 4.1 KB)."""
    max_collateral_bytes: int = 256 * KiB
    """The whole collateral JSON text (real Intel collateral: 14-16 KB). It also bounds what a hostile
    text can make ``json.loads`` build (arrays of empty arrays: at most 21 ms CPU and 7.6 MB measured at
    this cap; 93 ms and 24 MB at 1 MiB)."""
    max_document_bytes: int = 64 * KiB
    """TCB info or QE identity text (real: 0.5-4.5 KB)."""
    max_crl_bytes: int = 64 * KiB
    """One DER CRL (real: 0.3-2.7 KB); parsed before its signature can be checked."""
    max_pem_chain_bytes: int = 32 * KiB
    """One PEM certificate chain, in the evidence or the collateral (real: 1.9-4.8 KB)."""
    max_certificate_bytes: int = 8 * KiB
    """One DER certificate (real: 0.6-1.6 KB)."""
    max_signature_bytes: int = 512
    """A raw r||s collateral signature (real: 64 bytes)."""
    pck_chain_certs: int = 3
    """The PCK chain in an Intel quote: PCK certificate, PCK CA, root (exactly three, per Intel's spec)."""
    max_collateral_chain_certs: int = 3
    """An Intel collateral issuer chain (real: two, signing certificate or PCK CA, then the root)."""
    max_snp_chain_certs: int = 2
    """The AMD chain besides the VCEK (ASK, ARK)."""
    max_gpu_chain_certs: int = 8
    """The NVIDIA device chain (real: five)."""

    def to_dict(self) -> dict[str, int]:
        """The JSON form (every field)."""
        return dataclasses.asdict(self)


DEFAULT_LIMITS = Limits()


def limits_from_dict(data: Mapping[str, Any]) -> Limits:
    """Limits from their JSON form; absent keys keep the defaults."""
    known = {f.name for f in dataclasses.fields(Limits)}
    if not isinstance(data, Mapping) or set(data) - known:
        raise MalformedCollateralError(f"policy: limits must be an object with keys among {sorted(known)}")
    values: dict[str, int] = {}
    for key, value in data.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise MalformedCollateralError(f"policy: limits.{key} must be a positive integer")
        values[key] = value
    return dataclasses.replace(DEFAULT_LIMITS, **values)


def check_evidence_size(evidence: bytes, limits: Limits = DEFAULT_LIMITS) -> None:
    """Refuse evidence over ``max_evidence_bytes`` before it is parsed."""
    if len(evidence) > limits.max_evidence_bytes:
        raise EvidenceTooLargeError(
            f"the evidence is {len(evidence):,} bytes, over the {limits.max_evidence_bytes:,}-byte cap (a "
            f"real quote or report is a few KB); send the bytes the TEE produced"
        )


def check_size(data: bytes | str, cap: int, what: str, *, evidence: bool = False) -> None:
    """Refuse ``data`` longer than ``cap`` (bytes, or characters of a str) before it is parsed."""
    if len(data) > cap:
        err = EvidenceTooLargeError if evidence else CollateralTooLargeError
        raise err(f"{what} is {len(data):,} bytes, over the {cap:,}-byte cap; send the vendor's document")


def check_pem_count(pem: bytes, cap: int, what: str, *, evidence: bool) -> int:
    """Count the PEM certificates of ``pem`` (a substring count, no parsing); refuse more than ``cap``."""
    n = pem.count(PEM_CERT_MARKER)
    if n > cap:
        err = EvidenceTooLargeError if evidence else CollateralTooLargeError
        raise err(f"{what} has {n} certificates, more than the {cap} it may carry; send the vendor's chain")
    return n
