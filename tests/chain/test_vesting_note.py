"""``tessera account claim`` with nothing vested says, in numbers, what is vesting and when it vests."""

from __future__ import annotations

from tessera.commands.account import vesting_note


def test_the_note_names_the_rounds_not_a_setting() -> None:
    note = vesting_note("0xabc", 3 * 10**18, 2, 9)
    assert "vesting_rounds" not in note and "3" in note
    assert "the round 2 after it is finalized" in note and "round 7 and later" in note
    assert "after round 9 is finalized" in note
    assert vesting_note("0xabc", 0, 2, 9) == "0xabc has no rewards to claim (owed 0)"
    assert "round 1 and later" in vesting_note("0xabc", 1, 4, 2)  # never a round before the first
