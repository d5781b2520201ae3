"""One network: ``tessera runspec init`` and ``tessera devnet`` write the same run, field by field, for
every preset and mode (the recipe of ``protocol.recipe``), and ``RunSpec()``'s defaults are that recipe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol.recipe import run_recipe
from protocol.rounds.auditspec import AuditSpec
from protocol.runspec import RunSpec
from tessera.cli import main
from tessera.devnet.config import DevnetConfig
from tessera.devnet.runfile import devnet_spec
from training.config import CodecConfig, InnerConfig, OuterConfig
from training.presets import PRESETS

MODES = ("moe", "dipaco", "dense")


def _fields(spec: RunSpec) -> dict[str, object]:
    """The run file's fields, paths aside."""
    doc = spec.to_json()
    doc.pop("corpus")
    return doc


#: Presets whose theta_0 takes seconds to build (``runspec init`` prints its digest): their CLI runs are in
#: the long suite; the fast one checks their run both ways through the function both commands call.
BIG = ("50m", "125m")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "preset", [pytest.param(p, marks=pytest.mark.slow) if p in BIG else p for p in sorted(PRESETS)]
)
def test_init_and_the_devnet_write_the_same_run(
    preset: str, mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "guides" / "run.json"
    run.parent.mkdir()
    argv = ["runspec", "init", "--out", str(run), "--preset", preset, "--mode", mode]
    argv += ["--miners", "4", "--validators", "2"]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    by_init = RunSpec.load(run)
    by_devnet = devnet_spec(DevnetConfig(workdir=tmp_path / "devnet", preset=preset, mode=mode))
    assert _fields(by_init) == _fields(by_devnet)
    assert by_init.digest() == by_devnet.digest() == printed["digest"]
    # the recipe's parts, not the components' plain defaults
    assert by_init.codec == CodecConfig.recipe() and by_init.outer == OuterConfig.recipe()
    p = PRESETS[preset]
    assert by_init.inner == InnerConfig.recipe(batch_size=p.batch_size, lr=p.lr)
    assert by_init.audits == AuditSpec(committee_size=1, miners=4, validators=2)
    assert by_init.epoch_rounds == (8 if mode == "dipaco" else 1)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("preset", BIG)
def test_big_presets_run_the_same_recipe_both_ways(preset: str, mode: str, tmp_path: Path) -> None:
    by_devnet = devnet_spec(DevnetConfig(workdir=tmp_path, preset=preset, mode=mode))
    assert _fields(run_recipe(preset, mode, miners=4, validators=2)) == _fields(by_devnet)


def test_the_defaults_are_the_recipe() -> None:
    assert RunSpec() == run_recipe()
    assert RunSpec(model=run_recipe(mode="dipaco").model) == run_recipe(mode="dipaco")
    assert RunSpec(model=run_recipe(mode="dipaco").model, epoch_rounds=1).epoch_rounds == 1
    # a run file without the epochs field means 1 (files written before epochs existed), never 0
    doc = run_recipe(mode="dipaco").to_json() | {"epoch_rounds": 1}
    assert RunSpec.from_json(doc).epoch_rounds == 1
    assert RunSpec.from_json({k: v for k, v in doc.items() if k != "epoch_rounds"}).epoch_rounds == 1


@pytest.mark.parametrize("section", ["model", "inner", "outer", "codec"])
def test_a_run_file_needs_every_section(section: str) -> None:
    """A missing section would take a component's plain defaults: a second default, so it is refused."""
    from protocol.runspec import RunSpecError

    doc = RunSpec().to_json()
    del doc[section]
    with pytest.raises(RunSpecError, match=section):
        RunSpec.from_json(doc)
    with pytest.raises(RunSpecError, match="epoch_rounds"):
        RunSpec.from_json(RunSpec().to_json() | {"epoch_rounds": 0})


def test_paths_in_the_run_file_are_relative_however_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("one document of text. " * 200 + "\n\n\n" + "another one here. " * 200)
    run = tmp_path / "pub" / "run.json"
    run.parent.mkdir()
    assert main(["runspec", "init", "--out", str(run), "--corpus", str(corpus.resolve())]) == 0
    capsys.readouterr()
    doc = json.loads(run.read_text())
    assert doc["corpus"] == "../corpus"
    # nodes resolve it against the run file, wherever they start
    assert RunSpec.load(run).resolve(doc["corpus"]).resolve() == corpus.resolve()
    devnet = devnet_spec(DevnetConfig(workdir=tmp_path / "dn", corpus=str(corpus.resolve())))
    assert devnet.corpus == "../corpus"
