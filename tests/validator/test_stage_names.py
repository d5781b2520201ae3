"""A verdict's stage is compared as a ``validator.stages.Stage``, never as a bare string (issue 15).

Every Python file of the non-test packages is read with ``ast``: a comparison (``==``, ``!=``, ``in``,
``not in``) whose one side names a stage (an attribute, subscript or ``.get`` of ``stage`` or
``verify_stage``) and whose other side holds a string literal that is a stage's value fails. A renamed
stage then fails where it is compared, not in a state file read months later.
"""

from __future__ import annotations

import ast

from tests.test_sizes import PACKAGES, ROOT
from validator.stages import Stage

STAGE_NAMES = frozenset({"stage", "verify_stage"})
VALUES = frozenset(s.value for s in Stage)


def _names_a_stage(node: ast.expr) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr in STAGE_NAMES
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value in STAGE_NAMES
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return (
            bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value in STAGE_NAMES
        )
    return isinstance(node, ast.Name) and node.id in STAGE_NAMES


def _stage_literals(node: ast.expr) -> list[str]:
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return [x.value for x in items if isinstance(x, ast.Constant) and x.value in VALUES]


def offences(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, literal) of every stage compared with a bare string in ``tree``."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        for a, b in zip(sides, sides[1:], strict=False):
            for x, y in ((a, b), (b, a)):
                if _names_a_stage(x):
                    out += [(node.lineno, lit) for lit in _stage_literals(y)]
    return out


def test_no_stage_is_compared_as_a_bare_string() -> None:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            found += [f"{rel}:{line}: {lit!r}" for line, lit in offences(ast.parse(path.read_text()))]
    assert not found, "compare with validator.stages.Stage:\n" + "\n".join(found)


def test_the_check_sees_each_form() -> None:
    src = """
v["stage"] != "ok"
vd.get("stage") not in ("commit", "fetch")
w.verify_stage == "recompute"
stage == "bounds"
point != "commit"
v.stage == Stage.OK
"""
    assert [lit for _, lit in offences(ast.parse(src))] == ["ok", "commit", "fetch", "recompute", "bounds"]
