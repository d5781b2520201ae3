"""Assignment epochs on the chain: the seed and registry a round's assignment is drawn from.

With ``epoch_rounds`` = E in the run file (``protocol.runspec.RunSpec``; above 1 only in DiPaCo mode),
the rounds are cut into epochs of E from round 0 (``training.assignment.epoch_start``). Rounds start at 1,
so the first epoch is rounds 1 .. E - 1 and its first round is 1. Of a round r in the epoch whose first
round is f:

- its **epoch seed** is ``seed(f - 1)``, the assignment seed of the epoch's first round (for the first
  epoch ``seed(0)``, the genesis seed, as round 1's ``assign_seed``); it was fixed before round f opened;
- its **epoch registry** is the registry of round f (``Coordinator.miners(f)``); a miner registered later
  in the epoch is ranked after the epoch's miners (``training.assignment.assign_in_epoch``), so it trains
  from its first round and nobody's path moves before the epoch ends;
- its batches still come from its own ``assign_seed`` = ``seed(r - 1)``.

With E = 1 every round is its epoch's first: the epoch seed is ``assign_seed`` and the registries are the
round's, so nothing is read and the assignments are those of :func:`training.assignment.assign`.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.rounds.coordinator import Coordinator, CoordinatorError
from training.assignment import epoch_start


@dataclass(frozen=True)
class RoundEpoch:
    """What a round's assignment is drawn from."""

    first_round: int
    """The epoch's first round on the chain (1 for the first epoch)."""
    seed: bytes
    """The epoch seed: ``seed(first_round - 1)``."""
    registry: list[str]
    """The epoch registry: the miners registered before ``first_round`` opened."""


def epoch_first_round(round: int, epoch_rounds: int) -> int:
    """The first round on the chain of the epoch holding ``round`` (rounds start at 1)."""
    return max(epoch_start(round, epoch_rounds), 1)


def round_epoch(coord: Coordinator, round: int, assign_seed: bytes, epoch_rounds: int) -> RoundEpoch:
    """The epoch of ``round``, whose assignment seed is ``assign_seed``, read from ``coord``; raises
    :class:`CoordinatorError` if the epoch's seed is not fixed (it always is once its first round opened)."""
    first = epoch_first_round(round, epoch_rounds)
    if first == round:
        return RoundEpoch(first, assign_seed, coord.miners(round))
    seed = coord.seed(first - 1)
    if seed is None:
        raise CoordinatorError(f"seed of round {first - 1} (epoch of round {round}) is not fixed")
    return RoundEpoch(first, seed, coord.miners(first))
