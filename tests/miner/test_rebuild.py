"""Issue 13: a miner rebuilds theta_{r+1} from theta_r, the consensus and the accepted updates, bit for bit
what the validators certify, and anything else falls back to fetching the checkpoint."""

from __future__ import annotations

from dataclasses import replace

import pytest

from miner.rebuild import accepted, rebuild_checkpoint
from protocol.wire import update as wire
from protocol.wire.tensorblob import join_checkpoint, tensors_digest
from tests.support.rounds import MINERS, Round, make_round
from training.merge import MergePolicy, next_checkpoint


@pytest.fixture(scope="module")
def rnd() -> Round:
    return make_round()


def _certified(rnd: Round, consensus: dict[str, int], updates: dict[str, bytes], policy: MergePolicy) -> str:
    """The digest validators merge and certify (``validator.checkpoints._merge``'s inputs)."""
    shapes = {n: tuple(t.shape) for n, t in rnd.checkpoint.items()}
    contributions = [
        (float(score), m, wire.decode_update(updates[m], None, shapes, rnd.spec.codec).pseudo_gradient())
        for m, score in accepted(consensus)
    ]
    params, momentum = next_checkpoint(rnd.checkpoint, {}, contributions, rnd.spec.outer, policy)
    return tensors_digest(join_checkpoint(params, momentum))


def test_the_rebuilt_checkpoint_is_the_certified_one(rnd: Round) -> None:
    updates = {m: rnd.build(m).update for m in MINERS}
    theta = {f"param/{k}": v for k, v in rnd.checkpoint.items()}
    for consensus in ({MINERS[0]: 70, MINERS[1]: 30}, {MINERS[0]: 55, MINERS[1]: 0}):
        got = rebuild_checkpoint(rnd.spec, theta, consensus, updates)
        assert got is not None
        tensors, digest = got
        assert digest == _certified(rnd, consensus, updates, MergePolicy())
        assert tensors_digest(tensors) == digest
    # a miner with a zero consensus score is not needed
    assert rebuild_checkpoint(rnd.spec, theta, {MINERS[0]: 55, MINERS[1]: 0}, {MINERS[0]: updates[MINERS[0]]})


def test_anything_short_of_the_inputs_gives_none_or_another_digest(rnd: Round) -> None:
    updates = {m: rnd.build(m).update for m in MINERS}
    theta = {f"param/{k}": v for k, v in rnd.checkpoint.items()}
    consensus = {MINERS[0]: 70, MINERS[1]: 30}
    want = _certified(rnd, consensus, updates, MergePolicy())
    assert rebuild_checkpoint(rnd.spec, theta, consensus, {MINERS[0]: updates[MINERS[0]]}) is None
    broken = {**updates, MINERS[1]: updates[MINERS[1]][:-7]}
    assert rebuild_checkpoint(rnd.spec, theta, consensus, broken) is None
    # validators merging another way certify another digest: the miner's differs, so it fetches
    trimmed = replace(rnd.spec, merge=MergePolicy(method="trimmed_mean"))
    got = rebuild_checkpoint(trimmed, theta, consensus, updates)
    assert got is not None and got[1] != want
    assert got[1] == _certified(rnd, consensus, updates, MergePolicy(method="trimmed_mean"))


def test_the_run_files_merge_policy_round_trips_and_bad_values_are_refused(rnd: Round) -> None:
    """The run file names the merge miners rebuild with; default runs keep their digest (no ``merge`` key),
    and a policy the merge cannot run is refused when the run file is read, with a one-line error."""
    from protocol.runspec import RunSpec, RunSpecError

    assert "merge" not in rnd.spec.to_json()
    trimmed = replace(rnd.spec, merge=MergePolicy(method="trimmed_mean", trim=0.25))
    doc = trimmed.to_json()
    assert doc["merge"] == {"method": "trimmed_mean", "clip_factor": 2.0, "trim": 0.25}
    assert RunSpec.from_json(doc) == trimmed and RunSpec.from_json(doc).digest() != rnd.spec.digest()
    for bad in (
        {"method": "max"},
        {"clip_factor": 0},
        {"clip_factor": "2"},
        {"trim": 0.5},
        {"trim": float("nan")},
    ):
        with pytest.raises(RunSpecError, match="merge"):
            RunSpec.from_json({**rnd.spec.to_json(), "merge": bad})
    with pytest.raises(RunSpecError, match="unknown"):
        RunSpec.from_json({**rnd.spec.to_json(), "merge": {"weights": "equal"}})
