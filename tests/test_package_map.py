"""Every package's ``__init__`` docstring lists its modules, one line each (issue 36 item 5).

The map of a package is its ``__init__``: a line ``- ``name``: what it holds`` per module (``name`` its file
name without ``.py``) and per subpackage (``name/``), no more and no fewer, each entry one line. A module
added or removed without its line fails here, so the list stays the package's table of contents.
docs/architecture.md names the packages and the modules a common change starts from; this is the rest.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOP = ("training", "protocol", "attestation", "miner", "validator", "tessera", "benchmarks")
_ENTRY = re.compile(r"^- ``(?P<name>[A-Za-z_][\w]*/?)``: \S")


def packages() -> list[Path]:
    """Every package of the product: the top-level ones and each folder under them with an ``__init__.py``."""
    return sorted(p.parent for top in TOP for p in (ROOT / top).rglob("__init__.py"))


def modules(package: Path) -> set[str]:
    """The package's modules (``name``) and subpackages (``name/``), as its docstring names them."""
    files = {p.stem for p in package.glob("*.py") if p.name != "__init__.py"}
    subpackages = {f"{p.name}/" for p in package.iterdir() if (p / "__init__.py").is_file()}
    return files | subpackages


def listed(package: Path) -> list[str]:
    """The names the package's ``__init__`` docstring lists, in order."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8")), clean=False)
    assert doc, f"{package.relative_to(ROOT)}/__init__.py has no docstring"
    lines = doc.splitlines()
    names = []
    for i, line in enumerate(lines):
        m = _ENTRY.match(line)
        if not m:
            continue
        names.append(m["name"])
        following = lines[i + 1] if i + 1 < len(lines) else ""
        assert not following.startswith(" "), (
            f"{package.relative_to(ROOT)}: ``{m['name']}``'s entry is one line"
        )
    return names


def test_the_packages_are_found() -> None:
    found = {p.relative_to(ROOT).as_posix() for p in packages()}
    assert {"miner", "validator", "protocol/node", "tessera/devnet/faults", "benchmarks/gpu"} <= found


@pytest.mark.parametrize("package", packages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_module_is_named_once_in_its_package_init(package: Path) -> None:
    names = listed(package)
    assert len(names) == len(set(names)), f"named twice: {sorted(n for n in names if names.count(n) > 1)}"
    have = modules(package)
    missing, stale = sorted(have - set(names)), sorted(set(names) - have)
    assert not missing and not stale, (
        f"{package.relative_to(ROOT)}/__init__.py: add a line for {missing}, remove {stale}"
    )
