"""Exception root of the validator package."""


class ValidatorError(Exception):
    """Root of every error raised by ``validator``."""
