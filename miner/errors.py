"""Exception root of the miner package."""


class MinerError(Exception):
    """Root of every error raised by ``miner``."""
