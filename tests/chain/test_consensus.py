"""The Python consensus reference: properties, and the committed vectors are what it generates now."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.chain import _args_from
from protocol.rounds import audits, consensus
from protocol.rounds.consensus import (
    SCORE_MAX,
    is_weighted_median,
    make_vectors,
    miner_payouts,
    settle,
    validator_payouts,
    weighted_median,
)

VECTORS = Path(__file__).resolve().parents[2] / "contracts" / "test" / "vectors" / "consensus.json"

columns = st.integers(1, 8).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, SCORE_MAX), min_size=n, max_size=n),
        st.lists(st.integers(0, 10**24), min_size=n, max_size=n),
    )
)


@settings(max_examples=300, deadline=None)
@given(columns)
def test_median_is_the_unique_value_the_contract_accepts(cw: tuple[list[int], list[int]]) -> None:
    col, w = cw
    m = weighted_median(col, w)
    assert is_weighted_median(col, w, m)
    accepted = [v for v in range(0, SCORE_MAX + 1, 97) if is_weighted_median(col, w, v)] + [
        v for v in set(col) if is_weighted_median(col, w, v)
    ]
    assert set(accepted) <= {m}


def test_median_concrete() -> None:
    assert weighted_median([10, 50, 20, 40, 30], [1, 1, 5, 1, 1]) == 20
    assert weighted_median([5, 9], [1, 1]) == 5  # lower median
    assert weighted_median([], []) == 0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, SCORE_MAX), max_size=12), st.integers(0, 10**27))
def test_miner_payouts_within_budget(medians: list[int], budget: int) -> None:
    assert sum(miner_payouts(medians, budget)) <= budget


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 10**24), st.integers(0, 12 * SCORE_MAX)), max_size=8),
    st.integers(0, 10**27),
)
def test_validator_payouts_within_budget(wc: list[tuple[int, int]], budget: int) -> None:
    assert sum(validator_payouts([w for w, _ in wc], [c for _, c in wc], budget)) <= budget


def test_settle_concrete() -> None:
    s = settle([[5000, 3000, 0], [5001, 3000, 0], [5002, 3000, 0]], [1, 1, 1], 10**18, 2000)
    assert s.medians == [5001, 3000, 0]
    mb = 10**18 - 2 * 10**17
    assert s.miner_pay == [mb * 5001 // 8001, mb * 3000 // 8001, 0]
    assert s.validator_pay[1] > s.validator_pay[0] == s.validator_pay[2]


def test_committed_vectors_are_current() -> None:
    assert json.loads(VECTORS.read_text()) == make_vectors(), "regenerate: cd contracts && npm run vectors"


def test_write_vectors_command_writes_the_committed_bytes(tmp_path: Path) -> None:
    """Both references' ``--write-vectors`` (one command line, ``protocol.wire.vectors``) write, byte for
    byte, the files the forge tests replay."""
    for module, name in ((consensus, "consensus.json"), (audits, "audits.json")):
        out = tmp_path / "sub" / name
        assert module.main(["--write-vectors", str(out)]) == 0
        assert out.read_bytes() == (VECTORS.parent / name).read_bytes(), name


def test_bench_args_from_dispatcher() -> None:
    ns = _args_from(argparse.Namespace(out="bench-chain", extra=["--miners", "4"]))
    assert ns.out == Path("bench-chain/bench-chain.json") and ns.miners == "4"
    assert _args_from([]).out == Path("reports/bench-chain.json")
