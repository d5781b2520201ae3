"""The witness's contested reports live in the validator's state file (issue 26): kept across a restart,
dropped once closed, a state file written before them still loads, a damaged entry is a typed error; and
an expiry is sent only after the report's window, retried on a failure for a bounded number of rounds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol.chain import UnansweredReport
from protocol.rounds.audits import REPORT_WINDOW_ROUNDS
from protocol.rounds.coordinator import AlreadyDoneError, CoordinatorError
from validator.errors import ValidatorStateError
from validator.state import ValidatorState
from validator.witness import EXPIRE_RETRY_ROUNDS, ContestedReports

A, B = b"\xaa" * 32, b"\xbb" * 32


def test_contested_reports_survive_a_restart_and_are_dropped_once_closed(tmp_path: Path) -> None:
    st = ValidatorState(tmp_path)
    st.put_contested(A, 4)
    st.put_contested(B, 5)
    st.put_checkpoint(3, "cc" * 32)
    again = ValidatorState(tmp_path)  # the node restarted
    assert again.contested() == {A: 4, B: 5} and again.checkpoint(3) == "cc" * 32
    again.drop_contested(A)
    again.drop_contested(A)  # gone already: nothing to do
    assert ValidatorState(tmp_path).contested() == {B: 5}
    doc = json.loads((tmp_path / "state.json").read_text())
    assert doc["contested"] == {"0x" + B.hex(): "5"}


def test_a_state_file_without_the_section_loads_and_a_damaged_entry_is_refused(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text(json.dumps({"version": 1, "rounds": {}, "checkpoints": {}}))
    assert ValidatorState(tmp_path).contested() == {}
    (tmp_path / "state.json").write_text(json.dumps({"version": 1, "rounds": {}, "contested": {"0xzz": "4"}}))
    with pytest.raises(ValidatorStateError, match="contested"):
        ValidatorState(tmp_path).contested()


class Board:
    """A chain that refuses or accepts ``expireReport`` as told, and lists what it was sent."""

    def __init__(self, fail: type[Exception] | None = None) -> None:
        self.fail, self.sent = fail, []

    def expire_report(self, evidence: bytes) -> None:
        self.sent.append(evidence)
        if self.fail is not None:
            raise self.fail("refused")

    def audit_witnesses(self, round: int, miners: object) -> dict[str, int]:
        return {}

    def unanswered_report(self, miner: str, round: int) -> UnansweredReport:
        return UnansweredReport(b"", False, False)

    def vote_unanswered(self, evidence: bytes, support: bool) -> None:
        return None


def test_an_expiry_waits_for_the_window_and_a_failed_one_is_retried_then_given_up(tmp_path: Path) -> None:
    reports = ContestedReports(ValidatorState(tmp_path))
    reports.add(A, 4)
    ok = Board()
    assert reports.expire_due(ok, 4 + REPORT_WINDOW_ROUNDS) == [] and ok.sent == []  # window still open
    failing = Board(CoordinatorError)
    last_try = 4 + REPORT_WINDOW_ROUNDS + EXPIRE_RETRY_ROUNDS
    for current in range(4 + REPORT_WINDOW_ROUNDS + 1, last_try + 1):
        assert reports.expire_due(failing, current) == [] and reports.open() == {A: 4}  # kept: tried again
    assert reports.expire_due(failing, last_try + 1) == [] and reports.open() == {}  # given up
    reports.add(B, 9)
    assert reports.expire_due(Board(AlreadyDoneError), 9 + REPORT_WINDOW_ROUNDS + 1) == []
    assert reports.open() == {}  # closed by someone else: forgotten at once
    reports.add(B, 9)
    assert reports.expire_due(ok, 9 + REPORT_WINDOW_ROUNDS + 1) == [B] and ok.sent == [B]
    assert ContestedReports(ValidatorState(tmp_path)).open() == {}
