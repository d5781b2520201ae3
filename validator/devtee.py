"""The development TEE's evidence checker: a validator of a devnet (``--dangerous-dev-tee``) or of the
attack suite verifies miners' evidence against the development enclave root of
``attestation.simulated``; a production validator never uses it."""

from __future__ import annotations

import datetime as dt

from attestation import AttestationError, Binding, verify
from attestation.simulated import SimulatedEnclave
from validator.context import CheckEvidence


def dev_evidence_checker(chain_id: int, seed: bytes) -> CheckEvidence:
    """Verify evidence against the *development* enclave root of ``attestation.simulated`` (devnet only)."""
    enclave = SimulatedEnclave.from_seed(seed)
    policy = enclave.policy()

    def check(evidence: bytes, round: int, miner: str, digest: bytes) -> str | None:
        now = dt.datetime.now(dt.UTC)
        try:
            verify(
                evidence,
                enclave.collateral(now),
                policy,
                now,
                expected=Binding(chain_id, round, bytes.fromhex(miner[2:]), digest),
            )
        except AttestationError as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    return check
