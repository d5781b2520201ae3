"""The devnet's run at any preset and tokenizer, and the samples it takes of each certified checkpoint
(issue 17), on stubs (no processes)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

import tessera.modelout
from protocol.runspec import RunSpec
from protocol.wire.tensorblob import encode_tensors, join_checkpoint, tensors_digest
from tessera.commands.runspec import train_tokenizer_file
from tessera.devnet.config import DevnetConfig
from tessera.devnet.run import _view, checkpoint_samples
from tessera.devnet.runfile import devnet_spec, tokenizer_path
from training.config import InnerConfig, ModelConfig
from training.presets import get_preset


def test_default_devnet_run_is_unchanged_and_presets_apply() -> None:
    spec = devnet_spec(DevnetConfig())
    assert spec.model == ModelConfig() and spec.tokenizer is None
    assert (
        spec.inner.lr == InnerConfig().lr and spec.inner.steps == 60 and spec.inner.transcript_interval == 1
    )
    big = devnet_spec(DevnetConfig(preset="10m", mode="dipaco", inner_steps=20))
    assert big.model == get_preset("10m").model("dipaco")
    assert big.inner.lr == get_preset("10m").lr and big.inner.steps == 20
    assert big.codec == spec.codec and big.outer == spec.outer


def test_devnet_with_a_bpe_tokenizer(tmp_path: Path) -> None:
    cfg = DevnetConfig(workdir=tmp_path, preset="1m", bpe_vocab=300)
    train_tokenizer_file("bundled", 300, tokenizer_path(cfg))
    spec = devnet_spec(cfg)
    assert spec.tokenizer is not None and spec.tokenizer.file == "tokenizer.json"  # beside run.json
    assert spec.model == get_preset("1m").model("moe", 300)
    spec.save(tmp_path / "run.json")
    assert RunSpec.load(tmp_path / "run.json") == spec


class _Chain:
    def __init__(self, digests: dict[int, str]) -> None:
        self.digests = digests

    def checkpoint(self, r: int) -> bytes:
        return bytes.fromhex(self.digests[r][2:]) if r in self.digests else b"\0" * 32


@pytest.mark.parametrize("mode", ["moe", "dipaco"])
def test_checkpoint_samples_fetch_check_and_decode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    cfg = DevnetConfig(workdir=tmp_path, mode=mode, bpe_vocab=300)
    train_tokenizer_file("bundled", 300, tokenizer_path(cfg))
    spec = devnet_spec(cfg)
    params = spec.genesis_params()
    tensors = join_checkpoint(params, {k: v * 0 for k, v in params.items()})
    digest = tensors_digest(tensors)
    served: dict[str, bytes] = {digest: encode_tensors(tensors)}
    asked: list[tuple[str, str | None]] = []

    def fetch(source: str, d: str | None, **_: Any) -> bytes:
        asked.append((source, d))
        return served[d or ""]

    monkeypatch.setattr(tessera.modelout, "fetch_checkpoint", fetch)
    net = SimpleNamespace(chain=_Chain({3: digest}), nodes={"validator0": SimpleNamespace(url="http://v0")})
    got = checkpoint_samples(net, 2, spec, 2, "The ", max_new=10)
    assert asked == [("http://v0", digest)] and got["checkpoint"] == digest
    texts = got["samples"]
    assert len(texts) == 2 and all(isinstance(t, str) and t for t in texts)
    assert texts == checkpoint_samples(net, 2, spec, 2, "The ", max_new=10)["samples"]  # seeded
    assert checkpoint_samples(net, 3, spec, 2, "The ")["error"] == "not certified"
    served[digest] = encode_tensors({k: v + 1 for k, v in tensors.items()})  # a peer serves other bytes
    assert "not the certified" in checkpoint_samples(net, 2, spec, 1, "The ")["error"]


def test_live_view_shows_the_latest_sample() -> None:
    from tests.support.devnet_view import devnet_stub

    console = Console(record=True, width=200)
    samples = {2: {"round": 2, "prompt": "The ", "samples": ["quick\nfox", "end"]}}
    console.print(_view(devnet_stub(), 3, 0.0, samples))
    text = console.export_text()
    assert "sample of theta_3" in text and "'The quick fox'" in text


def test_the_devnet_exports_the_newest_certified_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tessera.devnet.run import export_model
    from tessera.modelout import load_export

    cfg = DevnetConfig(workdir=tmp_path, bpe_vocab=300)
    train_tokenizer_file("bundled", 300, tokenizer_path(cfg))
    spec = devnet_spec(cfg)
    spec.save(tmp_path / "run.json")
    params = spec.genesis_params()
    tensors = join_checkpoint(params, {k: v * 0 for k, v in params.items()})
    digest = tensors_digest(tensors)
    monkeypatch.setattr(tessera.modelout, "fetch_checkpoint", lambda src, d, **_: encode_tensors(tensors))
    chain = _Chain({4: digest})
    chain.round_state = lambda: SimpleNamespace(round=5)  # type: ignore[attr-defined]
    chain.chain_id, chain.network_address = 31337, "0x" + "11" * 20  # type: ignore[attr-defined]
    net = SimpleNamespace(
        chain=chain, nodes={"validator0": SimpleNamespace(url="http://v0")}, run_path=tmp_path / "run.json"
    )
    got = export_model(net, tmp_path / "model")
    assert got == {"dir": str(tmp_path / "model"), "theta_round": 4, "checkpoint": digest}
    loaded, model_cfg, doc = load_export(tmp_path / "model")
    assert model_cfg == spec.model and doc["certified"]["round"] == 4
    assert (tmp_path / "model" / "tokenizer.json").read_bytes() == tokenizer_path(cfg).read_bytes()
    chain.digests = {}
    assert "no certified checkpoint" in export_model(net, tmp_path / "none")["error"]
