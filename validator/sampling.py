"""Which transcript segments a validator recomputes, and the probability model behind the choice.

Selection: ``segments_to_check(seed, miner, n_segments, m)`` draws ``m`` distinct segment indices with
SHA-256 over (round seed, miner), where the round seed is fixed only after the update commits closed,
so a miner cannot know in advance which of its segments will be recomputed.

Model. A miner whose transcript has ``S`` segments fakes a fraction ``f`` of its inner steps. A faked step
makes its whole segment fail recomputation, so the miner's best strategy is to pack the faked steps into
as few segments as possible: ``b = ceil(f * S)`` bad segments (one faked step in a segment already costs
the segment; at least one segment is bad whenever ``f > 0``). A validator that recomputes ``m`` of the
``S`` segments uniformly without replacement misses every bad one with probability
``C(S - b, m) / C(S, m)``; with ``V`` validators drawing independently (each mixes its own address into the
draw) the round's miss probability is that to the power ``V``. Over ``R`` rounds:
``P(caught within R) = 1 - miss**R``. Attested miners are recomputed only in a fraction ``q`` of rounds
(chosen with the seed), so their per-round catch probability is multiplied by ``q``.

Expected profit of faking (per round): ``(1 - p) * reward_saved_compute - p * slash * stake``, where ``p``
is the per-round catch probability; faking is unprofitable whenever
``slash * stake > (1 - p) / p * gain``. :func:`min_stake_for_negative_profit` returns that bound.
"""

from __future__ import annotations

import hashlib
import math
import struct


def segments_to_check(seed: bytes, miner: str, n_segments: int, m: int, salt: bytes = b"") -> list[int]:
    """``min(m, n_segments)`` distinct segment indices in ``[0, n_segments)``, sorted."""
    if n_segments <= 0:
        return []
    m = min(m, n_segments)
    pool = list(range(n_segments))
    out: list[int] = []
    counter = 0
    while len(out) < m:
        h = hashlib.sha256(
            b"tessera.segments\0" + seed + miner.encode() + salt + struct.pack("<Q", counter)
        ).digest()
        idx = int.from_bytes(h[:8], "big") % len(pool)
        out.append(pool.pop(idx))
        counter += 1
    return sorted(out)


def check_this_round(seed: bytes, miner: str, probability: float) -> bool:
    """Whether an attested miner is recomputed this round (a seed-chosen coin with ``probability``)."""
    h = hashlib.sha256(b"tessera.attested-check\0" + seed + miner.encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64 < probability


def catch_probability_round(f: float, n_segments: int, m: int, validators: int = 1, q: float = 1.0) -> float:
    """Probability that a miner faking a fraction ``f`` of its steps is caught in one round."""
    if f <= 0:
        return 0.0
    bad = min(n_segments, max(1, math.ceil(f * n_segments - 1e-12)))
    m = min(m, n_segments)
    miss_one = math.comb(n_segments - bad, m) / math.comb(n_segments, m)
    return q * (1.0 - miss_one**validators)


def catch_probability(
    f: float, n_segments: int, m: int, rounds: int, validators: int = 1, q: float = 1.0
) -> float:
    """Probability of being caught at least once within ``rounds`` rounds."""
    p = catch_probability_round(f, n_segments, m, validators, q)
    return 1.0 - (1.0 - p) ** rounds


def min_stake_for_negative_profit(gain: float, p_round: float, slash_fraction: float) -> float:
    """Smallest stake at which faking has negative expected profit per round."""
    if p_round <= 0:
        return math.inf
    return (1.0 - p_round) * gain / (p_round * slash_fraction)


def recompute_cost_fraction(segment_steps: int, m: int, total_steps: int, q: float = 1.0) -> float:
    """Recomputed steps per validator as a fraction of the miner's training steps."""
    return q * m * segment_steps / total_steps
