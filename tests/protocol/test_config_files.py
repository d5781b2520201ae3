"""F5/F6 (docs/security.md): bad config, run spec and deployment files raise the module's typed error."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from protocol.node.settings import SettingsError, load_settings
from protocol.rounds.deployment import Deployment, DeploymentError
from protocol.runspec import RunSpec, RunSpecError

NOT_UTF8 = b"\xff\xfe\x80 not utf-8 \xc3\x28"
DEEP_JSON = b"[" * 100_000 + b"]" * 100_000
DEEP_TOML = b"a = " + b"[" * 5_000 + b"]" * 5_000 + b"\n"


@dataclasses.dataclass
class _Cfg:
    a: int = 1


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


@pytest.mark.parametrize("data", [NOT_UTF8, DEEP_TOML])
def test_settings_bad_file(tmp_path: Path, data: bytes) -> None:
    with pytest.raises(SettingsError):
        load_settings(_Cfg, toml_path=_write(tmp_path, "c.toml", data))


@pytest.mark.parametrize("data", [NOT_UTF8, DEEP_JSON, b"[]", b"1", b'"x"', b"null"])
def test_runspec_bad_file(tmp_path: Path, data: bytes) -> None:
    with pytest.raises(RunSpecError):
        RunSpec.load(_write(tmp_path, "run.json", data))


@pytest.mark.parametrize("doc", [[], [1, 2], "x", 3, None])
def test_runspec_from_json_not_an_object(doc: Any) -> None:
    with pytest.raises(RunSpecError):
        RunSpec.from_json(doc)


def test_runspec_round_trip_unchanged(tmp_path: Path) -> None:
    spec = RunSpec()
    spec.save(tmp_path / "run.json")
    assert RunSpec.load(tmp_path / "run.json") == spec


@pytest.mark.parametrize("data", [NOT_UTF8, DEEP_JSON])
def test_deployment_bad_file(tmp_path: Path, data: bytes) -> None:
    with pytest.raises(DeploymentError):
        Deployment.load(_write(tmp_path, "deployment.json", data))
