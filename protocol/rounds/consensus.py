"""Reference scoring and consensus of a round, identical to the Solidity ``Consensus`` library to the wei.

The on-chain contract (contracts/src/Consensus.sol, used by ``TesseraNetwork.finalize``) and this module
compute the same integers: the stake-weighted lower median of each miner's column of validator scores, the
miner payouts (budget split by consensus score) and the validator payouts (budget split by
``weight * closeness``). ``python -m protocol.rounds.consensus --write-vectors FILE`` writes the JSON vectors that
the forge test ``test/Vectors.t.sol`` replays, so the two implementations cannot drift apart.

Scores are integers in ``[0, SCORE_MAX]``; all divisions are floor divisions; rounding dust stays in the
reward pool.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from protocol.errors import ProtocolError
from protocol.wire.vectors import vectors_file, vectors_main

SCORE_MAX = 10_000
"""Largest score a validator may give a miner."""
BPS = 10_000
"""Basis-point denominator."""


class ConsensusError(ProtocolError):
    """Inputs that the contract would reject (wrong shapes, scores out of range)."""


def weighted_median(column: Sequence[int], weights: Sequence[int]) -> int:
    """The stake-weighted lower median: the smallest score ``m`` with ``2 * weight(score <= m) >= W``.

    With no weight at all (``W == 0``) it is 0, as on-chain.
    """
    if len(column) != len(weights):
        raise ConsensusError(f"{len(column)} scores but {len(weights)} weights")
    total = sum(weights)
    if total == 0:
        return 0
    acc = 0
    for score, weight in sorted(zip(column, weights, strict=True)):
        acc += weight
        if 2 * acc >= total:
            return score
    raise AssertionError("unreachable: the weights sum to total")


def is_weighted_median(column: Sequence[int], weights: Sequence[int], m: int) -> bool:
    """The contract's O(n) check: ``2 * weight(< m) < W <= 2 * weight(<= m)`` (or ``m == 0`` if ``W == 0``)."""
    total = sum(weights)
    if total == 0:
        return m == 0
    below = sum(w for s, w in zip(column, weights, strict=True) if s < m)
    at_or_below = sum(w for s, w in zip(column, weights, strict=True) if s <= m)
    return 2 * below < total <= 2 * at_or_below


def restrict(weights: Sequence[int], counted: Sequence[bool]) -> list[int]:
    """``Consensus.restrict``: the weights of the revealers that count for an audited miner (its
    committee); every revealer's when none of those holds any weight."""
    out = [w if c else 0 for w, c in zip(weights, counted, strict=True)]
    return out if sum(out) else list(weights)


def miner_payouts(medians: Sequence[int], budget: int) -> list[int]:
    """Splits ``budget`` in proportion to the consensus scores (floor); all zero if every score is 0."""
    total = sum(medians)
    if total == 0:
        return [0] * len(medians)
    return [budget * m // total for m in medians]


def closeness(scores: Sequence[int], medians: Sequence[int]) -> int:
    """``n * SCORE_MAX - sum |s_j - m_j|`` (1 when there are no miners)."""
    if not medians:
        return 1
    return len(medians) * SCORE_MAX - sum(abs(s - m) for s, m in zip(scores, medians, strict=True))


def validator_payouts(weights: Sequence[int], closenesses: Sequence[int], budget: int) -> list[int]:
    """Splits ``budget`` in proportion to ``weight * closeness`` (floor); all zero if that sums to 0."""
    products = [w * c for w, c in zip(weights, closenesses, strict=True)]
    total = sum(products)
    if total == 0:
        return [0] * len(weights)
    return [budget * p // total for p in products]


@dataclass(frozen=True)
class Payouts:
    """What ``finalize`` credits for one round, by position (miners and revealers in ascending address
    order); ``protocol.rounds.coordinator.Settlement`` is the same by address, as the nodes read it."""

    medians: list[int]
    """Consensus score per miner."""
    miner_pay: list[int]
    """Wei credited to each miner."""
    validator_pay: list[int]
    """Wei credited to each revealing validator."""
    budget: int
    """The round's budget (``min(emission, pool)``)."""


def settle(
    scores: Sequence[Sequence[int]],
    weights: Sequence[int],
    budget: int,
    validator_share_bps: int,
    n_miners: int | None = None,
    counted: Sequence[Sequence[bool]] | None = None,
) -> Payouts:
    """Computes a round's settlement exactly like ``TesseraNetwork.finalize``.

    ``scores[i][j]`` is revealer i's score of miner j (revealers and miners in ascending address order),
    ``weights[i]`` the revealer's weight (stake at reveal). ``n_miners`` is needed only when nobody
    revealed. ``counted[j][i]``: whether revealer i scores miner j (an audited miner is settled on its
    committee only: ``protocol.rounds.audits.counted_matrix``); None: everyone counts everywhere.
    """
    if len(scores) != len(weights):
        raise ConsensusError(f"{len(scores)} score vectors but {len(weights)} weights")
    n = n_miners if n_miners is not None else (len(scores[0]) if scores else 0)
    for i, row in enumerate(scores):
        if len(row) != n:
            raise ConsensusError(f"score vector {i} has {len(row)} entries, expected {n}")
        for j, s in enumerate(row):
            if not 0 <= s <= SCORE_MAX:
                raise ConsensusError(f"score [{i}][{j}] = {s} outside [0, {SCORE_MAX}]")
    if counted is not None and len(counted) != n:
        raise ConsensusError(f"{len(counted)} committee masks for {n} miners")
    medians = [
        weighted_median(
            [row[j] for row in scores], weights if counted is None else restrict(weights, counted[j])
        )
        for j in range(n)
    ]
    v_budget = budget * validator_share_bps // BPS
    miner_pay = miner_payouts(medians, budget - v_budget)
    validator_pay = validator_payouts(weights, [closeness(row, medians) for row in scores], v_budget)
    return Payouts(medians=medians, miner_pay=miner_pay, validator_pay=validator_pay, budget=budget)


def vector_case(
    scores: list[list[int]], weights: list[int], budget: int, bps: int, n: int, masks: list[int] | None = None
) -> dict[str, object]:
    """One cross-language case: the inputs and what :func:`settle` makes of them. ``masks[j]`` is miner
    j's committee as a bitmap over revealer positions (None: every revealer counts for every miner)."""
    full = (1 << len(weights)) - 1
    masks = masks if masks is not None else [full] * n
    counted = [[bool(m >> i & 1) for i in range(len(weights))] for m in masks]
    st = settle(scores, weights, budget, bps, n_miners=n, counted=counted)
    return {
        "n_validators": len(weights),
        "n_miners": n,
        "scores": [s for row in scores for s in row],  # row-major
        "weights": [str(w) for w in weights],
        "budget": str(budget),
        "validator_share_bps": bps,
        "committees": [str(m) for m in masks],
        "medians": st.medians,
        "miner_pay": [str(p) for p in st.miner_pay],
        "validator_pay": [str(p) for p in st.validator_pay],
    }


def make_vectors(count: int = 40, seed: int = 20261122) -> dict[str, object]:
    """Deterministic random cases (plus edge cases) for the cross-language test."""
    rng = random.Random(seed)
    cases: list[dict[str, object]] = []

    def add(
        scores: list[list[int]],
        weights: list[int],
        budget: int,
        bps: int,
        n: int,
        masks: list[int] | None = None,
    ) -> None:
        cases.append(vector_case(scores, weights, budget, bps, n, masks))

    add([], [], 10**21, 2000, 3)  # nobody revealed
    add([[0, 0], [0, 0]], [5, 7], 10**21, 2000, 2)  # all zero
    add([[10_000, 1], [0, 2], [5_000, 3]], [1, 1, 1], 999, 5000, 2)  # dust
    add([[7, 7, 7]], [10**24], 10**21 + 7, 0, 3)  # single validator, no validator share
    # committees: miner 0 settled on revealer 2 alone (it proved a fake), miner 1 on nobody (fall back)
    add([[9_000, 5_000], [9_000, 5_000], [0, 4_000]], [1, 1, 1], 10**21, 2000, 2, [0b100, 0])
    for _ in range(count):
        nv = rng.randint(1, 8)
        nm = rng.randint(0, 12)
        weights = [rng.choice([0, 1, rng.randint(1, 10**24)]) for _ in range(nv)]
        if sum(weights) == 0:
            weights[0] = 10**21
        clustered = rng.random() < 0.5
        base = [rng.randint(0, SCORE_MAX) for _ in range(nm)]
        scores = [
            [
                min(SCORE_MAX, max(0, b + rng.randint(-300, 300))) if clustered else rng.randint(0, SCORE_MAX)
                for b in base
            ]
            for _ in range(nv)
        ]
        masks = [rng.choice([(1 << nv) - 1, rng.randint(0, (1 << nv) - 1)]) for _ in range(nm)]
        add(
            scores,
            weights,
            rng.choice([10**21, 10**18 + 1, rng.randint(1, 10**24)]),
            rng.randint(0, BPS),
            nm,
            masks,
        )
    return vectors_file("protocol/rounds/consensus.py", cases)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m protocol.rounds.consensus --write-vectors FILE`` (``protocol.wire.vectors``)."""
    return vectors_main(make_vectors, __doc__.splitlines()[0], argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
