"""What verifying one update works with: the round's fixed inputs (:class:`RoundContext`), the verdict it
produces (:class:`Verdict`), the update as it comes in (:class:`Incoming`, its fetchers), what every check
of one decoded update reads (:class:`UpdateCheck`), and the failure a stage raises (:class:`StageFailure`).
``validator.pipeline`` runs the checks over these."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from torch import Tensor

from protocol.p2p.blobs import FetchTimeoutError, PeerUnavailableError
from protocol.rounds.audits import AuditDraw
from protocol.runspec import RunSpec
from protocol.wire.update import Update
from training.assignment import Assignment, assign_in_epoch
from training.config import CodecConfig
from training.data import Dataset
from training.model import TesseraModel, model_holding
from validator.errors import NotAnnouncedError, ValidatorError
from validator.policy import VerifyPolicy
from validator.stages import Stage

FetchBytes = Callable[[str], bytes]


#: Fetches a blob of tensors by its (hex) state digest: a part of a transcript state, the transcript, a residual.
FetchState = Callable[[str], dict[str, Tensor]]

#: Keeps an error-feedback residual the validator recomputed and found equal to the miner's committed one
#: (digest, tensors): next round's update starts from it, and it need not cross the wire.
KeepResidual = Callable[[str, Mapping[str, Tensor]], None]


#: The bytes of this miner's own update of an earlier round by (round, hex digest), already checked
#: against that round's on-chain commitment: raises :class:`validator.errors.SourceMismatchError` when the
#: digest is not what the miner committed (provable), anything else when it cannot be fetched.
FetchSource = Callable[[int, str], bytes]


#: Verifies TEE evidence bound to (round, miner, digest); returns None if it holds, else the reason.
CheckEvidence = Callable[[bytes, int, str, bytes], str | None]


class AuditRole(StrEnum):
    """This validator's part in one (miner, round). Every update gets the checks that move no
    state (fetch, digest, format, header, bounds, attestation, the transcript root and its anchor at
    theta_r, usefulness); the audit adds the states: seed-chosen replays and the update-to-transcript tie."""

    AUDIT = "audit"
    """On the miner's committee (or no draw: every validator): fetch states, replay, check the tie."""
    ABSTAIN = "abstain"
    """The miner is audited by a committee without this validator: its score is ignored by the median,
    so it scores the stateless checks and fetches no state."""
    UNAUDITED = "unaudited"
    """Not drawn for an audit: nobody fetches its states this round."""


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
    """``seed(round - 1)``: the miners' batches (and their modules without ``epoch_seed``)."""
    seed: bytes
    registry: Sequence[str]
    validators: Sequence[str] = ()
    """The round's registered validators, in the contract's registration order (an audit draw's committee
    bits index it): this validator's slot among a miner's auditors picks its window of segments
    (``validator.sampling``); empty (or not among them): an independent draw."""
    audits: Mapping[str, AuditDraw] = field(default_factory=dict)
    """Each committed miner's audit draw (``protocol.rounds.audits``: from the seed, after the commits);
    a miner without one is audited by every validator (the contract's defaults, q = 1 and c = all)."""
    validator_index: int | None = None
    """This validator's index in :attr:`validators` (its bit in a committee); None: on no committee."""
    epoch_seed: bytes | None = None
    """The seed of the round's assignment epoch (``protocol.rounds.epochs``): the miners' modules; None:
    :attr:`assign_seed` (epochs of one round)."""
    epoch_registry: Sequence[str] | None = None
    """The registry of the epoch's first round, whose miners rank first; None: :attr:`registry`."""
    assignments: dict[str, Assignment] = field(default_factory=dict)
    """Each miner's assignment, computed once for the round (:meth:`assignment`)."""
    heldout: dict[int, tuple[Tensor, float]] = field(default_factory=dict, repr=False)
    """Held-out windows and theta_r's loss on them, by shard (-1: the shared stream), computed once."""
    models: dict[str, TesseraModel] = field(default_factory=dict, repr=False)
    """The round's model by device (:meth:`model`)."""

    def model(self, device: str = "cpu") -> TesseraModel:
        """The run's model on ``device``, built once for the round (from theta_r): replays and evaluations
        load the parameters they compute with into it, under the compute lock (building one per check
        was 15% of a verification's CPU at the devnet's size)."""
        if device not in self.models:
            self.models[device] = model_holding(self.spec.model, self.checkpoint, device)
        return self.models[device]

    def audit_role(self, miner: str) -> AuditRole:
        """What this validator does for ``miner`` this round (see :class:`AuditRole`)."""
        draw = self.audits.get(miner)
        if draw is None:
            return AuditRole.AUDIT
        if not draw.audited:
            return AuditRole.UNAUDITED
        i = self.validator_index
        return AuditRole.AUDIT if i is not None and draw.committee >> i & 1 else AuditRole.ABSTAIN

    def auditors(self, miner: str) -> list[str]:
        """The validators that audit ``miner`` this round (every one without a draw)."""
        draw = self.audits.get(miner)
        return list(self.validators) if draw is None else draw.members(self.validators)

    def assignment(self, miner: str) -> Assignment:
        """The miner's assignment (computed once for the round): drawn from the epoch seed among the round's
        registry, the epoch registry's miners ranked first (``training.assignment.assign_in_epoch``), as
        the miner draws it."""
        if not self.assignments:
            seed = self.assign_seed if self.epoch_seed is None else self.epoch_seed
            epoch = self.registry if self.epoch_registry is None else self.epoch_registry
            self.assignments = assign_in_epoch(
                seed, list(epoch), list(self.registry), self.spec.model, self.spec.experts_per_miner
            )
        return self.assignments[miner]


def unreachable(exc: BaseException) -> bool:
    """Whether a failed fetch means the miner could not be reached (down, restarting, slow, not announced
    yet: retried while its budget lasts, ``validator.schedule``) rather than that it answered and does not serve the
    bytes (a 404 from a running miner: final at once, so withholding holds nobody)."""
    return isinstance(exc, (PeerUnavailableError, FetchTimeoutError, NotAnnouncedError))


class StageFailure(ValidatorError):
    """A check refused the update: raised by a stage at its first failure, caught by the pipeline, which
    turns it into the verdict (the stage, the reason, whether it is provable, and its evidence)."""

    def __init__(self, stage: Stage, reason: str, provable: bool = False, **evidence: Any) -> None:
        super().__init__(reason)
        self.stage, self.reason, self.provable, self.evidence = stage, reason, provable, evidence


def run_model(
    checkpoint: Mapping[str, Tensor], spec: RunSpec
) -> tuple[dict[str, tuple[int, ...]], CodecConfig]:
    """The run's parameter shapes (those of ``checkpoint``, theta_r) and codec, which an update's header
    must match before it is decoded (``protocol.wire.update.decode_update``'s last two arguments)."""
    return {n: tuple(t.shape) for n, t in checkpoint.items()}, spec.codec


@dataclass(frozen=True)
class Incoming:
    """One miner's update as it comes into the pipeline: whose, what was committed, and how to fetch
    what a check reads (the node's intake builds one per miner and round)."""

    miner: str
    """The miner's address."""
    commitment: bytes | None
    """Its on-chain update commitment (None: it committed nothing; refused at ``commit``)."""
    fetch_update: Callable[[], bytes]
    """Fetches the update's bytes (raises on failure; an unreachable miner's error is retried)."""
    fetch_state: FetchState
    """Fetches a transcript state's part, the transcript or a residual by digest."""
    evidence: bytes | None = None
    """The TEE evidence the miner served, if any."""
    fetch_source: FetchSource | None = None
    """Fetches the miner's earlier update that ``ef.source`` names; without it such an update is refused
    (unprovably)."""
    keep_residual: KeepResidual | None = None
    """Given the recomputed error-feedback residual when it hashes to the committed one."""
    out_of_time: Callable[[], bool] | None = None
    """This miner's time budget: asked before each stage and each replayed segment; once it says yes the
    verdict is ``budget`` (scored 0, unprovable), so one slow miner cannot make the validator miss a
    phase."""


@dataclass(frozen=True)
class UpdateCheck:
    """What every check after ``format`` reads about one decoded update (the recompute and usefulness
    stages take it whole rather than a dozen arguments)."""

    ctx: RoundContext
    """The round's fixed inputs."""
    verdict: Verdict
    """The verdict being built: checks record their metrics and evidence in it."""
    assignment: Assignment
    """The miner's assignment this round."""
    update: Update
    """The decoded update."""
    delta: Mapping[str, Tensor]
    """Its pseudo-gradient (decoded, fp32)."""
    incoming: Incoming
    """How the update came in: its fetchers and its time budget."""
    policy: VerifyPolicy
    """The validator's verification policy."""
    proof: Mapping[str, Any]
    """Evidence every provable failure carries: the update digest and the on-chain commitment."""

    def fail(self, reason: str, provable: bool = True, **extra: Any) -> StageFailure:
        """A ``recompute`` failure with this update's proof (provable by default) and ``extra`` evidence."""
        return StageFailure(
            Stage.RECOMPUTE, reason, provable, **(dict(self.proof) if provable else {}), **extra
        )

    def out_of_time(self) -> bool:
        """Whether this miner's time budget has run out (never, without one)."""
        return self.incoming.out_of_time is not None and self.incoming.out_of_time()
