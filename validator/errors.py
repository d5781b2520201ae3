"""Exception root of the validator package and its typed failures."""


class ValidatorError(Exception):
    """Root of every error raised by ``validator``."""


class ValidatorConfigError(ValidatorError):
    """The validator's configuration (file, environment, flags, key) is unusable."""


class ValidatorStateError(ValidatorError):
    """The on-disk state is unreadable or inconsistent."""


class MergeFailedError(ValidatorError):
    """The accepted updates could not be merged into a checkpoint."""


class CertificationError(ValidatorError):
    """The new checkpoint could not be certified (too few signatures, bad signature)."""


class SourceMismatchError(ValidatorError):
    """An update names, as its error-feedback source, bytes that are not the miner's on-chain commitment
    of that round (provable: the commitment is public)."""


class NotAnnouncedError(ValidatorError):
    """A committed miner has no discovery record for the round yet (records may lag in a DHT, and a miner
    restarted before it served announces later): like an unreachable peer, retried within the grace."""
