"""One spelling of the round outside the tests: ``round`` (issue 15, docs/architecture.md "Names").

Every Python file of the non-test packages is read with ``ast``: a parameter, a class field or a keyword
argument spelled ``round_``, ``round_index`` or ``rnd`` fails, and so does an ``int`` parameter or field
named ``r`` or ``p`` (a round under a one-letter name; ``r`` for a byte reader or ``p`` for a path or a
parser stay). Local and loop variables are not checked: ``for r in range(1, rounds + 1)`` may stay.
"""

from __future__ import annotations

import ast

from tests.test_sizes import PACKAGES, ROOT

OTHER_SPELLINGS = frozenset({"round_", "round_index", "rnd", "round_no", "round_number"})
"""Names of the round that are not ``round``."""

ONE_LETTER = frozenset({"r", "p"})
"""One-letter names refused for an ``int`` (a round, in this code base)."""


def _is_int(annotation: ast.expr | None) -> bool:
    return annotation is not None and ast.unparse(annotation) == "int"


def offences(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of every spelling of the round other than ``round`` in ``tree``."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
                if arg.arg in OTHER_SPELLINGS or (arg.arg in ONE_LETTER and _is_int(arg.annotation)):
                    out.append((arg.lineno, f"parameter {arg.arg}"))
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    name = item.target.id
                    if name in OTHER_SPELLINGS or (name in ONE_LETTER and _is_int(item.annotation)):
                        out.append((item.lineno, f"field {name}"))
        elif isinstance(node, ast.keyword) and node.arg in OTHER_SPELLINGS:
            out.append((node.value.lineno, f"keyword {node.arg}="))
    return out


def test_the_round_is_spelled_round() -> None:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            hits = offences(ast.parse(path.read_text(encoding="utf-8"), filename=rel))
            if hits:
                found[rel] = hits
    assert not found, f"spell the round `round` (docs/architecture.md, Names): {found}"


def test_a_synthetic_module() -> None:
    src = (
        "def f(round_: int, r: int, p: str, q) -> None: ...\n"
        "class C:\n    round_index: int\n    p: int\n    round: int\n"
        "def g(r: 'ByteReader', round: int) -> None:\n    for r in range(3):\n        h(rnd=r)\n"
    )
    assert sorted(offences(ast.parse(src))) == [
        (1, "parameter r"),
        (1, "parameter round_"),
        (3, "field round_index"),
        (4, "field p"),
        (8, "keyword rnd="),
    ]
