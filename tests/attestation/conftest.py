"""Fixtures of the attestation tests (helpers in tests.attestation.attest_support)."""

from __future__ import annotations

import pytest

from tests.attestation.attest_support import IntelVector, intel_vectors


@pytest.fixture(scope="session")
def intel() -> dict[str, IntelVector]:
    """The real Intel vectors."""
    return intel_vectors()


@pytest.fixture(scope="session")
def tdx(intel: dict[str, IntelVector]) -> IntelVector:
    """The real TDX v4 quote."""
    return intel["tdx_quote"]


@pytest.fixture(scope="session")
def sgx(intel: dict[str, IntelVector]) -> IntelVector:
    """The real SGX v3 quote."""
    return intel["sgx_quote"]
