"""A GPU miner in a devnet (issue 29): ``tessera devnet --miner-device 0=cuda`` trains miner0 on CUDA while
every other node computes on the CPU, so the validators replay its segments on the CPU.

Here the option is followed from the command line to miner0's loaded config (any machine). The devnet
itself (issue 39) runs with a miner stake of 100 tokens, where the deployed audit rate is q = 1 with a
committee of one validator: every round each miner is audited, so a CPU validator must fetch miner0's
transcript states and replay its segments. The test asserts that it did, every round, and accepted them,
and prints the largest replay differences against the validators' tolerances (one JSON line, ``gpu-devnet
figures:``, which ``benchmarks/gpu/run_issue39.sh`` keeps). With miner0 on CUDA it runs where a GPU is;
the same test with miner0 on the CPU (slow) runs the same code path on any machine.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from eth_account import Account

from miner.config import MinerConfig, load_miner_config
from tessera.commands import devnet, miner
from tessera.devnet.config import DevnetConfig
from tessera.devnet.procs import node_procs
from tessera.errors import TesseraError
from tessera.nodes import overrides_from_args
from validator.policy import VerifyPolicy
from validator.stages import Stage
from validator.state import ValidatorState

REPLAY_TOLERANCES = {
    "replay_param_rel_diff": VerifyPolicy.param_rel_tol,
    "replay_moment_rel_diff": VerifyPolicy.replay_rel_tol,
    "ef_rel_err": VerifyPolicy.ef_rel_tol,
    "ef_after_rel_err": VerifyPolicy.ef_rel_tol,
}
"""Each verdict metric of a replay's largest difference and the validators' tolerance for it."""

AUDIT_STAKE = 100
"""The devnet's miner stake in tokens: the deployed audit rate is q = 1, a committee of one validator."""


def _devnet_args(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    devnet.register(parser.add_subparsers())
    return parser.parse_args(["devnet", "--miners", "2", *flags])


def _miner_config(args: list[str]) -> MinerConfig:
    """The config ``tessera miner run`` loads from a node's flags."""
    parser = argparse.ArgumentParser()
    miner.register(parser.add_subparsers())
    parsed = parser.parse_args(["miner", "run", *args])
    return load_miner_config(None, overrides_from_args(parsed, MinerConfig), env={})


def test_miner_device_reaches_miner0s_config_and_no_other_node(tmp_path: Path) -> None:
    args = _devnet_args("--miner-device", "0=cpu")
    devices = devnet.miner_devices(args.miner_device, args.miners)
    assert devices == {"miner0": "cpu"}
    cfg = DevnetConfig(workdir=tmp_path, miners=2, validators=2, miner_devices=devices)
    names = cfg.node_names()
    procs = node_procs(cfg, dict.fromkeys(names, "0x" + "11" * 32), dict.fromkeys(names, 1), [], "", {})
    assert procs["miner0"].args[-2:] == ["--device", "cpu"]
    assert all("--device" not in procs[n].args for n in names if n != "miner0")
    assert _miner_config(procs["miner0"].args).device == "cpu"
    assert _miner_config(procs["miner1"].args).device == "cpu"  # the default


@pytest.mark.parametrize("spec", ["2=cpu", "0=gpu", "x=cuda", "0"])
def test_a_bad_miner_device_is_refused_before_anything_starts(spec: str) -> None:
    with pytest.raises(TesseraError, match="--miner-device"):
        devnet.miner_devices([spec], 2)


def audits_of(workdir: Path, miner: str, rounds: list[int]) -> dict[str, Any]:
    """What the devnet's validators (their ``state.json`` under ``workdir``) judged of ``miner`` (a node
    name) in ``rounds``: per round each validator's stage and replayed steps, and over all the largest
    value of each :data:`REPLAY_TOLERANCES` metric beside its tolerance."""
    keys = json.loads((workdir / "devnet-keys.json").read_text())
    address = str(Account.from_key(keys[miner]).address).lower()
    validators = sorted(n for n in keys if n.startswith("validator"))
    states = {v: ValidatorState(workdir / v).rounds() for v in validators}
    per_round: dict[int, dict[str, dict[str, Any]]] = {}
    worst = {k: 0.0 for k in REPLAY_TOLERANCES}
    for r in rounds:
        per_round[r] = {}
        for v in validators:
            rec = states[v].get(r)
            vd = next((x for m, x in (rec.verdicts if rec else {}).items() if m.lower() == address), None)
            metrics = vd.metrics if vd is not None else {}
            per_round[r][v] = {
                "stage": vd.stage if vd is not None else None,
                "replayed_steps": int(metrics.get("replayed_steps", 0)),
            }
            for k in worst:
                worst[k] = max(worst[k], float(metrics.get(k, 0.0)))
    return {
        "miner": miner,
        "per_round": per_round,
        "largest": {k: {"value": x, "tolerance": REPLAY_TOLERANCES[k]} for k, x in worst.items()},
    }


@pytest.mark.e2e
@pytest.mark.chain
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "device",
    [
        pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")),
        pytest.param("cpu", marks=pytest.mark.slow),
    ],
)
def test_miner0_is_audited_replayed_on_the_cpu_and_paid(tmp_path: Path, device: str) -> None:
    """miner0 trains on ``device``, the rest on the CPU, at q = 1 with a committee of one: every round one
    CPU validator replays miner0's segments and accepts them within the tolerances, every round is
    certified and miner0 is paid."""
    from tessera.devnet.run import run_devnet

    cfg = DevnetConfig(
        workdir=tmp_path / "devnet", miners=2, validators=2, inner_steps=8, samples=0,
        miner_stake=AUDIT_STAKE, miner_devices={"miner0": device},
    )  # fmt: skip
    report = run_devnet(cfg, 3, live=False, timeout=840)
    rounds = [p for p in report["per_round"] if not p["join_round"]]
    audits = audits_of(cfg.workdir, "miner0", [p["round"] for p in rounds])
    figures = {"device": device, "rounds": len(rounds), "certified": sum(p["certified"] for p in rounds)}
    figures |= {
        "heldout": [rounds[0]["heldout_before"], rounds[-1]["heldout_after"]] if rounds else None,
        "replayed_steps": [p["replayed_steps"] for p in rounds],
        **audits,
    }
    print("gpu-devnet figures: " + json.dumps(figures, sort_keys=True), flush=True)
    assert len(rounds) == 3 and all(p["certified"] for p in rounds), rounds
    for p in rounds:
        assert p["stages"].get("miner0") == "ok" and p["stages"].get("miner1") == "ok", p["stages"]
        verdicts = audits["per_round"][p["round"]]
        assert all(x["stage"] == Stage.OK for x in verdicts.values()), verdicts
        replayed = [v for v, x in verdicts.items() if x["replayed_steps"] > 0]
        assert len(replayed) == 1, verdicts  # q = 1, a committee of one: exactly one replay of miner0
    for name, x in audits["largest"].items():
        assert x["value"] <= x["tolerance"], (name, x)
    assert report["rewards_total_wei"].get("miner0", 0) > 0, report["rewards_total_wei"]
