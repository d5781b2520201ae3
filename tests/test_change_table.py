"""docs/architecture.md opens with a "change -> where" table whose every file and symbol exists (issues 25, 36).

The table is the first section of docs/architecture.md (``## Change -> where``): one row per common
change, the second cell a ``;``-separated list of places, each a backticked repository path optionally
followed by a colon and backticked symbols::

    | add a codec | `training/codecregistry.py`: `Codec`, `CODECS`; `tests/training/test_codecregistry.py` |

A symbol is a name the file *defines* (not one it imports): for Python, read with ``ast``, a top-level
``def``, ``class`` or assignment, and ``Class.member`` for a method, field or enum member of a class
defined there; for Solidity, a ``contract``, ``interface``, ``library``, ``function``, ``modifier``,
``event``, ``error``, ``struct`` or ``enum`` declared under that name, or a struct member or state
variable (``type name;``). Other files (docs, JSON) are checked to exist. The changes the issues
name (issue 25's twelve and issue 36's eight) must each have their row, so the table cannot quietly lose
one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
HEADING = "## Change -> where"

CHANGES = (
    "codec",
    "slashable offence",
    "segment",
    "TEE",
    "scoring rule",
    "consensus",
    "audit draw",
    "vesting period",
    "q's inputs",
    "default stake",
    "outer momentum",
    "/status",
    "log line",
    "phase",
    "preset",
    "attack scenario",
    "fault scenario",
    "metric",
    "contract field",
    "CLI command",
)
"""A word of each common change; each names one row: the twelve of issue 25 item 7, and issue 36 item 5's
run-file values (the vesting period, q's inputs, the outer momentum) and the default stake, a ``/status`` field, the round's log
line and each Python/Solidity twin (the consensus, the audit draw)."""

_PLACE = re.compile(r"`(?P<path>[^`]+)`(?:\s*:\s*(?P<symbols>(?:`[^`]+`\s*,?\s*)+))?")


def table() -> list[tuple[str, list[tuple[str, list[str]]]]]:
    """``(change, [(path, [symbol, ...]), ...])`` for every row of the table."""
    text = DOC.read_text(encoding="utf-8")
    first = re.search(r"(?m)^## .*$", text)
    assert first and first.group(0).strip() == HEADING, f"docs/architecture.md must open with '{HEADING}'"
    body = text[first.end() :].split("\n## ", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("|")][2:]  # header and rule
    out = []
    for line in rows:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 2, f"a row has two cells (change | where): {line}"
        places = []
        for part in cells[1].split(";"):
            m = _PLACE.fullmatch(part.strip())
            assert m, f"not `path` or `path`: `symbol`, ...: {part.strip()!r} (row {cells[0]!r})"
            places.append((m["path"], re.findall(r"`([^`]+)`", m["symbols"] or "")))
        out.append((cells[0], places))
    return out


def _python_defines(path: Path, dotted: str) -> bool:
    scope: list[ast.stmt] = ast.parse(path.read_text(encoding="utf-8")).body
    for part in dotted.split("."):
        found = _binding(scope, part)
        if found is None:
            return False
        scope = found.body if isinstance(found, ast.ClassDef) else []
    return True


def _binding(body: list[ast.stmt], name: str) -> ast.stmt | None:
    """The statement of ``body`` (``if``/``try`` blocks included) that defines ``name``, if any."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return node
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return node
        if isinstance(node, ast.If | ast.Try):
            nested = [*node.body, *node.orelse, *getattr(node, "finalbody", [])]
            if (found := _binding(nested, name)) is not None:
                return found
    return None


def _solidity_defines(path: Path, name: str) -> bool:
    text = path.read_text(encoding="utf-8")
    kinds = r"(?:contract|interface|library|function|modifier|event|error|struct|enum)"
    declared = rf"\b{kinds}\s+{re.escape(name)}\b"
    member = rf"^\s*[A-Za-z_][\w.\[\]]*(?:\s+(?:public|private|internal|immutable|constant))*\s+{re.escape(name)}\s*[;=]"
    return bool(re.search(declared, text) or re.search(member, text, re.M))


def test_the_table_opens_the_doc_with_the_common_changes() -> None:
    rows = table()
    assert len(rows) == len(CHANGES), [c for c, _ in rows]
    for change in CHANGES:
        named = [c for c, _ in rows if change.lower() in c.lower()]
        assert len(named) == 1, f"one row for '{change}', got {named}"


def test_every_named_file_exists_and_defines_its_symbols() -> None:
    missing = []
    for change, places in table():
        for rel, symbols in places:
            path = ROOT / rel
            if not path.is_file():
                missing.append(f"{change}: no file {rel}")
                continue
            for symbol in symbols:
                if rel.endswith(".py"):
                    ok = _python_defines(path, symbol)
                elif rel.endswith(".sol"):
                    ok = _solidity_defines(path, symbol)
                else:
                    raise AssertionError(f"{change}: symbols are checked in .py and .sol files only ({rel})")
                if not ok:
                    missing.append(f"{change}: {rel} defines no {symbol}")
    assert not missing, "docs/architecture.md 'Change -> where' misroutes:\n" + "\n".join(missing)
