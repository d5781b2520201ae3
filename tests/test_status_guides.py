"""The operator guides' ``/status`` tables name exactly the typed documents' fields.

Each guide (docs/operator-miner.md, docs/operator-validator.md) has a section ``### `/status` fields`` with
two tables whose first cell is a backticked field name: the ``/status`` fields (``protocol.node.statusdoc``:
``NodeStatus``'s shared fields and the role's part) and the ``round_report`` figures
(``protocol.node.roundreport``: the role's figures and ``line``). A field added, renamed or dropped in the
dataclasses without its row, or a row without its field, fails here. The documents the nodes serve are
checked against the same dataclasses (``test_a_status_document_is_its_fields``).
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from protocol.node.roundreport import MinerRoundFigures, RoundFigures, ValidatorRoundFigures
from protocol.node.statusdoc import MinerStatus, NodeStatus, RolePart, ValidatorStatus, field_names

ROOT = Path(__file__).resolve().parent.parent
HEADING = "### `/status` fields"
_ROW = re.compile(r"^\| `(?P<name>[a-z_]+)` \| (?P<text>.*\S) \|$")

GUIDES = (
    ("docs/operator-miner.md", MinerStatus, MinerRoundFigures),
    ("docs/operator-validator.md", ValidatorStatus, ValidatorRoundFigures),
)


def tables(guide: str) -> list[list[str]]:
    """The field names of each table in the guide's ``/status`` section, in order."""
    text = (ROOT / guide).read_text(encoding="utf-8")
    assert text.count(HEADING) == 1, f"{guide}: one '{HEADING}' section"
    section = text.split(HEADING, 1)[1]
    section = re.split(r"(?m)^#{1,3} ", section, maxsplit=1)[0]
    found: list[list[str]] = []
    in_table = False
    for line in section.splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        if not in_table:
            found.append([])
            in_table = True
        row = _ROW.match(line)
        if row:
            found[-1].append(row["name"])
    return found


def figure_names(figures: type[RoundFigures]) -> set[str]:
    """The keys of a role's ``round_report``: its figures and the line."""
    return {f.name for f in fields(figures)} | {"line"}


@pytest.mark.parametrize(("guide", "part", "figures"), GUIDES)
def test_a_guide_names_exactly_the_status_fields(
    guide: str, part: type[RolePart], figures: type[RoundFigures]
) -> None:
    status, report = tables(guide)
    assert len(status) == len(set(status)), f"{guide}: a /status field named twice"
    assert set(status) == field_names(part), f"{guide}: /status table vs protocol.node.statusdoc"
    assert len(report) == len(set(report)), f"{guide}: a round_report field named twice"
    assert set(report) == figure_names(figures), f"{guide}: round_report table vs protocol.node.roundreport"


def test_the_shared_fields_are_declared_once() -> None:
    """Neither role's part nor its figures repeat a field the shared dataclass declares."""
    shared = {f.name for f in fields(NodeStatus)}
    for part in (MinerStatus, ValidatorStatus):
        assert not shared & {f.name for f in fields(part)}, part
    base = {f.name for f in fields(RoundFigures)}
    for figures in (MinerRoundFigures, ValidatorRoundFigures):
        own = {f.name for f in fields(figures)} - base
        assert own and "line" not in own, figures


def test_a_status_document_is_its_fields() -> None:
    """``to_json`` writes every shared field and the role's, flat, and nothing else."""
    doc = NodeStatus(
        role="validator",
        address="0xA",
        url="http://x",
        round=3,
        phase="verify",
        last_error="",
        account=None,
        key_in_use="",
        dht_refused_records=0,
        dht_refused_at_node=0,
        dht_maddrs=[],
        round_report=None,
        part=ValidatorStatus(theta_round=3),
    )
    got = doc.to_json()
    assert set(got) == field_names(ValidatorStatus)
    assert got["theta_round"] == 3 and got["role"] == "validator" and "part" not in got
