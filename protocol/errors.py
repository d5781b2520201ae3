"""Exception root of the protocol package."""


class ProtocolError(Exception):
    """Root of every error raised by ``protocol``."""
