"""From a folder of text files to generated text, as a launcher does it (issue 17): ``tessera devnet
--corpus DIR --bpe-vocab N`` trains on the files with real node processes on a real anvil, exports the
certified checkpoint, and ``tessera model eval`` / ``model sample`` read it."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from benchmarks.traffic_terms import terms
from tessera.cli import main
from tessera.devnet.config import DevnetConfig
from tessera.devnet.run import run_devnet
from training.corpus import load_corpus_path

pytestmark = [pytest.mark.e2e, pytest.mark.chain, pytest.mark.timeout(600)]

WORDS = (
    "the a network model miner validator round trains checks reads writes text data token chain block "
    "stake reward update digest merge expert path loss score of and to in is on with for by"
).split()


def _folder(root: Path, files: int = 60, docs_per_file: int = 5) -> Path:
    rng = random.Random(17)
    root.mkdir(parents=True)
    for f in range(files):
        docs = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(80, 160))) + "."
            for _ in range(docs_per_file)
        ]
        (root / f"notes-{f:02}.txt").write_text("\n\n\n".join(docs) + "\n")
    return root


def test_a_folder_of_text_files_to_generated_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = _folder(tmp_path / "my-corpus")
    cfg = DevnetConfig(
        workdir=tmp_path / "run", corpus=str(corpus), bpe_vocab=300, miners=2, validators=2, inner_steps=4,
        samples=1,
    )  # fmt: skip
    report = run_devnet(cfg, 1, live=False, timeout=540)
    assert report["streams"]["corpus_digest"] == load_corpus_path(corpus).digest
    assert report["streams"]["documents"] == 300 and report["streams"]["tokenizer"] != "bytes"
    last = report["per_round"][-1]
    assert last["certified"] and last["heldout_after"] is not None, last
    assert last["samples"]["samples"], last["samples"]
    # issue 26's fixed terms: every node polled the chain in the round (JSON-RPC, counted at that node)
    fixed = last["fixed_bytes_by_node"]
    assert set(fixed) == {"miner0", "miner1", "validator0", "validator1"} and all(
        f["rpc"] > 0 for f in fixed.values()
    ), fixed
    figures = terms(report, audit_rate_bps=10_000, committee_size=1)["summary"]
    assert figures["training_rounds"] == 1 and figures["per_param_bits"]["min"] > 0, figures
    model = report["model"]
    assert model.get("theta_round") == 3, model
    capsys.readouterr()
    run_file = str(cfg.workdir / "run.json")
    assert main(["model", "eval", model["dir"], "--run-file", run_file, "--windows", "4", "--json"]) == 0
    ev = json.loads(capsys.readouterr().out)
    assert ev["checkpoint_digest"] == model["checkpoint"] and ev["heldout_loss"] > 0
    assert main(["model", "sample", model["dir"], "--length", "12", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["text"]
