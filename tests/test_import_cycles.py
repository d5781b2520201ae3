"""No import cycles between the project's modules (issue 15).

Reads every module of the packages below as text (nothing is imported) and builds the graph of its
module-level imports, those under ``if``/``try`` included and those under ``if TYPE_CHECKING`` and inside
functions left out (they do not run at import time); a strongly connected component of more than one module
is a cycle. docs/architecture.md: a split that would make a cycle moves the callers instead of re-exporting.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("training", "protocol", "attestation", "miner", "validator", "tessera", "benchmarks")


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            mods[name.removesuffix(".__init__")] = path
    return mods


def _owner(name: str, mods: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is one of our modules."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _targets(module: str, node: ast.Import | ast.ImportFrom, mods: dict[str, Path]) -> set[str]:
    if isinstance(node, ast.Import):
        return {m for a in node.names if (m := _owner(a.name, mods))}
    base = node.module or ""
    if node.level:
        package = module if mods[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    out = set()
    for a in node.names:
        full = f"{base}.{a.name}"
        target = full if full in mods else _owner(base, mods)
        if target:
            out.add(target)
    return out


def _import_time_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        elif isinstance(node, ast.If | ast.Try):
            found += [n for n in ast.walk(node) if isinstance(n, ast.Import | ast.ImportFrom)]
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports when it is imported."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        deps: set[str] = set()
        for node in _import_time_imports(tree):
            deps |= _targets(name, node, mods)
        graph[name] = deps - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles() -> None:
    graph = import_graph()
    assert len(graph) > 150  # the scan found the project
    assert cycles(graph) == []


def test_a_cycle_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
