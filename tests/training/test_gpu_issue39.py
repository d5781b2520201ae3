"""The pieces of issue 39's prepared GPU run that a CPU can check: the carried wheels complete the GPU image
(fastapi's ``opentelemetry-api`` among them), and the device script parses and brings back what the device
tool can return (the script itself ran here with ``--device cpu --tiny``)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from benchmarks.gpu import carry
from benchmarks.gpu.loopcost import measure, report_lines

SCRIPT = carry.HERE / "run_issue39.sh"


def test_the_carried_wheels_complete_the_gpu_image() -> None:
    gaps = carry.check_carry()
    assert not gaps.missing and not gaps.versions, gaps
    assert carry.carried()["opentelemetry-api"]  # fastapi 0.165 imports opentelemetry (issue 39)
    assert "torch" in carry.image() and "fastapi" not in carry.image()


def test_a_requirement_left_out_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``opentelemetry-api`` in the carry list (issue 29's list) the check names what needs it."""
    lines = carry.CARRY_FILE.read_text(encoding="utf-8").splitlines()
    short = tmp_path / "carry.txt"
    short.write_text("\n".join(x for x in lines if not x.startswith("opentelemetry-api")) + "\n")
    monkeypatch.setattr(carry, "CARRY_FILE", short)
    gaps = carry.check_carry()
    assert gaps.missing == {"fastapi": ["opentelemetry-api>=1.44.0"]}
    assert carry.main() == 1


def test_names_compare_as_pip_compares_them() -> None:
    assert carry.canonical("Eth_Account") == carry.canonical("eth-account") == "eth-account"
    assert carry.canonical("py.ecc") == "py-ecc"


def test_the_scripts_parse_and_carry_sh_reads_the_list() -> None:
    for script in ("run_issue39.sh", "carry.sh"):
        subprocess.run(["bash", "-n", str(carry.HERE / script)], check=True)
    assert "benchmarks/gpu/carry.txt" in (carry.HERE / "carry.sh").read_text()


def test_the_script_returns_at_most_eight_files_with_plain_names() -> None:
    """The device tool brings back at most 8 files under ``$OUT``, named in letters, digits, ``.``, ``_`` and
    ``-``: every file the script writes there (``"$OUT/NAME"`` and ``keep SRC NAME``) is such a name."""
    text = SCRIPT.read_text()
    names = set(re.findall(r'"\$OUT/([^"/$]+)"', text))
    names |= set(re.findall(r'^keep(?:_rows)? "[^"]+" (\S+)$', text, re.MULTILINE))
    names |= {f"sizes-seed{s}.json" for s in (0, 1)} if '"sizes-seed$seed.json"' in text else set()
    names.discard("sizes-seed$seed.json")
    assert {
        "run.log",
        "steps.jsonl",
        "devnet.json",
        "precision.json",
        "loopcost.json",
        "presets.json",
    } <= names
    assert len(names) <= 8, sorted(names)
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", n) for n in names), sorted(names)


def test_loopcost_times_the_loops_and_each_piece() -> None:
    """The tiny preset on the CPU: every loop timed, each piece of the miner's extra work timed alone."""
    r = measure("tiny", "moe", "cpu", steps=2, interval=1, repeats=1)
    assert r["states_recorded"] == 3 and r["state_bytes"] > 0
    assert set(r["round_seconds"]) == {"plain", "miner", "miner_ends"}
    assert all(len(v) == 1 and v[0] > 0 for v in r["round_seconds"].values())
    assert set(r["piece_seconds"]) == {"digest", "host_copy", "codec"}
    assert all(s > 0 for s in r["piece_seconds"].values())
    lines = report_lines(r)
    assert "transcript every 1 (3 states" in lines[0] and len(lines) == 5
