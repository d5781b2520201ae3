"""The run file's audit section: the inputs of ``protocol.rounds.economics`` and the contract parameters
they give (issue 26).

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
from protocol.rounds.economics import RunEconomics, audit_rate_bps

TOKEN = 10**18
"""Wei per token (the economics are in tokens, the contract in wei)."""


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
