"""Exception root of the miner package and its typed failures."""


class MinerError(Exception):
    """Root of every error raised by ``miner``."""


class MinerConfigError(MinerError):
    """The miner's configuration (file, environment, flags, key) is unusable."""


class MinerStateError(MinerError):
    """The on-disk state is unreadable or inconsistent."""


class CheckpointUnavailableError(MinerError):
    """The round's checkpoint could not be fetched from any peer, or did not match its certified digest."""


class CommitDeadlineMissedError(MinerError):
    """The update was ready after the commit phase had closed."""


class LinkTooSlowError(MinerError):
    """The miner's upload link, measured at start (``miner.linkcheck``), cannot serve an audit within a
    validator's fetch timeout: it does not stake."""
