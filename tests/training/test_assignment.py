"""Assignment: pure, deterministic, balanced."""

from __future__ import annotations

import pytest

from tests.training.training_fixtures import tiny_model
from training.assignment import assign, assign_epoch, assign_in_epoch, epoch_start, trainers_per_module
from training.config import ModelConfig
from training.errors import AssignmentError

MINERS = [f"0x{i:040x}" for i in range(1, 8)]


def test_same_inputs_same_assignment(mode: str) -> None:
    cfg = tiny_model(mode)
    assert assign(b"s" * 32, MINERS, cfg) == assign(b"s" * 32, MINERS, cfg)
    assert assign(b"s" * 32, MINERS, cfg) != assign(b"t" * 32, MINERS, cfg)


def test_registry_order_does_not_matter() -> None:
    cfg = tiny_model("moe")
    assert assign(b"x", MINERS, cfg) == assign(b"x", list(reversed(MINERS)), cfg)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
def test_moe_experts_balanced(n: int) -> None:
    cfg = ModelConfig(mode="moe", n_experts=8, top_k=2, n_layers=2)
    a = assign(b"seed", MINERS[:n], cfg, experts_per_miner=3)
    counts = trainers_per_module(a)
    for layer in range(2):
        c = [counts.get(f"moe.{layer}.expert.{e}", 0) for e in range(8)]
        assert max(c) - min(c) <= 1 and sum(c) == 3 * n
    for x in a.values():
        assert {"embed", "trunk.0", "trunk.1", "head"} <= set(x.module_ids)
        assert sum(m.startswith("moe.0.") for m in x.module_ids) == 3
    assert sorted(x.shard for x in a.values()) == list(range(n))


def test_dipaco_paths_round_robin() -> None:
    cfg = tiny_model("dipaco")
    a = assign(b"seed", MINERS, cfg)
    paths = [x.path for x in a.values()]
    assert all(paths.count(p) in (1, 2) for p in set(paths)) and len(set(paths)) == 4
    for x in a.values():
        assert x.path is not None
        assert x.module_ids == ("embed", f"path.0.{x.path[0]}", f"path.1.{x.path[1]}", "head")
        assert x.n_shards == 4


def test_errors() -> None:
    with pytest.raises(AssignmentError):
        assign(b"", [], tiny_model())
    with pytest.raises(AssignmentError):
        assign(b"", ["a", "a"], tiny_model())
    with pytest.raises(AssignmentError):
        assign(b"", ["a"], tiny_model("moe"), experts_per_miner=9)


def _seed(round: int) -> bytes:
    return round.to_bytes(8, "little") * 4


def test_epoch_keeps_the_assignment_of_its_first_round(mode: str) -> None:
    cfg = tiny_model(mode)
    for r in range(12):
        got = assign_epoch(_seed, r, 4, MINERS[:4], cfg)
        assert got == assign(_seed(r - r % 4), MINERS[:4], cfg)
    assert [epoch_start(r, 4) for r in range(9)] == [0, 0, 0, 0, 4, 4, 4, 4, 8]
    # an epoch of one round is the per-round assignment
    assert all(assign_epoch(_seed, r, 1, MINERS, cfg) == assign(_seed(r), MINERS, cfg) for r in range(5))


def test_epoch_changes_between_epochs() -> None:
    cfg = tiny_model("dipaco")
    paths = [{m: a.path for m, a in assign_epoch(_seed, r, 3, MINERS[:4], cfg).items()} for r in range(12)]
    assert paths[0] == paths[1] == paths[2] and paths[3] == paths[4] == paths[5]
    assert any(paths[i] != paths[i + 3] for i in range(0, 9, 3))


def test_epoch_errors() -> None:
    with pytest.raises(AssignmentError):
        epoch_start(3, 0)
    with pytest.raises(AssignmentError):
        epoch_start(-1, 4)


def test_in_epoch_with_the_round_registry_is_assign(mode: str) -> None:
    cfg = tiny_model(mode)
    assert assign_in_epoch(b"s" * 32, MINERS, list(reversed(MINERS)), cfg) == assign(b"s" * 32, MINERS, cfg)


def test_a_late_miner_ranks_after_the_epoch_and_moves_nobody() -> None:
    cfg = tiny_model("dipaco")
    before = assign(b"e" * 32, MINERS[:5], cfg)
    after = assign_in_epoch(b"e" * 32, MINERS[:5], MINERS[:7], cfg)
    assert {m: after[m] for m in MINERS[:5]} == before
    assert sorted(after[m].rank for m in MINERS[5:7]) == [5, 6]
    # the round-robin goes on: 7 miners on 4 paths, no path with more than two
    paths = [a.path for a in after.values()]
    assert sorted(paths.count(p) for p in set(paths)) == [1, 2, 2, 2]
    # an epoch whose first round had nobody registered: the late miners alone, ranked by the seed
    assert assign_in_epoch(b"e" * 32, [], MINERS[:3], cfg) == assign(b"e" * 32, MINERS[:3], cfg)
    with pytest.raises(AssignmentError):
        assign_in_epoch(b"e" * 32, [], [], cfg)
