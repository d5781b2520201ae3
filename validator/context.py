"""What verifying one update works with: the round's fixed inputs (:class:`RoundContext`), the verdict it
produces (:class:`Verdict`), the fetchers it is given, and the failure a stage raises."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from torch import Tensor

from protocol.p2p.transfer import FetchTimeoutError, PeerUnavailableError
from protocol.runspec import RunSpec
from training.assignment import Assignment, assign
from training.config import CodecConfig
from training.data import Dataset
from training.model import TesseraModel, model_holding
from validator.errors import NotAnnouncedError
from validator.stages import Stage

FetchBytes = Callable[[str], bytes]


#: Fetches a blob of tensors by its (hex) state digest: a part of a transcript state, the transcript, a residual.
FetchState = Callable[[str], dict[str, Tensor]]

#: Keeps an error-feedback residual the validator recomputed and found equal to the miner's committed one
#: (digest, tensors): next round's update starts from it, and it need not cross the wire (issue 13).
KeepResidual = Callable[[str, Mapping[str, Tensor]], None]


#: The bytes of this miner's own update of an earlier round by (round, hex digest), already checked
#: against that round's on-chain commitment: raises :class:`validator.errors.SourceMismatchError` when the
#: digest is not what the miner committed (provable), anything else when it cannot be fetched.
FetchSource = Callable[[int, str], bytes]


#: Verifies TEE evidence bound to (round, miner, digest); returns None if it holds, else the reason.
CheckEvidence = Callable[[bytes, int, str, bytes], str | None]


@dataclass
class Verdict:
    """The outcome for one miner."""

    miner: str
    round: int
    accepted: bool
    stage: str
    """A :class:`validator.stages.Stage`: ``ok`` or the stage that decided (empty while undecided)."""
    reason: str
    score: int = 0
    provable: bool = False
    attested: bool = False
    digest: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """JSON form (stored and served)."""
        return asdict(self)


@dataclass
class RoundContext:
    """What is fixed for every miner of a round."""

    spec: RunSpec
    dataset: Dataset
    round: int
    chain_id: int
    contract: str
    validator: str
    checkpoint: dict[str, Tensor]
    checkpoint_digest: bytes
    assign_seed: bytes
    seed: bytes
    registry: Sequence[str]
    validators: Sequence[str] = ()
    """The round's registered validators: this validator's slot among them picks its window of segments
    (``validator.sampling``); empty (or not among them): an independent draw."""
    assignments: dict[str, Assignment] = field(default_factory=dict)
    _heldout: dict[int, tuple[Tensor, float]] = field(default_factory=dict)
    _models: dict[str, TesseraModel] = field(default_factory=dict)

    def model(self, device: str = "cpu") -> TesseraModel:
        """The run's model on ``device``, built once for the round (from theta_r): replays and evaluations
        load the parameters they compute with into it, under the compute lock (building one per check
        was 15% of a verification's CPU at the devnet's size)."""
        if device not in self._models:
            self._models[device] = model_holding(self.spec.model, self.checkpoint, device)
        return self._models[device]

    def assignment(self, miner: str) -> Assignment:
        """The miner's assignment (computed once for the round)."""
        if not self.assignments:
            self.assignments = assign(
                self.assign_seed, list(self.registry), self.spec.model, self.spec.experts_per_miner
            )
        return self.assignments[miner]


def unreachable(exc: BaseException) -> bool:
    """Whether a failed fetch means the miner could not be reached (down, restarting, slow, not announced
    yet: retried within ``withhold_grace_seconds``) rather than that it answered and does not serve the
    bytes (a 404 from a running miner: final at once, so withholding holds nobody, issue 10)."""
    return isinstance(exc, (PeerUnavailableError, FetchTimeoutError, NotAnnouncedError))


class _Fail(Exception):
    def __init__(self, stage: Stage, reason: str, provable: bool = False, **evidence: Any) -> None:
        super().__init__(reason)
        self.stage, self.reason, self.provable, self.evidence = stage, reason, provable, evidence


def _run_model(ctx: RoundContext) -> tuple[dict[str, tuple[int, ...]], CodecConfig]:
    """The run's parameter shapes and codec, which an update's header must match before it is decoded."""
    return {n: tuple(t.shape) for n, t in ctx.checkpoint.items()}, ctx.spec.codec
