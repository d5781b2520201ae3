"""Who trains what: a pure function from (round seed, ordered miner registry, model config) to assignments.

Anyone holding the round seed and the registry recomputes the same assignments. Order comes from
SHA-256 ranks (``sha256(seed || tag || item)``), so a miner cannot choose its place, and the result is
balanced by construction:

- ``moe``/``dense``: every miner trains the shared modules (``embed``, ``trunk.*``, ``head``) plus, in
  each MoE layer, ``experts_per_miner`` consecutive experts of a seed-ranked ring starting at its rank,
  so the number of miners training each expert differs by at most one. Its data shard is its rank
  (``n_shards`` = number of miners): a contiguous slice of the training stream.
- ``dipaco``: miner of rank j trains the path ``ranked_paths[j % P]`` (``embed``, that path's level
  blocks, ``head``); its data shard is the path's index in ``all_paths`` (the documents the router sends
  to that path), so paths are covered round-robin and each path's miners share its documents.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from training.config import ModelConfig
from training.errors import AssignmentError
from training.model import Path, all_paths, module_ids, path_module_ids, shared_module_ids


@dataclass(frozen=True)
class Assignment:
    """One miner's work for a round."""

    miner: str
    """The miner's address (as given in the registry)."""
    rank: int
    """Its seed-ranked position among the round's miners (0-based)."""
    module_ids: tuple[str, ...]
    """Modules it trains, in the model's canonical order."""
    shard: int
    """Index of its data shard (see ``training.data.miner_batches``)."""
    n_shards: int
    """Number of data shards in the round."""
    path: Path | None = None
    """The DiPaCo path it trains (``dipaco`` mode), else None."""


def _rank(seed: bytes, tag: bytes, items: Sequence[str]) -> list[str]:
    return sorted(items, key=lambda s: (hashlib.sha256(seed + tag + s.encode()).digest(), s))


def assign(
    seed: bytes,
    miners: Sequence[str],
    cfg: ModelConfig,
    experts_per_miner: int | None = None,
    late: Sequence[str] = (),
) -> dict[str, Assignment]:
    """Assignments of ``miners`` for the round with ``seed``; ``experts_per_miner`` defaults to ``top_k``.
    ``late`` (miners that joined after ``miners`` was fixed, :func:`assign_in_epoch`) are ranked after
    every miner of ``miners``, among themselves by the same seed, so nobody of ``miners`` moves."""
    everyone = [*miners, *late]
    if not everyone:
        raise AssignmentError("no miners to assign")
    if len(set(everyone)) != len(everyone):
        raise AssignmentError("duplicate miner addresses in the registry")
    ranked = _rank(seed, b"miners", list(miners)) + _rank(seed, b"miners", list(late))
    shared = shared_module_ids(cfg)
    out: dict[str, Assignment] = {}
    if cfg.mode == "dipaco":
        paths = all_paths(cfg)
        order = _rank(seed, b"paths", [".".join(map(str, p)) for p in paths])
        for j, miner in enumerate(ranked):
            key = order[j % len(paths)]
            path = tuple(int(c) for c in key.split("."))
            path_mods = ("embed", *path_module_ids(path), "head")
            out[miner] = Assignment(miner, j, path_mods, paths.index(path), len(paths), path)
        return out
    m = cfg.top_k if experts_per_miner is None else experts_per_miner
    if cfg.mode == "moe" and not 1 <= m <= cfg.n_experts:
        raise AssignmentError("experts_per_miner must lie in [1, n_experts]")
    position = {mid: i for i, mid in enumerate(module_ids(cfg))}
    for j, miner in enumerate(ranked):
        mods: list[str] = list(shared)
        if cfg.mode == "moe":
            for layer in range(cfg.n_layers):
                ring = _rank(seed, f"experts.{layer}".encode(), [str(e) for e in range(cfg.n_experts)])
                mine = {int(ring[(j * m + t) % cfg.n_experts]) for t in range(m)}
                mods += [f"moe.{layer}.expert.{e}" for e in sorted(mine)]
        out[miner] = Assignment(miner, j, tuple(sorted(mods, key=lambda mid: position[mid])), j, len(ranked))
    return out


def trainers_per_module(assignments: dict[str, Assignment]) -> dict[str, int]:
    """How many miners train each module (a balance check)."""
    counts: dict[str, int] = {}
    for a in assignments.values():
        for m in a.module_ids:
            counts[m] = counts.get(m, 0) + 1
    return counts


def epoch_start(round: int, epoch_rounds: int) -> int:
    """The first round of the assignment epoch holding ``round`` (epochs of ``epoch_rounds`` rounds from
    round 0; ``epoch_rounds = 1`` is a new assignment every round)."""
    if epoch_rounds < 1 or round < 0:
        raise AssignmentError("epoch_rounds must be positive and round non-negative")
    return round - round % epoch_rounds


def assign_epoch(
    seed_of: Callable[[int], bytes],
    round: int,
    epoch_rounds: int,
    miners: Sequence[str],
    cfg: ModelConfig,
    experts_per_miner: int | None = None,
) -> dict[str, Assignment]:
    """Assignments of ``round`` fixed for its epoch: :func:`assign` with the seed of the epoch's first round
    (``seed_of(epoch_start(round, epoch_rounds))``), so a miner keeps its modules and shard for
    ``epoch_rounds`` rounds. Batches still draw from the round's own seed (``training.data.miner_batches``),
    so a miner sees new windows of its shard every round."""
    return assign(seed_of(epoch_start(round, epoch_rounds)), miners, cfg, experts_per_miner)


def assign_in_epoch(
    seed: bytes,
    epoch_miners: Sequence[str],
    miners: Sequence[str],
    cfg: ModelConfig,
    experts_per_miner: int | None = None,
) -> dict[str, Assignment]:
    """Assignments of a round inside an epoch (the nodes' rule, docs/protocol.md "Assignment epochs"):
    ``seed`` is the epoch seed, ``epoch_miners`` the registry of the epoch's first round and ``miners``
    the round's. The epoch's miners keep the ranks they had at its first round; a miner registered later
    in the epoch is ranked after all of them (among the late ones by the same seed), so it trains from
    its first round while nobody's path moves until the epoch ends. With epochs of one round the two
    registries are the same and this is :func:`assign`."""
    known = set(epoch_miners)
    late = [m for m in miners if m not in known]
    return assign(seed, epoch_miners, cfg, experts_per_miner, late=late)
