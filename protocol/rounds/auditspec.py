"""The run file's audit section: the inputs of ``protocol.rounds.economics`` and the contract parameters
they give.

A run states its committee size ``c``, vesting ``K``, slash fraction and the miners and validators it
plans for; the audit rate ``q`` is not written down but computed, at deployment, from those and the
network's stake and emission by the deterrence formula (``economics.audit_rate_bps``, margin 2), so the
rate always follows the stake. ``tessera contracts deploy --run-file`` and ``tessera devnet`` deploy with
:meth:`AuditSpec.network_params`; the nodes read q and c back from the chain, where they are binding.
Development TEE quotes play no part in q: the formula has no attestation term.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from protocol.errors import ProtocolError
from protocol.node.settings import NodeConfig
from protocol.rounds.economics import RunEconomics, audit_rate_bps

TOKEN = 10**18
"""Wei per token (the economics are in tokens, the contract in wei)."""


AUDIT_BYTES_PER_PARAM = 20
"""Bytes one audit moves per trained parameter of the audited miner: one start state (parameters and both
AdamW moments, 12 bytes), the final parameters (4) and the source residual (4)
(docs/decisions/traffic-budget.md)."""


@dataclass(frozen=True)
class AuditTraffic:
    """The verification bytes a deployment's audits are expected to move per round (means over rounds)."""

    audit_bytes: int
    """One audit: :data:`AUDIT_BYTES_PER_PARAM` times a miner's trained parameters."""
    audits_per_round: float
    """Expected (miner, validator) audits a round: ``q x miners x`` the committee size."""
    per_miner_bytes: float
    """What a miner serves a round, in expectation."""
    per_validator_bytes: float
    """What a validator fetches a round, in expectation."""

    def describe(self) -> str:
        """One line for an operator."""
        return (
            f"one audit moves {self.audit_bytes / 1e6:.2f} MB; expected per round: "
            f"{self.audits_per_round:.3g} audits, each miner serves {self.per_miner_bytes / 1e3:,.1f} kB, "
            f"each validator fetches {self.per_validator_bytes / 1e3:,.1f} kB"
        )


def audit_traffic(
    audit_rate_bps: int, committee_size: int, miners: int, validators: int, trained_params: int
) -> AuditTraffic:
    """Expected audit traffic of a deployment with q = ``audit_rate_bps`` and committees of
    ``committee_size`` (0: every validator) on a network of ``miners`` and ``validators``, each miner
    training ``trained_params`` parameters (the step digests and update fetches are not audits)."""
    q = audit_rate_bps / 10_000
    members = validators if committee_size == 0 else min(committee_size, validators)
    one = AUDIT_BYTES_PER_PARAM * trained_params
    return AuditTraffic(
        audit_bytes=one,
        audits_per_round=q * miners * members,
        per_miner_bytes=q * members * one,
        per_validator_bytes=q * miners * members / validators * one,
    )


def audit_serving(trained_params: int, window_s: float | None = None) -> dict[str, Any]:
    """What a miner serves when audited, and the link it needs: one audit's bytes
    (:data:`AUDIT_BYTES_PER_PARAM` per trained parameter), its largest part (a state's AdamW moments, 8
    bytes per trained parameter, fetched by digest), and the upload rate that serves that part within a
    validator's fetch timeout (``window_s``; default ``protocol.node.settings.NodeConfig.fetch_timeout``): a
    slower link leaves the audit unanswered, which costs what a caught fake costs. ``tessera runspec
    estimate`` prints it; a miner checks its own link against it before it stakes (``miner.linkcheck``)."""
    window = NodeConfig().fetch_timeout if window_s is None else window_s
    part = 8 * trained_params
    return {
        "audit_bytes": AUDIT_BYTES_PER_PARAM * trained_params,
        "largest_part_bytes": part,
        "serve_window_s": window,
        "upload_mbit_s_needed": round(8 * part / window / 1e6, 2),
    }


class AuditSpecError(ProtocolError):
    """The run file's ``audits`` section is malformed or out of range."""


@dataclass(frozen=True)
class AuditSpec:
    """What a run fixes about its audits (``run.json``'s ``audits``; absent: the contract defaults)."""

    committee_size: int = 1
    """c: validators on each audit committee (0: every validator)."""
    vesting_rounds: int = 2
    """K: rounds before a round's miner pay vests (forfeited when a proof is confirmed meanwhile)."""
    slash_bps: int = 5_000
    """s: share of a miner's stake one confirmed proof burns (basis points)."""
    miners: int = 4
    """Miners the run plans for: an honest miner's pay R is the miners' share of the emission over them."""
    validators: int = 2
    """V: validators the run plans for (the committee's catch probability uses c against V)."""
    compute_cost: float | None = None
    """C: an honest round's compute in tokens; None takes C = R (break-even mining, the worst case)."""

    def __post_init__(self) -> None:
        ints = ("committee_size", "vesting_rounds", "slash_bps", "miners", "validators")
        for name in ints:
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise AuditSpecError(f"audits.{name} must be a non-negative integer, not {v!r}")
        if self.slash_bps > 10_000 or self.committee_size > 256 or self.vesting_rounds >= 2**16:
            raise AuditSpecError("audits: slash_bps <= 10000, committee_size <= 256, vesting_rounds < 65536")
        if self.miners < 1 or self.validators < 1:
            raise AuditSpecError("audits.miners and audits.validators must be at least 1")
        c = self.compute_cost
        if c is not None and (not isinstance(c, int | float) or isinstance(c, bool) or not c >= 0):
            raise AuditSpecError(f"audits.compute_cost must be a number >= 0 or null, not {c!r}")

    def to_json(self) -> dict[str, Any]:
        """JSON form (``compute_cost`` left out when None)."""
        doc = asdict(self)
        if doc["compute_cost"] is None:
            del doc["compute_cost"]
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> AuditSpec:
        """Parse; :class:`AuditSpecError` on an unknown key or a bad value."""
        if not isinstance(doc, dict):
            raise AuditSpecError("audits must be a JSON object")
        extra = set(doc) - {f.name for f in fields(cls)}
        if extra:
            raise AuditSpecError(f"unknown audits fields {sorted(extra)}")
        return cls(**doc)

    def economics(
        self, min_miner_stake: int, emission_per_round: int, validator_share_bps: int
    ) -> RunEconomics:
        """The formula's inputs at the network's stake and emission (amounts in wei)."""

        reward = emission_per_round * (10_000 - validator_share_bps) / 10_000 / self.miners / TOKEN
        return RunEconomics(
            stake=min_miner_stake / TOKEN,
            slash_fraction=self.slash_bps / 10_000,
            reward=reward,
            compute_cost=reward if self.compute_cost is None else float(self.compute_cost),
            vesting_rounds=self.vesting_rounds,
            committee_size=self.committee_size,
            validators=self.validators,
        )

    def network_params(
        self, min_miner_stake: int, emission_per_round: int, validator_share_bps: int
    ) -> dict[str, int]:
        """The contract's ``audit_rate_bps`` (q from the formula, rounded up, 10000 when no rate below 1
        deters), ``committee_size``, ``vesting_rounds`` and ``slash_bps`` for this run."""

        e = self.economics(min_miner_stake, emission_per_round, validator_share_bps)
        return {
            "audit_rate_bps": audit_rate_bps(e),
            "committee_size": self.committee_size,
            "vesting_rounds": self.vesting_rounds,
            "slash_bps": self.slash_bps,
        }
