"""Imports at module top outside the tests, except in the listed modules (issue 15).

An ``import`` inside a function hides a module's dependencies from its reader, from the import-cycle test
(``tests/test_import_cycles.py`` reads import-time imports only) and from the layering it guards. Every
Python file of the non-test packages is read with ``ast``; an import inside a function or method (not
under ``if TYPE_CHECKING:``) fails unless its module is in :data:`LAZY` with the reason it must wait.
A listed module with no such import any more fails too, so the list only shrinks. The reasons are few:

- the ``tessera --help`` path: ``tessera.cli`` imports every command module to declare its options, and
  those import their helpers and ``tessera bench``'s benchmark modules; torch, web3, hivemind and
  matplotlib (seconds each) wait for the command that uses them (checked below in a fresh process);
- an optional dependency the project does not install;
- a true import cycle;
- an import that is itself what is measured.

``python -m tests.test_lazy_imports`` prints every function-level import now, by module.
"""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.test_sizes import PACKAGES, ROOT

_HELP = "on the tessera --help path: its torch/web3/hivemind/matplotlib imports wait for its command"

LAZY: dict[str, str] = {
    "benchmarks/crossplatform.py": _HELP,
    "benchmarks/crossplatform_report.py": _HELP,
    "benchmarks/crossplatform_settings.py": _HELP,
    "benchmarks/crossplatform_worker.py": _HELP,
    "benchmarks/presets.py": _HELP,
    "benchmarks/training.py": _HELP,
    "benchmarks/training_grids.py": _HELP,
    "benchmarks/training_runs.py": _HELP,
    "benchmarks/training_sizes.py": _HELP,
    "benchmarks/training_speed.py": _HELP,
    "benchmarks/quality_pareto.py": "matplotlib waits for --plot (switched to Agg before pyplot loads)",
    "benchmarks/peer_codec.py": "einops, which the project does not depend on (the Templar comparison only)",
    "miner/config.py": _HELP + " (miner.behaviour imports torch)",
    "protocol/node/settings.py": _HELP + " (training.device imports torch)",
    "validator/config.py": _HELP + " (protocol.runspec imports torch)",
    "protocol/p2p/dhtvalidator.py": "protocol.p2p.dht imports this module: record_key is read at call time",
    "tessera/commands/account.py": _HELP,
    "tessera/commands/attack.py": _HELP,
    "tessera/commands/attest.py": _HELP,
    "tessera/commands/contracts.py": _HELP,
    "tessera/commands/devnet.py": _HELP,
    "tessera/commands/miner.py": _HELP,
    "tessera/commands/model.py": _HELP,
    "tessera/commands/runspec.py": _HELP,
    "tessera/commands/simulate.py": _HELP,
    "tessera/commands/validator.py": _HELP,
    "tessera/devnet/chainops.py": _HELP,
    "tessera/devnet/faults/poisondht.py": _HELP,
    "tessera/devnet/faults/slowcert.py": _HELP,
    "tessera/devnet/network.py": _HELP,
    "tessera/devnet/runfile.py": _HELP,
    "tessera/nodes.py": _HELP,
    "tessera/devnet/sizing.py": "a node's start is timed from its imports: _node_start imports the nodes",
}
"""Modules that import inside functions, and why."""

HEAVY = (
    "torch",
    "numpy",
    "web3",
    "hivemind",
    "matplotlib",
    "fastapi",
    "uvicorn",
    "safetensors",
    "tokenizers",
)
"""Libraries ``tessera --help`` must not load."""


def _under_type_checking(parents: list[ast.AST]) -> bool:
    return any(isinstance(p, ast.If) and "TYPE_CHECKING" in ast.unparse(p.test) for p in parents)


def _imports_in_functions(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, source) of every import inside a function or method of ``tree``."""
    out: list[tuple[int, str]] = []

    def visit(node: ast.AST, parents: list[ast.AST], in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if (
                isinstance(child, ast.Import | ast.ImportFrom)
                and in_function
                and not _under_type_checking(parents)
            ):
                out.append((child.lineno, ast.unparse(child)))
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            visit(child, [*parents, child], inner)

    visit(tree, [], False)
    return out


def measure() -> dict[str, list[tuple[int, str]]]:
    """The function-level imports of every module of :data:`tests.test_sizes.PACKAGES` that has any."""
    found: dict[str, list[tuple[int, str]]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            imports = _imports_in_functions(ast.parse(path.read_text(encoding="utf-8"), filename=rel))
            if imports:
                found[rel] = imports
    return found


def test_no_import_inside_a_function_unless_listed() -> None:
    extra = {k: v for k, v in measure().items() if k not in LAZY}
    assert not extra, (
        f"imports inside functions: {extra}; move them to the module's top, or list the module in "
        f"tests/test_lazy_imports.py LAZY with the reason they must wait"
    )


def test_every_listed_module_still_imports_inside_a_function() -> None:
    """The list shrinks as the code improves: a module whose imports are all at its top is removed."""
    found = measure()
    stale = sorted(k for k in LAZY if k not in found)
    assert not stale, f"no function-level import left (or gone): remove from LAZY: {stale}"


def test_the_help_path_loads_no_heavy_library() -> None:
    """What the CLI entries of :data:`LAZY` keep lazy stays off ``tessera --help`` (a fresh process)."""
    code = (
        "import sys; from tessera.cli import build_parser; build_parser(); "
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]", f"tessera --help loads {out.stdout.strip()}"


def test_a_synthetic_module() -> None:
    """The measurement: function and method bodies count, module level and TYPE_CHECKING do not."""
    src = (
        "import os\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import json\n"
        "def f():\n    import sys\n    if TYPE_CHECKING:\n        import re\n    return sys\n"
        "class C:\n    def m(self):\n        from os import path\n        return path\n"
    )
    assert [line for line, _ in _imports_in_functions(ast.parse(src))] == [6, 12]


def main() -> None:
    """Print every function-level import now, and whether its module is listed."""
    for path, imports in sorted(measure().items()):
        print(f"{'listed  ' if path in LAZY else 'UNLISTED'} {path}")
        for line, src in imports:
            print(f"    {line:5d} {src}")
    for path in sorted(set(LAZY) - set(measure())):
        print(f"STALE    {path}")


if __name__ == "__main__":
    main()
