"""Security as expected value: the audit rate ``q`` that makes every cheating strategy lose money.

One formula (derived in docs/threat-model.md, "Deterrence as expected value"). Per miner and round, with
stake ``S``, slash fraction ``s``, honest reward ``R``, compute cost ``C`` (tokens), vesting ``K`` rounds,
and a committee that catches a cheat it audits with probability ``eta``:

* a caught miner loses ``L = s S + max(K, 1) R``: the slash plus the pay still in flight (the round's own
  pay is frozen by one proof; with ``K >= 1`` every unvested round is forfeited);
* a strategy gains at most ``G`` per round it cheats (compute saved, or reward taken) and is exposed with
  probability ``q * eta * p`` where ``p`` is the chance that one audit exposes it (``p ~ f`` for a miner
  faking a fraction ``f`` of its steps, which also saves ``~f C``: ``f`` cancels);
* it is deterred with margin ``m`` (2) when ``q eta p L >= m * gain``, so for the lazy miner and for
  withholding when audited (which the contract costs like a caught fake)::

      q* = m * max(C, R) / (eta * L)

and the deployed rate is ``q = ceil(HEADROOM q*)`` in basis points, so that the measured margin (a sample)
stays above ``m`` (:data:`HEADROOM`).

``eta = 1 - (1 - h)^c`` for a committee of ``c`` validators drawn from a set whose honest stake fraction is
``h`` (one honest member's fraud proof freezes the pay; all validators can re-check it); with every
validator on the committee (``c = 0``) ``eta = 1``. ``q* > 1`` means no audit rate deters at this stake:
:func:`min_stake` gives the stake that does at ``q = 1``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from protocol.errors import ProtocolError

MARGIN = 2.0
"""Expected loss over expected gain that every strategy must reach."""
HEADROOM = 1.12
"""Factor by which the deployed audit rate exceeds ``q*``. The realized audit rate and the chance that an
audit lands on a faked step are samples: with ``q`` at ``q*`` (0.5% above it after rounding) the margin
measured from those samples straddled 2 (1.87-2.07 in two draws, docs/benchmarks.md); 12% keeps it above 2
beyond their sampling error at the default stake."""
HONEST_FRACTION = 2 / 3
"""Honest share of validator stake the threat model assumes (slashing and certificate quorum)."""
LAZY_FRACTIONS = (0.01, 0.1, 0.5, 1.0)
"""Fractions of faked steps the model reports."""


class EconomicsError(ProtocolError):
    """Economic inputs out of range (negative amounts, fractions outside [0, 1])."""


@dataclass(frozen=True)
class RunEconomics:
    """A run's economics per miner and round, all amounts in tokens."""

    stake: float
    """S: the miner's slashable stake (the run's minimum miner stake for a Sybil)."""
    slash_fraction: float
    """s: share of the stake one confirmed proof burns (``slash_bps / 10000``)."""
    reward: float
    """R: an honest miner's pay per round (emission x miners' share / miners)."""
    compute_cost: float
    """C: the cost of an honest round's compute in tokens (measured seconds x price; R if unknown)."""
    vesting_rounds: int = 0
    """K: rounds before a round's pay vests (forfeited when caught meanwhile)."""
    committee_size: int = 0
    """c: validators per audit committee (0: all)."""
    validators: int = 3
    """V: validators in the run."""
    honest_fraction: float = HONEST_FRACTION
    """h: honest share of the validators."""

    def __post_init__(self) -> None:
        for name in ("stake", "reward", "compute_cost"):
            if getattr(self, name) < 0:
                raise EconomicsError(f"{name} must be >= 0")
        if not 0.0 <= self.slash_fraction <= 1.0 or not 0.0 <= self.honest_fraction <= 1.0:
            raise EconomicsError("slash_fraction and honest_fraction must lie in [0, 1]")
        if self.vesting_rounds < 0 or self.committee_size < 0 or self.validators < 1:
            raise EconomicsError("vesting_rounds, committee_size >= 0 and validators >= 1")

    def loss_when_caught(self) -> float:
        """``L = s S + max(K, 1) R``: slash plus forfeited pay."""
        return self.slash_fraction * self.stake + max(self.vesting_rounds, 1) * self.reward

    def committee_catch(self) -> float:
        """``eta``: probability that the audit committee holds an honest validator (1 for all validators)."""
        c = self.committee_size
        if c == 0 or c >= self.validators:
            return 1.0
        return 1.0 - (1.0 - self.honest_fraction) ** c

    def max_gain(self) -> float:
        """``G = max(C, R)``: the most one round of cheating can gain (compute saved or a reward taken)."""
        return max(self.compute_cost, self.reward)


def audit_rate(e: RunEconomics, margin: float = MARGIN) -> float:
    """``q* = margin G / (eta L)``; above 1 when no audit rate deters at this stake."""
    denom = e.committee_catch() * e.loss_when_caught()
    return math.inf if denom <= 0 else margin * e.max_gain() / denom


def audit_rate_bps(e: RunEconomics, margin: float = MARGIN, headroom: float = HEADROOM) -> int:
    """The deployed rate (the contract's ``auditRateBps``): ``headroom x q*`` in basis points, rounded up;
    10000 when that reaches 1."""
    return min(10_000, math.ceil(headroom * audit_rate(e, margin) * 10_000 - 1e-9))


def min_stake(e: RunEconomics, q: float = 1.0, margin: float = MARGIN) -> float:
    """The stake at which audit rate ``q`` deters with ``margin`` (0 if the forfeits alone suffice)."""
    if e.slash_fraction <= 0:
        enough = q * e.committee_catch() * max(e.vesting_rounds, 1) * e.reward >= margin * e.max_gain()
        return 0.0 if enough else math.inf
    need = margin * e.max_gain() / (q * e.committee_catch()) - max(e.vesting_rounds, 1) * e.reward
    return max(0.0, need / e.slash_fraction)


@dataclass(frozen=True)
class StrategyRow:
    """One cheating strategy at audit rate ``q``: expected gain and loss per round and their ratio."""

    name: str
    gain: float
    """Expected tokens per round the strategy gains over honest work (compute saved, reward taken)."""
    loss: float
    """Expected tokens per round it loses (slash and forfeits, times the probability of being caught)."""
    p_caught: float
    """Probability per round that a proof (or an unanswered audit) is confirmed against it."""
    how: str
    """What catches it."""

    @property
    def margin(self) -> float:
        """``loss / gain`` (inf when it gains nothing)."""
        return math.inf if self.gain <= 0 else self.loss / self.gain

    @property
    def expected_profit(self) -> float:
        """``gain - loss`` against honest work: negative means cheating loses money."""
        return self.gain - self.loss


def strategy_rows(
    e: RunEconomics, q: float, fractions: Sequence[float] = LAZY_FRACTIONS
) -> list[StrategyRow]:
    """Every strategy the model knows at audit rate ``q`` (every way around an audit among them)."""
    if not 0.0 <= q <= 1.0:
        raise EconomicsError(f"audit rate {q} is not in [0, 1]")
    L, eta, C, R = e.loss_when_caught(), e.committee_catch(), e.compute_cost, e.reward
    rows = []
    for f in fractions:
        p = q * eta * f  # one seed-chosen replayed step lands on a faked one with probability ~f
        rows.append(StrategyRow(f"lazy f={f:g}", f * C, p * L, p, "audit replays a seed-chosen step"))
    # free riders whose update is refused by a check that moves no state (format, commitments, the
    # transcript root and its anchor, usefulness) on every pair, audited or not: paid 0 every round, so
    # there is no reward to gain (the compute they skip buys nothing); a provable failure is slashed on top
    for name, provable in (
        ("free-rider-zero", True),
        ("free-rider-random", True),
        ("free-rider-stale", True),
    ):
        loss = e.slash_fraction * e.stake if provable else 0.0
        rows.append(StrategyRow(name, 0.0, loss, 1.0 if provable else 0.0, "stateless checks: paid 0"))
    p = q * eta
    # the last-delta rider trains nothing and builds its transcript and error feedback from the
    # states it serves: every check that moves no state passes and it is paid R in a round not audited;
    # only an audit stops it -- its replay of any step proves it (every step is made up), or, if it hangs
    # instead, the unanswered report costs the same
    rows.append(StrategyRow("free-rider-last-delta", C, p * L, p, "audit only: a replayed step (proof)"))
    rows.append(StrategyRow("free-rider-last-delta-hang", C, p * L, p, "audit only: unanswered (hang)"))
    # every way around an audit is an unanswered audit, confirmed by the committee and its
    # witnesses and costed like a caught fake; the gain is what the dodge hides (at most C)
    for name in (
        "withholding-when-audited",
        "hang-when-audited",
        "drip-when-audited",
        "update-withheld",
    ):
        rows.append(StrategyRow(name, C, p * L, p, "committee quorum: unanswered"))
    # trains honestly (saves nothing) and bends its update to take up to one more share of the reward;
    # the update-to-transcript tie (error feedback) fails on every audit
    rows.append(StrategyRow("overfit-scorer", R, p * L, p, "audit checks the update-transcript tie"))
    # n identities at the minimum stake: each is a miner with S = min stake, nothing is shared between them
    rows.append(StrategyRow("sybil (per identity, f=1)", C, p * L, p, "each identity audited alone"))
    return rows
