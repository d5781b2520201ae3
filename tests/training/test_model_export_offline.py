"""``tessera model export`` without a chain (issue 17): the checkpoint's digest checked against ``--digest``,
a wrong one refused with nothing written; which round's digest the chain certifies (newest, or the one
asked for); an export round trip (weights, config, digest) and a tampered blob refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol.runspec import RunSpec
from protocol.wire.tensorblob import encode_tensors
from tessera.cli import main
from tessera.modelout import ModelOutError, certified_digest, load_export, theta_of


def _blob(tmp_path: Path) -> tuple[Path, Path, RunSpec]:
    spec = RunSpec(genesis_seed=3)
    run = tmp_path / "run.json"
    spec.save(run)
    blob = tmp_path / "theta.bin"
    blob.write_bytes(encode_tensors({f"param/{k}": v for k, v in spec.genesis_params().items()}))
    return run, blob, spec


def test_export_checks_the_given_digest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run, blob, spec = _blob(tmp_path)
    base = ["model", "export", "--from", str(blob), "--run-file", str(run), "--json"]
    assert main([*base, "--digest", spec.genesis_digest(), "--out", str(tmp_path / "ok")]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["checked_against"] == "--digest" and got["checkpoint_digest"] == spec.genesis_digest()
    params, cfg, doc = load_export(tmp_path / "ok")
    assert cfg == spec.model and doc["checkpoint_digest"] == spec.genesis_digest()
    assert all(params[k].equal(v) for k, v in spec.genesis_params().items())

    wrong = "0x" + "11" * 32
    assert main([*base, "--digest", wrong, "--out", str(tmp_path / "bad")]) == 2
    assert f"is not the certified {wrong}" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()

    blob.write_bytes(b"not a checkpoint")
    assert main([*base, "--digest", spec.genesis_digest(), "--out", str(tmp_path / "junk")]) == 2
    assert "not a checkpoint" in capsys.readouterr().err and not (tmp_path / "junk").exists()


class _Chain:
    """Rounds 1..5 open, checkpoints certified for theta_1..theta_3 only."""

    chain_id, network_address = 31337, "0x" + "ab" * 20

    def round_state(self):  # type: ignore[no-untyped-def]
        return type("S", (), {"round": 5})()

    def checkpoint(self, r: int) -> bytes:
        return bytes([r]) * 32 if r <= 3 else b"\0" * 32


def test_certified_digest_is_the_newest_or_the_round_asked_for() -> None:
    newest = certified_digest(_Chain(), None)
    assert (newest.round, newest.digest) == (3, "0x" + "03" * 32)
    assert certified_digest(_Chain(), 2).digest == "0x" + "02" * 32
    with pytest.raises(ModelOutError, match="theta_4 is not certified"):
        certified_digest(_Chain(), 4)
    with pytest.raises(ModelOutError, match="not the certified"):
        theta_of(encode_tensors({"param/x": RunSpec().genesis_params()["head.out.weight"]}), "0x" + "03" * 32)
