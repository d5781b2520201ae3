"""A GPU miner in a devnet (issue 29): ``tessera devnet --miner-device 0=cuda`` trains miner0 on CUDA while
every other node computes on the CPU, so the validators replay its segments on the CPU.

Here the option is followed from the command line to miner0's loaded config (any machine); where a GPU is
present the devnet itself runs: 3 rounds certified, the GPU miner paid, no honest miner refused.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

from miner.config import MinerConfig, load_miner_config
from tessera.commands import devnet, miner
from tessera.devnet.config import DevnetConfig
from tessera.devnet.procs import node_procs
from tessera.errors import TesseraError
from tessera.nodes import overrides_from_args


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


@pytest.mark.e2e
@pytest.mark.chain
@pytest.mark.timeout(900)
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_cuda_miner_is_replayed_on_the_cpu_and_paid(tmp_path: Path) -> None:  # pragma: no cover - GPU
    from tessera.devnet.run import run_devnet

    cfg = DevnetConfig(
        workdir=tmp_path / "devnet", miners=2, validators=2, inner_steps=8, samples=0,
        miner_devices={"miner0": "cuda"},
    )  # fmt: skip
    report = run_devnet(cfg, 3, live=False, timeout=840)
    rounds = [p for p in report["per_round"] if not p["join_round"]]
    assert len(rounds) == 3 and all(p["certified"] for p in rounds), rounds
    for p in rounds:
        assert p["stages"].get("miner0") == "ok" and p["stages"].get("miner1") == "ok", p["stages"]
        assert p["replayed_steps"] > 0
    assert report["rewards_total_wei"].get("miner0", 0) > 0, report["rewards_total_wei"]
