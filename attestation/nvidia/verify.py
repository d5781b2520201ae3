"""Verification of NVIDIA H100 attestation reports: SPDM signature, device chain, nonce, measurements.

Not checkable offline (documented refusals to pretend): OCSP revocation of the device chain and the
comparison with NVIDIA's reference integrity manifests (RIM). A policy pins GPU measurements instead.
"""

from __future__ import annotations

import datetime as dt

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from attestation.binding import Binding, check_nonce, check_raw
from attestation.certchain import load_der_cert, subject_of, verify_chain
from attestation.collateral import NvidiaCollateral
from attestation.errors import BadChainError, MeasurementNotAllowedError, QuoteSignatureError
from attestation.limits import check_evidence_size
from attestation.nvidia.spdm import (
    OPAQUE_DRIVER_VERSION,
    OPAQUE_VBIOS_VERSION,
    GpuReport,
    check_signature_size,
)
from attestation.policy import Policy
from attestation.signatures import ecdsa_ok
from attestation.verdict import AttestationVerdict


def _text(value: bytes | None) -> str | None:
    if value is None:
        return None
    return value.rstrip(b"\x00").decode("ascii", "replace")


def _vbios(value: bytes | None) -> str | None:
    if value is None or len(value) < 5:
        return None
    return f"{value[3]:02X}.{value[2]:02X}.{value[1]:02X}.{value[0]:02X}.{value[4]:02X}"


def verify_nvidia(
    evidence: bytes | GpuReport,
    collateral: NvidiaCollateral,
    policy: Policy,
    now: dt.datetime,
    expected: Binding | bytes | None = None,
) -> AttestationVerdict:
    """Verify an H100 report (binary); return the verdict or raise a typed ``AttestationError``."""
    if not isinstance(evidence, GpuReport):
        check_evidence_size(evidence, policy.limits)
    collateral.check_limits(policy.limits)
    report = evidence if isinstance(evidence, GpuReport) else GpuReport.parse(evidence)
    roots = [load_der_cert(r, "pinned NVIDIA root") for r in policy.nvidia_roots]
    chain = collateral.chain
    root = verify_chain(chain, roots, now, "GPU device certificate chain")
    key = chain[0].public_key()
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise BadChainError("the GPU leaf certificate does not hold an EC key")
    check_signature_size(key.curve.key_size)
    if not ecdsa_ok(key, report.response.signature, report.signed, hashes.SHA384()):
        raise QuoteSignatureError(
            "the GPU report signature does not verify with the device leaf key: the report was altered "
            "or the certificate chain belongs to another GPU; read both from the same GPU again"
        )
    measurements = {f"gpu.{b.idx}": b.value.hex() for b in report.response.blocks}
    if policy.allowed_gpu_measurements is not None:
        have = {b.idx: b.value for b in report.response.blocks}
        for idx, allowed in sorted(policy.allowed_gpu_measurements.items()):
            if have.get(idx) not in allowed:
                got = have.get(idx)
                raise MeasurementNotAllowedError(
                    f"GPU measurement block {idx} is {got.hex() if got else 'absent'}, not in the policy's "
                    f"allowed list: install the driver/VBIOS the network allows"
                )
    if isinstance(expected, Binding):
        check_nonce(report.nonce, expected)
    elif expected is not None:
        check_raw(report.nonce, expected, "GPU request nonce")
    return AttestationVerdict(
        format="nvidia-h100",
        report_data=report.nonce,
        measurements=measurements,
        root=subject_of(root),
        policy=policy.name,
        binding_checked=expected is not None,
        details={
            "spdm_version": f"{report.request.version >> 4}.{report.request.version & 0xF}",
            "blocks": len(report.response.blocks),
            "driver_version": _text(report.opaque(OPAQUE_DRIVER_VERSION)),
            "vbios_version": _vbios(report.opaque(OPAQUE_VBIOS_VERSION)),
            "leaf": subject_of(chain[0]),
            "not_checked_offline": ["OCSP revocation", "RIM golden measurements"],
            "trailing_bytes": len(report.trailing),
        },
    )
