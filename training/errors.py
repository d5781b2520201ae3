"""Exception root of the training package."""


class TrainingError(Exception):
    """Root of every error raised by ``training``."""
