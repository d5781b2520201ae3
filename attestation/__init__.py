"""TEE evidence: parsers and a pure ``verify(evidence, collateral, policy, now)``, plus a simulated enclave.

Imports nothing else of Tessera's. Public API::

    from attestation import verify, Policy, Binding, report_data, load_collateral
    verdict = verify(quote_bytes, collateral, policy, now, expected=Binding(chain_id, round, miner, digest))

A refusal is a subclass of :class:`attestation.errors.AttestationError`.
"""

from attestation.binding import Binding, report_data
from attestation.collateral import (
    CollateralCache,
    IntelCollateral,
    NvidiaCollateral,
    SnpCollateral,
    load_collateral,
    loads_collateral,
)
from attestation.dispatch import (
    describe_evidence,
    describe_evidence_safe,
    detect_format,
    parse_evidence,
    verify,
)
from attestation.errors import AttestationError
from attestation.policy import Policy, TcbStatus, load_policy
from attestation.verdict import AttestationVerdict

__all__ = [
    "AttestationError",
    "Binding",
    "CollateralCache",
    "IntelCollateral",
    "NvidiaCollateral",
    "Policy",
    "SnpCollateral",
    "TcbStatus",
    "AttestationVerdict",
    "describe_evidence",
    "describe_evidence_safe",
    "detect_format",
    "load_collateral",
    "load_policy",
    "loads_collateral",
    "parse_evidence",
    "report_data",
    "verify",
]
