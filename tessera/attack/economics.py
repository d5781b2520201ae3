"""The detection and profit model of cheating, as pure math.

Detection of one validator is ``validator.sampling``'s model (reused, not duplicated): a miner whose
transcript has ``S`` segments and that fakes a fraction ``f`` of its inner steps spoils ``b = ceil(f S)``
segments at best; a validator that replays ``m`` seed-chosen segments misses all of them with probability
``C(S - b, m) / C(S, m)``. Validators take coordinated windows of one seed-chosen order of the segments
(``validator.sampling``), so they check ``min(S, V m)`` distinct segments between them and their catches
are dependent; every function here takes ``coordinated=False`` for independent draws (the old rule).

This module adds what the settlement makes of detections:

- **Reward zeroed.** The consensus score of a miner is the stake-weighted *lower* median of the revealed
  scores (``Consensus.isWeightedMedian``). A validator that catches the miner scores it 0, the others
  score it as if honest, so the median is 0 exactly when the catching validators hold at least half the
  revealed weight. With two equal validators one catch suffices; with three, two are needed.
  :func:`p_reward_zeroed` computes this exactly: for coordinated windows by inclusion-exclusion over the
  sets of validators that all miss (a set ``T`` misses when every bad segment lies outside the union of
  its windows: ``C(S - |U_T|, b) / C(S, b)``), for independent draws by a dynamic programme over weights.
- **Slashed.** Slashing needs votes of 2/3 of the validator stake on one evidence hash. If validators
  vote after re-running a peer's evidence (it is reproducible), one catch suffices:
  ``p_slash = 1 - prod(miss_i)`` (:func:`p_detect_any`). If each only votes on what it caught itself,
  catchers must hold 2/3 (:func:`p_reward_zeroed` with ``quorum=2/3``).

Profit per round, with reward ``R`` (what an honest miner earns), compute cost ``c`` (an honest round's
compute), stake ``K`` and slash fraction ``s``; a strategy spends ``(1 - saved) c``, keeps its reward with
probability ``1 - p_zero`` and is slashed with probability ``p_slash``::

    E[profit]         = (1 - p_zero) R - (1 - saved) c - p_slash s K
    E[advantage]      = E[profit] - (R - c) = saved c - p_zero R - p_slash s K

Every cheating strategy is deterred when its advantage over honest work is negative, and it is a
losing business outright when its expected profit is negative; :func:`min_stake` gives the stake at which
each holds. Deterministic checks (format, digest, header, norms, attestation, cosine) catch with
probability 1; only faked inner steps are caught by sampling.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tessera.attack.errors import ModelInputError
from validator.sampling import catch_probability_round, window


def bad_segments(f: float, n_segments: int) -> int:
    """Segments a miner faking a fraction ``f`` of its steps must spoil at least (0 when ``f <= 0``)."""
    if not 0.0 <= f <= 1.0:
        raise ModelInputError(f"fraction of faked steps {f} is not in [0, 1]")
    if f == 0.0:
        return 0
    return min(n_segments, max(1, math.ceil(f * n_segments - 1e-12)))


def p_one_validator(f: float, n_segments: int, m: int, q: float = 1.0) -> float:
    """Probability that one validator replaying ``m`` of ``n_segments`` catches the miner in a round."""
    return catch_probability_round(f, n_segments, m, validators=1, q=q)


def p_detect_any(
    f: float, n_segments: int, m: int, validators: int, q: float = 1.0, *, coordinated: bool = True
) -> float:
    """Probability that at least one of ``validators`` validators catches the miner.

    ``q`` is the per-round recomputation probability of an attested miner (1 otherwise); the seed
    coin is shared by all validators, so it multiplies the whole expression.
    """
    return catch_probability_round(f, n_segments, m, validators=validators, q=q, coordinated=coordinated)


#: Most validators :func:`p_reward_zeroed` enumerates exactly for coordinated windows (3^V terms).
MAX_EXACT_VALIDATORS = 12


def _coordinated_weight_catches(
    b: int, n_segments: int, m: int, weights: Sequence[int], num: int, den: int
) -> float:
    """P(the validators that catch hold ``>= num/den`` of the weight), windows in slot order."""
    v = len(weights)
    if v > MAX_EXACT_VALIDATORS:
        raise ModelInputError(
            f"{v} validators: the exact coordinated model enumerates at most {MAX_EXACT_VALIDATORS}"
        )
    wins = [set(window(i, n_segments, m)) for i in range(v)]
    total_c = math.comb(n_segments, b)
    # g[T]: P(every validator in T misses) = P(all bad segments outside the union of T's windows)
    g = []
    for mask in range(1 << v):
        cover: set[int] = set()
        for i in range(v):
            if mask >> i & 1:
                cover |= wins[i]
        g.append(math.comb(n_segments - len(cover), b) / total_c)
    total = sum(weights)
    out = 0.0
    full = (1 << v) - 1
    for missers in range(1 << v):
        caught_w = sum(weights[i] for i in range(v) if not missers >> i & 1)
        if den * caught_w < num * total:
            continue
        # P(exactly these miss) by Moebius inversion over the supersets of ``missers``
        rest = full & ~missers
        sub, acc = rest, 0.0
        while True:
            extra = bin(sub).count("1")
            acc += (-1) ** extra * g[missers | sub]
            if sub == 0:
                break
            sub = (sub - 1) & rest
        out += acc
    return min(1.0, max(0.0, out))


def p_weight_catches(p_catch: float, weights: Sequence[int], quorum: float = 0.5) -> float:
    """Probability that validators catching independently with ``p_catch`` hold ``>= quorum`` of ``weights``."""
    if not 0.0 <= p_catch <= 1.0:
        raise ModelInputError(f"probability {p_catch} is not in [0, 1]")
    if not weights or any(w < 0 for w in weights):
        raise ModelInputError("weights must be a non-empty list of non-negative integers")
    total = sum(weights)
    if total == 0:
        return 0.0
    dist: dict[int, float] = {0: 1.0}
    for w in weights:
        nxt: dict[int, float] = {}
        for acc, pr in dist.items():
            nxt[acc + w] = nxt.get(acc + w, 0.0) + pr * p_catch
            nxt[acc] = nxt.get(acc, 0.0) + pr * (1.0 - p_catch)
        dist = nxt
    # ">= quorum" exactly as the contract: 2 * caught >= total (median), 3 * caught >= 2 * total (slash)
    num, den = _ratio(quorum)
    return sum(pr for acc, pr in dist.items() if den * acc >= num * total)


def _ratio(q: float) -> tuple[int, int]:
    if math.isclose(q, 0.5):
        return 1, 2
    if math.isclose(q, 2 / 3):
        return 2, 3
    frac = round(q * 1_000_000)
    return frac, 1_000_000


def p_reward_zeroed(
    f: float,
    n_segments: int,
    m: int,
    weights: Sequence[int],
    q: float = 1.0,
    quorum: float = 0.5,
    *,
    coordinated: bool = True,
) -> float:
    """Probability that a miner faking ``f`` of its steps has its consensus score (and reward) zeroed.

    ``weights`` are the revealed stakes of the honest validators (each replays ``m`` segments), in slot
    order (ascending address) for coordinated windows.
    """
    if not coordinated:
        return q * p_weight_catches(p_one_validator(f, n_segments, m), weights, quorum)
    if not weights or any(w < 0 for w in weights):
        raise ModelInputError("weights must be a non-empty list of non-negative integers")
    b = bad_segments(f, n_segments)
    if b == 0 or sum(weights) == 0:
        return 0.0
    num, den = _ratio(quorum)
    return q * _coordinated_weight_catches(b, n_segments, m, weights, num, den)


def p_within(p_round: float, rounds: int) -> float:
    """Probability of at least one detection within ``rounds`` independent rounds."""
    if rounds < 0 or not 0.0 <= p_round <= 1.0:
        raise ModelInputError("rounds must be >= 0 and p_round in [0, 1]")
    return 1.0 - (1.0 - p_round) ** rounds


def rounds_to_confidence(p_round: float, confidence: float = 0.95) -> float:
    """Rounds needed for ``P(caught within n) >= confidence`` (inf if ``p_round`` is 0)."""
    if p_round <= 0.0:
        return math.inf
    if p_round >= 1.0:
        return 1.0
    return float(math.ceil(math.log(1.0 - confidence) / math.log(1.0 - p_round)))


@dataclass(frozen=True)
class Economy:
    """The economic parameters of one round for one miner (all in the same unit, e.g. tokens)."""

    reward: float
    """R: what an honest miner earns per round."""
    compute_cost: float
    """c: the cost of an honest round's compute."""
    stake: float
    """K: the miner's stake (plus unbonding stake, which is slashable too)."""
    slash_fraction: float
    """s: fraction of the stake one slash takes (``slashBps / 10_000``)."""


@dataclass(frozen=True)
class Strategy:
    """A cheating strategy: what it saves and how it is caught per round."""

    name: str
    saved: float
    """Fraction of an honest round's compute it does not spend."""
    p_zero: float
    """Probability per round that its consensus reward is zeroed."""
    p_slash: float
    """Probability per round that it is slashed."""

    def expected_profit(self, e: Economy) -> float:
        """``(1 - p_zero) R - (1 - saved) c - p_slash s K``."""
        return (
            (1.0 - self.p_zero) * e.reward
            - (1.0 - self.saved) * e.compute_cost
            - self.p_slash * e.slash_fraction * e.stake
        )

    def advantage(self, e: Economy) -> float:
        """Expected profit minus an honest miner's ``R - c``."""
        return self.expected_profit(e) - (e.reward - e.compute_cost)


def min_stake(
    strategy: Strategy, reward: float, compute_cost: float, slash_fraction: float
) -> dict[str, float]:
    """The stake above which the strategy's expected profit (``profit``) and advantage over honest work
    (``advantage``) are negative; ``inf`` when no stake deters it (never slashed), 0 when any does."""
    if slash_fraction <= 0 or strategy.p_slash <= 0:
        zero = Economy(reward, compute_cost, 0.0, max(slash_fraction, 0.0))
        return {
            "profit": 0.0 if strategy.expected_profit(zero) < 0 else math.inf,
            "advantage": 0.0 if strategy.advantage(zero) < 0 else math.inf,
        }
    denom = strategy.p_slash * slash_fraction
    profit_no_slash = (1.0 - strategy.p_zero) * reward - (1.0 - strategy.saved) * compute_cost
    adv_no_slash = strategy.saved * compute_cost - strategy.p_zero * reward
    return {"profit": max(0.0, profit_no_slash / denom), "advantage": max(0.0, adv_no_slash / denom)}


def lazy_strategy(
    f: float,
    n_segments: int,
    m: int,
    weights: Sequence[int],
    *,
    q: float = 1.0,
    evidence_shared: bool = True,
    coordinated: bool = True,
) -> Strategy:
    """A miner faking ``f`` of its inner steps (saves about ``f`` of its compute).

    ``evidence_shared=True`` is what the validator node does since F8: on a slash proposal it re-runs the
    proposer's failing segment and votes if it fails, so one catch leads to a slash; ``False`` models
    validators that vote only on their own failed check (catchers must hold 2/3 of the stake).
    """
    p_zero = p_reward_zeroed(f, n_segments, m, weights, q, coordinated=coordinated)
    if evidence_shared:
        p_slash = p_detect_any(f, n_segments, m, len(weights), q, coordinated=coordinated)
    else:
        p_slash = p_reward_zeroed(f, n_segments, m, weights, q, quorum=2 / 3, coordinated=coordinated)
    return Strategy(f"lazy f={f:g}", f, p_zero, p_slash)


def deterministic_strategy(name: str, saved: float, provable: bool) -> Strategy:
    """A cheat every honest validator catches every round (free rider, poisoner, copier, forger...)."""
    return Strategy(name, saved, 1.0, 1.0 if provable else 0.0)


#: The miner strategies of the attack suite: (name, compute saved, provable).
DETERMINISTIC: tuple[tuple[str, float, bool], ...] = (
    ("free-rider-zero", 1.0, True),
    ("free-rider-random", 1.0, True),
    ("free-rider-stale", 1.0, True),
    ("copier-update", 1.0, True),
    ("copier-commitment", 1.0, False),
    ("replayer-update", 1.0, True),
    ("replayer-quote", 0.0, True),
    ("poisoner-nan", 0.0, True),
    ("poisoner-huge", 0.0, True),
    ("poisoner-flip", 0.0, True),
    ("forger", 0.0, True),
    ("withholder", 1.0, False),
    # trains honestly, then bends the update towards what it guesses is scored: the update no longer is
    # the compression of (theta_r - its final state) + its residual, which every validator recomputes
    ("overfit-after-honest", 0.0, True),
)


def strategy_table(
    *,
    n_segments: int,
    m: int,
    weights: Sequence[int],
    economy: Economy,
    fractions: Sequence[float] = (0.1, 0.34, 0.5, 1.0),
    q: float = 1.0,
) -> list[dict[str, Any]]:
    """One row per strategy: detection probabilities, expected profit and advantage, and minimum stakes."""
    strategies = [deterministic_strategy(n, s, p) for n, s, p in DETERMINISTIC]
    strategies += [lazy_strategy(f, n_segments, m, weights, q=q) for f in fractions]
    # fits the batch it knows at commit time with all its steps (saves nothing): every segment but the
    # first is spoiled, and the score is measured on windows it could not know anyway
    spoiled = lazy_strategy((n_segments - 1) / n_segments, n_segments, m, weights, q=q)
    strategies.append(Strategy("overfit-scorer", 0.0, spoiled.p_zero, spoiled.p_slash))
    rows = []
    for st in strategies:
        row: dict[str, Any] = asdict(st)
        row["expected_profit"] = st.expected_profit(economy)
        row["advantage"] = st.advantage(economy)
        row["min_stake"] = min_stake(st, economy.reward, economy.compute_cost, economy.slash_fraction)
        row["rounds_to_95"] = rounds_to_confidence(st.p_slash if st.p_slash > 0 else st.p_zero)
        rows.append(row)
    return rows
