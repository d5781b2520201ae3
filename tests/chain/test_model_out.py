"""``tessera model export|eval|sample``: a certified checkpoint out of the network, checked on chain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from web3 import Web3

from protocol.rounds.anvil import Anvil
from protocol.runspec import RunSpec
from protocol.wire.tensorblob import encode_tensors, tensor_blob_digest
from tessera.cli import main
from tessera.modelout import ModelOutError, load_export, model_with, sample
from tests.chain.chain_support import new_account

pytestmark = pytest.mark.chain


def _json(capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    return json.loads(capsys.readouterr().out)


def test_export_checks_the_certificate_then_eval_and_sample(
    w3: Web3,
    anvil: Anvil,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from protocol.node.api import NodeMetrics, NodeServer, create_node_app
    from protocol.p2p.blobs import BlobStore

    run = tmp_path / "run.json"
    spec = RunSpec(genesis_seed=7)
    spec.save(run)
    deployer = new_account(w3)
    monkeypatch.setenv("K", "0x" + bytes(deployer.key).hex())
    dep = tmp_path / "deployment.json"
    deploy = ["contracts", "deploy", "--rpc-url", anvil.rpc_url, "--key-env", "K", "--out", str(dep)]
    assert main([*deploy, "--run-file", str(run)]) == 0
    capsys.readouterr()
    genesis = {f"param/{k}": v for k, v in spec.genesis_params().items()}
    blob = tmp_path / "theta1.bin"
    blob.write_bytes(encode_tensors(genesis))

    out = tmp_path / "model"
    base = ["model", "export", "--deployment", str(dep), "--run-file", str(run), "--json"]
    assert main([*base, "--from", str(blob), "--out", str(out)]) == 0
    got = _json(capsys)
    assert got["checked_against"] == "chain" and got["round"] == 1
    assert got["checkpoint_digest"] == spec.genesis_digest()
    params, cfg, doc = load_export(out)
    assert cfg == spec.model and doc["certified"]["round"] == 1
    assert all(params[k].equal(v) for k, v in spec.genesis_params().items())

    # the same checkpoint served by a node over HTTP: fetched by the certified digest
    store = BlobStore(tmp_path / "store", digest_fn=tensor_blob_digest)
    store.put(blob.read_bytes())
    app = create_node_app(role="validator", status=dict, store=store, metrics=NodeMetrics.create("test"))
    server = NodeServer(app).start()
    try:
        assert main([*base, "--from", server.url, "--out", str(tmp_path / "model2")]) == 0
        assert _json(capsys)["checkpoint_digest"] == spec.genesis_digest()
    finally:
        server.stop()

    # a checkpoint that is not the certified one is refused, and nothing is written
    forged = dict(genesis)
    name = sorted(forged)[0]
    forged[name] = forged[name] + 1e-3
    blob.write_bytes(encode_tensors(forged))
    assert main([*base, "--from", str(blob), "--out", str(tmp_path / "forged")]) == 2
    assert "is not the certified" in capsys.readouterr().err and not (tmp_path / "forged").exists()

    # eval: an untrained byte-level model is near ln(256) = 5.55 nats per byte
    assert main(["model", "eval", str(out), "--run-file", str(run), "--windows", "8", "--json"]) == 0
    ev = _json(capsys)
    assert 4.5 < ev["heldout_loss"] < 7.0 and ev["perplexity"] == pytest.approx(
        2.718281828 ** ev["heldout_loss"], rel=1e-4
    )

    # sample: deterministic for a seed; greedy is deterministic outright
    argv = ["model", "sample", str(out), "--prompt", "The ", "--length", "24", "--seed", "3", "--json"]
    assert main(argv) == 0
    first = _json(capsys)["text"]
    assert main(argv) == 0 and _json(capsys)["text"] == first and first
    model = model_with(params, cfg)
    assert sample(model, "ab", max_new=8, temperature=0) == sample(
        model, "ab", max_new=8, temperature=0, seed=9
    )

    # weights that do not match their config are refused on load
    weights = out / "model.safetensors"
    from safetensors.torch import load_file, save_file

    w = load_file(str(weights))
    w[name.removeprefix("param/")] += 1.0
    save_file(w, str(weights))
    with pytest.raises(ModelOutError, match="digest differs"):
        load_export(out)
