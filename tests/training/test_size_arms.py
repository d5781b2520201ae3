"""The size series writes what it has after each arm of a size (issue 29: a GPU run comes in minutes, and
a 38M point's three arms must not be lost to a run cut short)."""

from __future__ import annotations

import copy
import json
from typing import Any

from benchmarks.training_sizes import sizes
from training.corpus import load_bundled_corpus


def test_each_arm_reaches_the_sink_before_the_row() -> None:
    model = {"seq_len": 16, "d_model": 8, "n_heads": 2, "n_layers": 1, "d_ff": 16}
    series = [{"label": "toy", "scale": {"model": model, "rounds": 1, "batch": 2}, "rounds": 1}]
    seen: list[dict[str, Any]] = []
    res = sizes(
        series, [0], load_bundled_corpus(), None, windows=2, sink=lambda r: seen.append(copy.deepcopy(r))
    )
    partials = [s["partial"]["arms"] for s in seen if "partial" in s]
    assert [[a["arm"] for a in p] for p in partials] == [
        ["recipe"],
        ["recipe", "diloco"],
        ["recipe", "diloco", "dp"],
    ]
    arms = {a["arm"]: a for a in partials[-1]}
    row = res["rows"][0]
    assert arms["recipe"]["final_loss"] == row["final_loss"] and arms["dp"]["final_loss"] == row["dp_loss"]
    assert arms["diloco"]["final_loss"] == row["diloco_loss"]
    assert "partial" not in seen[-1] and seen[-1]["rows"][0]["label"] == "toy"  # the row replaces them
    json.dumps(seen)  # what the sink writes is JSON-safe


def test_overlapping_the_codec_with_the_next_miner_changes_no_figure() -> None:
    """The simulation's helper thread (on by default off the CPU) gives the serial loop's bits."""
    from tessera.simwire import wire_transport
    from tests.training.training_fixtures import tiny_inner, tiny_model
    from training.config import CodecConfig, OuterConfig, RunConfig
    from training.data import prepare
    from training.digest import state_digest
    from training.simulation import Simulation

    run = RunConfig(
        tiny_model("moe"), tiny_inner(steps=2), OuterConfig(), CodecConfig(chunk=256, topk=8, bits=2)
    )
    ds = prepare(load_bundled_corpus(), run.model)
    got = []
    for overlap in (False, True):
        sim = Simulation(
            run, ds, ["a", "b", "c"], transport=wire_transport(run.codec, run.model), eval_windows=4
        )
        sim.overlap = overlap
        stats = [sim.step(r) for r in range(2)]
        got.append((state_digest(sim.params), stats))
    assert got[0] == got[1]
