"""The audit draw's Python mirror (protocol/rounds/audits.py): its properties, the committee median of
``settle``, and the committed vectors that contracts/test/Vectors.t.sol replays are what it writes now.
Against the contract's view on anvil: tests/chain/test_settlement_rules.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.rounds import audits
from protocol.rounds.audits import AuditDraw, audit_draw, counted_matrix
from protocol.rounds.consensus import ConsensusError, settle

VECTORS = Path(__file__).resolve().parents[2] / "contracts" / "test" / "vectors" / "audits.json"
MINER = "0x" + "ab" * 20


@settings(max_examples=200, deadline=None)
@given(
    seed=st.binary(min_size=32, max_size=32),
    n=st.integers(0, 256),
    rate=st.integers(0, 10_000),
    size=st.integers(0, 30),
)
def test_draw_has_the_committee_size_and_range(seed: bytes, n: int, rate: int, size: int) -> None:
    d = audit_draw(seed, MINER, n, rate, size)
    if rate == 10_000:
        assert d.audited
    if rate == 0:
        assert not d.audited
    if not d.audited or n == 0:
        assert d.committee == 0
    else:
        assert bin(d.committee).count("1") == (n if size in (0,) or size >= n else size)
        assert d.committee >> n == 0


def test_draw_concrete() -> None:
    seed = bytes(range(32))
    assert audit_draw(seed, MINER, 3, 10_000, 0) == AuditDraw(True, 0b111)
    assert audit_draw(seed, MINER, 3, 0, 1) == AuditDraw(False, 0)
    one = audit_draw(seed, MINER, 5, 10_000, 1)
    assert bin(one.committee).count("1") == 1
    assert one.members(["a", "b", "c", "d", "e"]) == [
        v for i, v in enumerate("abcde") if one.committee >> i & 1
    ]
    with pytest.raises(ConsensusError):
        audit_draw(b"short", MINER, 3, 1, 1)


def test_settle_on_the_committee_overrides_the_others() -> None:
    # revealer 2 alone is miner 0's committee and scores it 0; the two others' 9000 do not count
    draws = [AuditDraw(True, 0b100), AuditDraw(False, 0)]
    counted = counted_matrix(draws, [0, 1, 2])
    scores = [[9_000, 5_000], [9_000, 5_000], [0, 5_000]]
    assert settle(scores, [1, 1, 1], 1000, 0, counted=counted).medians == [0, 5_000]
    assert settle(scores, [1, 1, 1], 1000, 0).medians == [9_000, 5_000]
    # a committee none of whose members revealed falls back to everyone, as the contract does
    assert settle(scores, [1, 1, 1], 1000, 0, counted=[[False] * 3, [True] * 3]).medians == [9_000, 5_000]
    with pytest.raises(ConsensusError):
        settle(scores, [1, 1, 1], 1000, 0, counted=[[True] * 3])


def test_committed_vectors_are_current() -> None:
    assert json.loads(VECTORS.read_text()) == audits.make_vectors(), (
        "regenerate: cd contracts && npm run vectors"
    )
