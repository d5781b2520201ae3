"""One rule for public names (issue 25): a package's ``__init__`` is its API; nothing else re-exports.

The rule (docs/architecture.md, "Public names"): each package's ``__init__.py`` is its API and may
re-export; no other module re-exports a name it does not define; no private (leading underscore) name
is imported across modules. Every module of :data:`PACKAGES` is read with ``ast`` (nothing is imported).

(a) **Private names.** A module uses another module's private name when it writes
``from M import _name`` or ``M._name`` where ``M`` is one of our modules (bound by ``import M``,
``import M as X`` or ``from P import M``) and ``_name`` starts with one underscore (dunder names such as
``__version__`` are public). Private modules count too (``from P import _mod``). A module's use of its
own private names is fine.

(b) **Re-exports.** A name is *defined* by a module when the module binds it at the top level other than
by an import (``def``, ``class``, an assignment, a ``for``/``with`` target, ...). A non-``__init__``
module ``M`` re-exports ``name`` when ``M`` binds ``name`` only by an import and

- lists it in ``__all__``, or
- imports it as ``from X import name as name`` (the explicit re-export spelling), or
- keeps the import unused with ``# noqa: F401`` (kept only for others to import), or
- some other module (of :data:`PACKAGES` or the tests) reaches it through ``M``: ``from M import name``
  or ``M.name`` on ``M`` bound as a module.

Importing from a package's ``__init__`` is never a re-export; neither is importing a submodule
(``from protocol.wire import update``).

Violations inside the packages being recomposed by issue 25 (validator/, miner/, protocol/wire/) are
listed in :data:`ALLOWED` with the reason; an entry that no longer occurs fails, so the list only shrinks.
``python -m tests.test_public_names`` prints every violation, allowlisted or not.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("training", "protocol", "attestation", "miner", "validator", "tessera", "benchmarks")
IMPORTERS = (*PACKAGES, "tests")
"""Where (b) looks for modules that reach a name through a re-exporting module."""

IN_PROGRESS = "being removed by the issue 25 composition (in progress)"

ALLOWED: dict[str, str] = {
    "tests/validator/test_fetch_only_what_differs.py: reaches replay_segment through validator.recompute": IN_PROGRESS,
}
"""Violations (as :func:`violations` spells them) tolerated for now, and why."""


@dataclass(frozen=True)
class Module:
    """One parsed module of ours."""

    name: str
    """Dotted module name (``protocol.chain`` for ``protocol/chain/__init__.py``)."""
    path: Path
    """The file."""
    tree: ast.Module
    """Its syntax tree."""

    @property
    def rel(self) -> str:
        """The file's path from the repository root."""
        return self.path.relative_to(ROOT).as_posix()

    @property
    def is_package(self) -> bool:
        """Whether this is a package's ``__init__.py``."""
        return self.path.name == "__init__.py"


def _parse(roots: tuple[str, ...]) -> dict[str, Module]:
    mods: dict[str, Module] = {}
    for root in roots:
        for path in sorted((ROOT / root).rglob("*.py")):
            if any(part in {".venv", "node_modules"} for part in path.parts):
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            mods[name] = Module(name, path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    return mods


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _base(module: Module, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` reads from."""
    if not node.level:
        return node.module or ""
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _module_aliases(module: Module, mods: dict[str, Module]) -> dict[str, str]:
    """Local names bound to one of our modules anywhere in ``module`` -> that module's dotted name.

    ``import a.b.c`` binds ``a`` (to package ``a``); ``import a.b as x`` binds ``x``; ``from a import b``
    binds ``b`` when ``a.b`` is a module of ours.
    """
    aliases: dict[str, str] = {}
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname and a.name in mods:
                    aliases[a.asname] = a.name
                elif not a.asname and a.name.split(".")[0] in mods:
                    aliases[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = _base(module, node)
            for a in node.names:
                if f"{base}.{a.name}" in mods:
                    aliases[a.asname or a.name] = f"{base}.{a.name}"
    return aliases


def _attribute_uses(module: Module, aliases: dict[str, str]) -> list[tuple[str, str, int]]:
    """``(target module, attribute, line)`` for every ``X.attr`` (and ``X.y.attr``) on a module alias."""
    uses: list[tuple[str, str, int]] = []
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain: list[str] = [node.attr]
        value = node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if not isinstance(value, ast.Name) or value.id not in aliases:
            continue
        # Only the outermost attribute of a dotted chain names a module's member; inner links are
        # submodules (``protocol.wire.update.X``) and are visited as their own nodes.
        dotted = ".".join([aliases[value.id], *reversed(chain[1:])])
        uses.append((dotted, node.attr, node.lineno))
    return uses


def _top_bindings(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names a module defines, names it binds only by import) at its top level (``if``/``try`` included)."""
    defined: set[str] = set()
    imported: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                imported.update(a.asname or a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                imported.update(a.asname or a.name for a in node.names if a.name != "*")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                defined.add(node.name)
            elif isinstance(node, ast.If | ast.Try | ast.With | ast.For | ast.While):
                for target in _stmt_targets(node):
                    defined.add(target)
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(node, field, []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
            else:
                defined.update(_stmt_targets(node))

    visit(tree.body)
    return defined, imported - defined


def _stmt_targets(node: ast.stmt) -> set[str]:
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        targets = [node.target]
    elif isinstance(node, ast.For):
        targets = [node.target]
    elif isinstance(node, ast.With):
        targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _kept_unused(module: Module) -> set[str]:
    """Names a module imports at its top level with ``# noqa: F401`` (unused here: kept for importers)."""
    lines = module.path.read_text(encoding="utf-8").splitlines()
    kept: set[str] = set()
    for node in module.tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            for a in node.names:
                if "noqa: F401" in lines[a.lineno - 1] or "noqa: F401" in lines[node.lineno - 1]:
                    kept.add(a.asname or a.name.split(".")[0])
    return kept


def _dunder_all(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value:
                value = node.value
                if isinstance(value, ast.List | ast.Tuple):
                    return [e.value for e in value.elts if isinstance(e, ast.Constant)]
    return []


def private_uses(mods: dict[str, Module]) -> list[str]:
    """(a): ``"importer.py: module._name"`` for every private name a module uses from another one."""
    found: list[str] = []
    for module in mods.values():
        if module.name.split(".")[0] not in PACKAGES:
            continue
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ImportFrom):
                base = _base(module, node)
                if base.split(".")[0] not in PACKAGES or base == module.name:
                    continue
                found += [f"{module.rel}: {base}.{a.name}" for a in node.names if _private(a.name)]
            elif isinstance(node, ast.Import):
                found += [
                    f"{module.rel}: {a.name}"
                    for a in node.names
                    if a.name.split(".")[0] in PACKAGES and any(_private(p) for p in a.name.split("."))
                ]
        for target, attr, _ in _attribute_uses(module, _module_aliases(module, mods)):
            if _private(attr) and target != module.name:
                found.append(f"{module.rel}: {target}.{attr}")
    return sorted(set(found))


def reexports(mods: dict[str, Module]) -> list[str]:
    """(b): every re-export outside a package's ``__init__``, one entry per module and per importer.

    ``"m.py: __all__ lists names it only imports: a, b"``, ``"m.py: imports as themselves: a, b"`` (the
    fix goes in ``m.py``) and ``"user.py: reaches a, b through m"`` (the fix goes in ``user.py``: import
    the names from the modules that define them).
    """
    only_imported = {name: _top_bindings(m.tree)[1] for name, m in mods.items() if not m.is_package}
    found: list[str] = []
    for name, names in only_imported.items():
        module = mods[name]
        if name.split(".")[0] not in PACKAGES:
            continue
        listed = sorted({n for n in _dunder_all(module.tree) if n in names})
        if listed:
            found.append(f"{module.rel}: __all__ lists names it only imports: {', '.join(listed)}")
        itself = sorted(
            a.name
            for n in module.tree.body
            if isinstance(n, ast.ImportFrom)
            for a in n.names
            if a.asname == a.name
        )
        if itself:
            found.append(f"{module.rel}: imports as themselves: {', '.join(itself)}")
        kept = sorted(_kept_unused(module))
        if kept:
            found.append(f"{module.rel}: keeps unused imports for others to reach: {', '.join(kept)}")
    for importer in mods.values():
        through: dict[str, set[str]] = {}
        for node in ast.walk(importer.tree):
            if isinstance(node, ast.ImportFrom):
                base = _base(importer, node)
                if base in only_imported and base != importer.name:
                    through.setdefault(base, set()).update(
                        a.name for a in node.names if a.name in only_imported[base]
                    )
        for target, attr, _ in _attribute_uses(importer, _module_aliases(importer, mods)):
            if target in only_imported and target != importer.name and attr in only_imported[target]:
                through.setdefault(target, set()).add(attr)
        found += [
            f"{importer.rel}: reaches {', '.join(sorted(n))} through {m}" for m, n in through.items() if n
        ]
    return sorted(found)


@functools.cache
def violations() -> list[str]:
    """Every violation of the rule now, allowlisted or not (read once per test session)."""
    mods = _parse(IMPORTERS)
    return private_uses(mods) + reexports(mods)


def test_no_private_name_crosses_a_module_and_nothing_but_an_init_re_exports() -> None:
    found = violations()
    extra = [v for v in found if v not in ALLOWED]
    assert not extra, (
        "private names used across modules or names re-exported outside a package's __init__ "
        "(docs/architecture.md, Public names):\n" + "\n".join(extra)
    )


def test_the_allowlist_has_no_stale_entries() -> None:
    found = set(violations())
    stale = [v for v in ALLOWED if v not in found]
    assert not stale, "allowlisted violations that no longer occur (remove them from ALLOWED):\n" + "\n".join(
        stale
    )


if __name__ == "__main__":
    for v in violations():
        print(v, "(allowed)" if v in ALLOWED else "")
