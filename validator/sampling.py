"""Which transcript segments a validator recomputes, and the probability model behind the choice.

Selection, coordinated (what the node does): ``segment_order(seed, miner, S)`` is a permutation of the
miner's ``S`` transcript segments drawn with SHA-256 over (round seed, miner), the same for every
validator; the validator in slot ``i`` of the round's ``V`` validators (ascending address order) replays
the ``k = min(m, S)`` segments at positions ``i*k .. i*k + k - 1`` (mod ``S``) of that order. The round seed
is fixed only after the update commits closed, so a miner cannot know in advance which of its segments
will be recomputed, and the validators' windows do not overlap until they cover every segment: together
they check ``min(S, V*k)`` distinct segments instead of, drawing independently, fewer (with ``S = 3``,
``m = 2`` and two validators, every segment, so a faked segment is always caught). A validator outside the
set (a test, an observer) draws independently with its address as salt.

Model. A miner whose transcript has ``S`` segments fakes a fraction ``f`` of its inner steps. A faked step
makes its whole segment fail recomputation, so the miner's best strategy is to pack the faked steps into
as few segments as possible: ``b = ceil(f * S)`` bad segments (one faked step in a segment already costs
the segment; at least one segment is bad whenever ``f > 0``). The order is a uniform permutation, so the
bad segments sit at a uniform ``b``-subset of positions, and validators whose windows cover ``u``
positions all miss with probability ``C(S - u, b) / C(S, b)``: one validator ``C(S - k, b) / C(S, b)``
(equal to drawing ``k`` of ``S`` at random), all ``V`` together ``C(S - min(S, V*k), b) / C(S, b)``.
Independent draws (the old rule) miss with ``(C(S - b, k) / C(S, k)) ** V``. Over ``R`` rounds:
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
from collections.abc import Sequence


def segment_order(seed: bytes, miner: str, n_segments: int) -> list[int]:
    """The round's permutation of a miner's segments (Fisher-Yates over SHA-256 draws), the same for every
    validator."""
    order = list(range(n_segments))
    for i in range(n_segments - 1, 0, -1):
        h = hashlib.sha256(b"tessera.segment-order\0" + seed + miner.encode() + struct.pack("<Q", i)).digest()
        j = int.from_bytes(h[:8], "big") % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def window(slot: int, n_segments: int, m: int) -> list[int]:
    """Positions (in :func:`segment_order`) that the validator in ``slot`` replays."""
    k = min(m, n_segments)
    return [(slot * k + j) % n_segments for j in range(k)] if n_segments > 0 else []


def validator_slot(validator: str, validators: Sequence[str]) -> int | None:
    """``validator``'s index among ``validators`` in ascending address order (None if not one of them)."""
    ordered = sorted({v.lower() for v in validators}, key=lambda a: int(a, 16) if a.startswith("0x") else 0)
    try:
        return ordered.index(validator.lower())
    except ValueError:
        return None


def segments_to_check(
    seed: bytes, miner: str, n_segments: int, m: int, salt: bytes = b"", *, slot: int | None = None
) -> list[int]:
    """``min(m, n_segments)`` distinct segment indices in ``[0, n_segments)``, sorted: the ``slot``'s window
    of the round's order (coordinated), or, without a slot, an independent draw salted with ``salt``."""
    if n_segments <= 0:
        return []
    if slot is not None:
        order = segment_order(seed, miner, n_segments)
        return sorted({order[p] for p in window(slot, n_segments, m)})
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


def catch_probability_round(
    f: float, n_segments: int, m: int, validators: int = 1, q: float = 1.0, *, coordinated: bool = True
) -> float:
    """Probability that a miner faking a fraction ``f`` of its steps is caught in one round by at least one
    of ``validators`` (coordinated windows, or independent draws with ``coordinated=False``)."""
    if f <= 0:
        return 0.0
    bad = min(n_segments, max(1, math.ceil(f * n_segments - 1e-12)))
    m = min(m, n_segments)
    if coordinated:
        covered = min(n_segments, validators * m)
        return q * (1.0 - math.comb(n_segments - covered, bad) / math.comb(n_segments, bad))
    miss_one = math.comb(n_segments - bad, m) / math.comb(n_segments, m)
    return q * (1.0 - miss_one**validators)


def catch_probability(
    f: float,
    n_segments: int,
    m: int,
    rounds: int,
    validators: int = 1,
    q: float = 1.0,
    *,
    coordinated: bool = True,
) -> float:
    """Probability of being caught at least once within ``rounds`` rounds."""
    p = catch_probability_round(f, n_segments, m, validators, q, coordinated=coordinated)
    return 1.0 - (1.0 - p) ** rounds


def min_stake_for_negative_profit(gain: float, p_round: float, slash_fraction: float) -> float:
    """Smallest stake at which faking has negative expected profit per round."""
    if p_round <= 0:
        return math.inf
    return (1.0 - p_round) * gain / (p_round * slash_fraction)


def recompute_cost_fraction(segment_steps: int, m: int, total_steps: int, q: float = 1.0) -> float:
    """Recomputed steps per validator as a fraction of the miner's training steps."""
    return q * m * segment_steps / total_steps
