"""The devnet report counts every validator's replays, not only validator0's: with committees of one an
audit falls to one validator, and a report that read validator0 alone said 0 in the others' rounds."""

from __future__ import annotations

from tessera.devnet.report import round_replays


def test_replays_are_summed_over_the_validators() -> None:
    v0 = {"0xa": {"metrics": {"replayed_steps": 0}}, "0xb": {"metrics": {}}}
    v1 = {"0xa": {"metrics": {"replayed_steps": 3}}, "0xb": {"metrics": {"replayed_steps": 2}}}
    assert round_replays([v0, v1]) == {"replayed_steps_all_validators": 5, "replayed_pairs_all_validators": 2}
    assert round_replays([]) == {"replayed_steps_all_validators": 0, "replayed_pairs_all_validators": 0}
