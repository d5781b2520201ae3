"""Exception root of the training package."""


class TrainingError(Exception):
    """Root of every error raised by ``training``."""


class ConfigError(TrainingError):
    """A configuration is invalid or inconsistent."""


class ModuleIdError(TrainingError):
    """A module id or parameter name is not part of the model."""


class AssignmentError(TrainingError):
    """An assignment cannot be computed (no miners, bad registry)."""


class DataError(TrainingError):
    """A corpus or batch request is unusable (too small, bad document)."""


class CodecError(TrainingError):
    """A compressed tensor is malformed or does not match its codec."""


class ReplayError(TrainingError):
    """A transcript segment cannot be replayed (missing snapshot, mismatched names)."""


class MergeError(TrainingError):
    """Pseudo-gradients cannot be merged (unknown parameter, wrong shape, non-finite values)."""


class DeviceError(TrainingError):
    """A compute device is malformed or not available on this machine (``training.device``)."""
