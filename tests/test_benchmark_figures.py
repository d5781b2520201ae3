"""docs/benchmarks.md's current figures are the figures of their JSON records (issue 36 item 6).

Each benchmark's section opens with a line naming its run::

    Run: `COMMAND` on commit `abc1234`, JSON `docs/benchmarks/NAME.json`.

and a table ``| figure | value | JSON key |``. A key is a dotted path into the JSON (a list by its index,
``*`` for every element of a list or every value of an object), optionally inside one of ``len``,
``sum``, ``all`` (over the list a ``*`` path gathers, or the one list or object a plain path reaches). A value is a number as shown (thousands separators allowed), equal to the JSON's to the
last digit shown, or ``yes``/``no`` for a boolean. The commit must be inside the file, as the value of a
``commit`` key (a run's own, or the file's). And every file in ``docs/benchmarks/`` is named in
docs/benchmarks.md or docs/benchmarks-log.md, so no record is left that no document explains.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
LOG = ROOT / "docs" / "benchmarks-log.md"
RECORDS = ROOT / "docs" / "benchmarks"

_RUN = re.compile(
    r"^Run: (?P<command>`.+`) on commit `(?P<commit>[0-9a-f]{7,40})`, JSON `(?P<json>docs/benchmarks/[\w.-]+\.json)`\.$"
)
_KEY = re.compile(r"^(?:(?P<fn>len|sum|all)\((?P<inner>[^()]+)\)|(?P<path>[^()]+))$")


def tables() -> list[tuple[str, re.Match[str], list[tuple[str, str, str]]]]:
    """``(heading, run line, [(figure, value, key), ...])`` for each benchmark section that has a run line."""
    out = []
    text = DOC.read_text(encoding="utf-8")
    for section in re.split(r"(?m)^## ", text)[1:]:
        heading, _, body = section.partition("\n")
        runs = [m for line in body.splitlines() if (m := _RUN.match(line))]
        if not runs:
            continue
        assert len(runs) == 1, f"one run line per benchmark: {heading}"
        rows = [line for line in body.splitlines() if line.startswith("|")]
        assert rows[0].replace(" ", "") == "|figure|value|JSONkey|", (
            f"{heading}: the table is | figure | value | JSON key |"
        )
        figures = []
        for line in rows[2:]:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            assert len(cells) == 3, f"{heading}: three cells: {line}"
            key = cells[2]
            assert key.startswith("`") and key.endswith("`"), f"{heading}: the key in backticks: {line}"
            figures.append((cells[0], cells[1], key.strip("`")))
        assert figures, f"{heading}: a table of figures"
        out.append((heading, runs[0], figures))
    return out


def _walk(data: Any, parts: list[str]) -> list[Any]:
    if not parts:
        return [data]
    head, rest = parts[0], parts[1:]
    if head == "*":
        if data is None:  # a field a run left empty (``null``): nothing to gather
            return []
        items = data.values() if isinstance(data, dict) else data
        return [v for item in items for v in _walk(item, rest)]
    if isinstance(data, list):
        return _walk(data[int(head)], rest)
    assert head in data, f"no key {head!r}"
    return _walk(data[head], rest)


def lookup(data: Any, key: str) -> Any:
    """The value of ``key`` (see the module doc) in ``data``."""
    m = _KEY.match(key)
    assert m, f"not a key: {key}"
    if m["path"]:
        found = _walk(data, m["path"].replace("[*]", ".*").split("."))
        assert len(found) == 1 and "*" not in m["path"], f"{key}: one value (use len, sum or all over '*')"
        return found[0]
    inner = m["inner"].replace("[*]", ".*")
    found = _walk(data, inner.split("."))
    items = found if "*" in inner else found[0]
    if m["fn"] == "len":
        return len(items)
    return sum(items) if m["fn"] == "sum" else all(items)


def matches(shown: str, value: Any) -> bool:
    """Whether ``shown`` is ``value`` to the last digit ``shown`` has."""
    if isinstance(value, bool):
        return shown == ("yes" if value else "no")
    try:
        number = Decimal(shown.replace(",", ""))
    except InvalidOperation:
        return False
    exponent = number.as_tuple().exponent
    assert isinstance(exponent, int)
    return abs(Decimal(repr(float(value))) - number) <= Decimal(5) * Decimal(10) ** (exponent - 1)


def commits(data: Any) -> list[str]:
    """Every value of a ``commit`` key in ``data``, at any depth."""
    if isinstance(data, dict):
        own = [str(v) for k, v in data.items() if k == "commit"]
        return own + [c for v in data.values() for c in commits(v)]
    if isinstance(data, list):
        return [c for v in data for c in commits(v)]
    return []


def test_the_matcher_reads_a_figure_to_its_last_digit() -> None:
    assert matches("58,234", 58234) and not matches("58,234", 58235)
    assert matches("0.0189", 0.018893) and not matches("0.0189", 0.01896)
    assert matches("-5.5", -5.4647) and not matches("-5.5", -5.4)
    assert matches("2.893e-06", 2.893e-06) and not matches("2.893e-06", 2.9e-06)
    assert matches("yes", True) and not matches("yes", False) and not matches("1", True)
    data = {
        "runs": [
            {"passed": True, "lost": 0, "checks": {"a": True}},
            {"passed": False, "lost": 2, "checks": {}},
        ]
    }
    assert lookup(data, "len(runs)") == 2 and lookup(data, "sum(runs[*].lost)") == 2
    assert lookup(data, "all(runs[*].passed)") is False and lookup(data, "len(runs[*].checks.*)") == 1
    assert lookup(data, "runs.1.lost") == 2


def test_the_doc_has_a_table_for_each_benchmark_with_a_record() -> None:
    names = {run["json"] for _, run, _ in tables()}
    for expected in ("chain-issue26.json", "crossplatform.json", "verify-cost.json", "presets-tiny.json"):
        assert f"docs/benchmarks/{expected}" in names


@pytest.mark.parametrize("heading,run,figures", tables(), ids=[t[0] for t in tables()])
def test_every_figure_is_its_json_value(
    heading: str, run: re.Match[str], figures: list[tuple[str, str, str]]
) -> None:
    path = ROOT / run["json"]
    assert path.is_file(), f"{heading}: no {run['json']}"
    data = json.loads(path.read_text(encoding="utf-8"))
    inside = commits(data)
    assert any(c.startswith(run["commit"]) for c in inside), (
        f"{heading}: commit {run['commit']} not in {inside}"
    )
    wrong = []
    for figure, shown, key in figures:
        value = lookup(data, key)
        if not matches(shown, value):
            wrong.append(f"{figure}: shows {shown}, {run['json']} has {key} = {value!r}")
    assert not wrong, "\n".join(wrong)


def test_every_record_is_named_in_the_benchmark_docs() -> None:
    docs = DOC.read_text(encoding="utf-8") + LOG.read_text(encoding="utf-8")
    unnamed = [
        p.name for p in sorted(RECORDS.iterdir()) if f"`{p.name}`" not in docs and f"/{p.name}`" not in docs
    ]
    assert not unnamed, f"files in docs/benchmarks/ that neither benchmarks doc names: {unnamed}"
