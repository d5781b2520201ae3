"""TEE evidence: parsers and a pure ``verify(evidence, collateral, policy, now)``, plus a simulated enclave.

Imports nothing else of Tessera's. Public API::

    from attestation import verify, Policy, Binding, report_data, load_collateral
    verdict = verify(quote_bytes, collateral, policy, now, expected=Binding(chain_id, round, miner, digest))

A refusal is a subclass of :class:`attestation.errors.AttestationError`.

Subpackages and modules:

- ``amd/``: AMD SEV-SNP reports
- ``collateral/``: what a verifier needs besides the evidence, its JSON form, a validator's cache
- ``intel/``: Intel DCAP quotes (SGX, TDX)
- ``nvidia/``: NVIDIA H100 SPDM reports
- ``binding``: ``report_data``: the 64 bytes binding a quote to chain, round, miner and update
- ``bytereader``: a bounds-checked cursor over untrusted bytes
- ``certchain``: X.509 chains to pinned vendor roots, with typed errors
- ``der``: minimal, bounds-checked DER decoding for the vendors' X.509 extensions
- ``devpki``: the development PKI of ``simulated``
- ``dispatch``: ``verify``: detect the format, check the collateral, run the format's verify
- ``errors``: ``AttestationError``, the package's exception root, one class per failure
- ``limits``: caps on sizes and counts, checked before anything is parsed
- ``memo``: memoization bounded in bytes
- ``policy``: ``Policy``: what a validator accepts (roots, measurements, TCB status, freshness)
- ``roots``: the pinned vendor roots of trust
- ``signatures``: ECDSA with raw r||s signatures
- ``simulated``: a simulated TDX enclave for machines without TEE hardware
- ``verdict``: ``AttestationVerdict``: the parsed fields of an accepted verification
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
