"""No module over 400 lines and no function over 60 outside the tests, except the listed ones (issue 15).

Every Python file of the non-test packages is measured with ``ast``: a module's size is its line count,
a function's or method's is ``end_lineno - lineno + 1`` (from its ``def`` line; nested functions and
methods are measured on their own too, named by their dotted path: ``Class.method``, ``outer.inner``).
An entry over its limit fails unless it is in :data:`MODULES` (``path -> reason``) or :data:`FUNCTIONS`
(``path::name -> reason``); an entry in those lists that is no longer over its limit (or no longer
exists) fails as well, so the lists only shrink as the code improves. docs/architecture.md, section
"Sizes", shows the same lists with the same reasons (checked here too).

``python -m tests.test_sizes`` prints what is over the limits now, allowlisted or not.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("training", "protocol", "attestation", "miner", "validator", "tessera", "benchmarks")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60

MODULES: dict[str, str] = {
    "protocol/chain/errors.py": "one typed class per Solidity custom error and transport failure (58 classes, mostly docstrings)",
    "validator/recompute.py": (
        "one stage over one transcript: the transcript states fetched part by part, the anchor, the final "
        "cosine, the error-feedback recomputation (F12) and the segment replays share one state cache and "
        "one entry (recompute)"
    ),
    "protocol/wire/updateheader.py": (
        "the v4 header is one seam: its fields, the parameters and transcript steps it derives from module "
        "ids and dims, the transcript it commits to, its JSON form and its parse (was updateheader + "
        "updateparams, whose helpers sat in each other's file)"
    ),
}
"""Modules over :data:`MAX_MODULE_LINES`, and why."""

FUNCTIONS: dict[str, str] = {}
"""Functions and methods over :data:`MAX_FUNCTION_LINES`, and why."""


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, int]]:
    """(dotted name, lines) of every function and method under ``tree``, nested ones included."""
    out: list[tuple[str, int]] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            name = prefix + node.name
            assert node.end_lineno is not None
            out.append((name, node.end_lineno - node.lineno + 1))
            out += _functions(node, name + ".")
        elif isinstance(node, ast.ClassDef):
            out += _functions(node, prefix + node.name + ".")
        else:
            out += _functions(node, prefix)
    return out


def measure() -> tuple[dict[str, int], dict[str, int]]:
    """Lines of every module (``path``) and function (``path::name``) of :data:`PACKAGES`."""
    modules: dict[str, int] = {}
    functions: dict[str, int] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            text = path.read_text(encoding="utf-8")
            modules[rel] = len(text.splitlines())
            for name, lines in _functions(ast.parse(text, filename=rel)):
                functions[f"{rel}::{name}"] = lines
    return modules, functions


def _over(sizes: dict[str, int], limit: int) -> dict[str, int]:
    return {k: v for k, v in sizes.items() if v > limit}


def test_no_module_over_the_limit_unless_listed() -> None:
    modules, _ = measure()
    extra = {k: v for k, v in _over(modules, MAX_MODULE_LINES).items() if k not in MODULES}
    assert not extra, (
        f"modules over {MAX_MODULE_LINES} lines: {extra}; split them along their seams (callers import from "
        f"the new modules; nothing but an __init__ re-exports), or list them in MODULES with the reason and in "
        f"docs/architecture.md (Sizes)"
    )


def test_no_function_over_the_limit_unless_listed() -> None:
    _, functions = measure()
    extra = {k: v for k, v in _over(functions, MAX_FUNCTION_LINES).items() if k not in FUNCTIONS}
    assert not extra, (
        f"functions over {MAX_FUNCTION_LINES} lines: {extra}; extract documented helpers, or list them in "
        f"FUNCTIONS with the reason and in docs/architecture.md (Sizes)"
    )


def test_every_listed_entry_is_still_over_its_limit() -> None:
    """The lists shrink as the code improves: an entry that fits now (or is gone) must be removed."""
    modules, functions = measure()
    fits = [k for k in MODULES if modules.get(k, 0) <= MAX_MODULE_LINES]
    fits += [k for k in FUNCTIONS if functions.get(k, 0) <= MAX_FUNCTION_LINES]
    assert not fits, (
        f"no longer over the limit (or gone): remove from tests/test_sizes.py and the docs: {fits}"
    )


def test_the_docs_list_the_same_exceptions_with_the_same_reasons() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    match = re.search(r"^## Sizes\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, "docs/architecture.md has no '## Sizes' section"
    rows = dict(re.findall(r"^\| `([^`]+)` \| (.+?) \|$", match.group(1), re.MULTILINE))
    assert rows == {**MODULES, **FUNCTIONS}


def main() -> None:
    """Print every module and function over its limit now, and whether it is listed."""
    modules, functions = measure()
    for sizes, listed, limit in (
        (modules, MODULES, MAX_MODULE_LINES),
        (functions, FUNCTIONS, MAX_FUNCTION_LINES),
    ):
        for name, lines in sorted(_over(sizes, limit).items()):
            print(f"{lines:5d} {'listed  ' if name in listed else 'UNLISTED'} {name}")
        for name in sorted(set(listed) - set(_over(sizes, limit))):
            print(f"{sizes.get(name, 0):5d} STALE    {name}")


if __name__ == "__main__":
    main()
