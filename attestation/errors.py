"""Exception root of the attestation package."""


class AttestationError(Exception):
    """Root of every error raised by ``attestation``."""
