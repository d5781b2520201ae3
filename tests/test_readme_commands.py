"""Every ``tessera`` command in README.md's shell blocks parses with today's command line (a renamed or
removed option fails here, not in a launcher's terminal); placeholders (``$RPC_URL``, ``VALIDATOR:PORT``)
are values, and a one-letter capital (``--commit-blocks C``) stands for a number."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tessera.cli import build_parser

README = Path(__file__).resolve().parents[1] / "README.md"


def _commands() -> list[str]:
    text = README.read_text()
    out = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)  # continuation lines
        for line in joined.splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith(".venv/bin/tessera "):
                out.append(line.removeprefix(".venv/bin/tessera "))
    return out


def test_readme_has_the_launcher_path() -> None:
    commands = _commands()
    assert any(c.startswith("devnet --corpus") for c in commands)
    for verb in ("runspec tokenizer", "runspec init", "contracts deploy", "model export", "model eval"):
        assert any(c.startswith(verb) for c in commands), verb
    assert any(c.startswith("model sample") for c in commands)


@pytest.mark.parametrize("command", _commands())
def test_readme_command_parses(command: str) -> None:
    argv = ["1" if re.fullmatch(r"[A-Z]", a) else a for a in shlex.split(command)]
    args = build_parser().parse_args(argv)
    assert callable(getattr(args, "handler", None)), command
