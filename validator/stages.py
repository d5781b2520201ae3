"""The stages of an update's verification, in the order ``validator.pipeline`` runs them.

A verdict names the stage that decided it (``ok`` when every stage passed). The values are the strings
stored in state files, served at ``/verdicts`` and hashed into slashing evidence, so they never change;
``Stage`` is a ``StrEnum``, so a stored string compares equal to its member.
"""

from __future__ import annotations

from enum import StrEnum


class Stage(StrEnum):
    """Where a verification ended."""

    COMMIT = "commit"
    """The miner has no commitment on-chain."""
    FETCH = "fetch"
    """The update was not served (or is over the size cap)."""
    DIGEST = "digest"
    """The served bytes are not what the miner committed to."""
    FORMAT = "format"
    """The bytes do not decode as an update of this run's model and codec (provable)."""
    HEADER = "header"
    """Round, miner, base checkpoint, modules or transcript steps are not the expected ones (provable)."""
    BOUNDS = "bounds"
    """A module's pseudo-gradient is larger than ``max_rel_norm`` times its weights (provable)."""
    ATTESTATION = "attestation"
    """The TEE evidence served does not verify or does not bind the update (provable)."""
    RECOMPUTE = "recompute"
    """The transcript does not replay, or the update is not what the codec makes of it (provable when the
    served states say so; unprovable when a state was not served)."""
    USEFULNESS = "usefulness"
    """Every check passed but the update does not lower the loss on the miner's data (scored 0)."""
    OK = "ok"
    """Accepted."""
    BUDGET = "budget"
    """The phase's verification budget ran out before this update was decided (scored 0, unprovable)."""
    ERROR = "error"
    """An error no stage anticipated (scored 0, unprovable; logged with its traceback)."""

    @property
    def bytes_matched(self) -> bool:
        """Whether a verdict at this stage was reached on bytes that matched the on-chain commitment (so
        they are worth keeping: the consensus may accept what this validator refused)."""
        return self not in (Stage.COMMIT, Stage.FETCH, Stage.DIGEST)

    def retryable(self, provable: bool) -> bool:
        """Whether a verdict at this stage may change if asked again (the miner was slow or restarting):
        nothing was served, or a transcript state was not."""
        return self is Stage.FETCH or (self is Stage.RECOMPUTE and not provable)


UNVERIFIED_STAGES = frozenset({Stage.BUDGET, Stage.ERROR})
"""The stages that leave a miner unverified: scored 0 without a check deciding (a verdict with no stage is
undecided). A validator's round line counts the others as verified (``ValidatorNode.report_settled``)."""
