"""The phase-window rule of :mod:`tessera.devnet.sizing` on given work times (no measurement)."""

from __future__ import annotations

from tessera.devnet.sizing import (
    LOAD_SAFETY,
    SCORE_COMMIT_MARGIN_BLOCKS,
    PhaseWindows,
    phase_windows,
    slowest,
)
from tessera.devnet.work import WorkTimes

FLOORS = {"commit": 60, "reveal": 10, "score_commit": 30, "score_reveal": 10}


def test_rule_contention_safety_margin_and_floors() -> None:
    work = WorkTimes(train_s=10.0, verify_s=2.0, heldout_s=1.0, merge_s=0.5, start_s=6.0)
    pw = phase_windows(work, miners=4, validators=2, block_time=1.0, floors=FLOORS, cores=2)
    # commit: 6 + 0.5 + 1 + 10 x ceil(4 / 2) = 27.5 s -> ceil(4 x 27.5) = 110 blocks
    assert pw.seconds["commit"] == 27.5 and pw.commit == 110
    # reveal and score-reveal: a node's start, 6 s -> 24 blocks
    assert pw.reveal == pw.score_reveal == 24
    # score-commit: 6 + (4 x 2 + 1) x ceil(2 / 2) = 15 s -> 60 s, plus one audit's serving window and
    # checks (20 + 5 s, a wait: not multiplied) -> 85 blocks + the validators' margin
    assert pw.score_commit == 85 + SCORE_COMMIT_MARGIN_BLOCKS
    assert "audit window 25s" in pw.derivation[2]
    assert len(pw.derivation) == 4 and "floor 60 blocks (60s) -> 110 blocks" in pw.derivation[0]
    assert pw.blocks() == {
        "commit_blocks": 110,
        "reveal_blocks": 24,
        "score_commit_blocks": 89,
        "score_reveal_blocks": 24,
    }
    assert PhaseWindows.from_json(pw.to_json()).blocks() == pw.blocks()
    assert pw.round_seconds(2.0) == 2.0 * (110 + 24 + 89 + 24)


def test_floors_hold_for_small_work_and_block_time_scales() -> None:
    small = WorkTimes(train_s=0.1, verify_s=0.1, heldout_s=0.01, merge_s=0.01, start_s=0.5)
    pw = phase_windows(
        small, miners=3, validators=2, block_time=1.0, floors=FLOORS, cores=2, audit_window_s=0
    )
    assert pw.blocks() == {f"{k}_blocks": v for k, v in FLOORS.items()}
    big = WorkTimes(train_s=100.0, verify_s=10.0, heldout_s=1.0, merge_s=1.0, start_s=10.0)
    slow_chain = phase_windows(big, miners=3, validators=2, block_time=12.0, floors=FLOORS, cores=8)
    fast_chain = phase_windows(big, miners=3, validators=2, block_time=1.0, floors=FLOORS, cores=8)
    assert slow_chain.commit < fast_chain.commit
    assert slow_chain.commit * 12.0 >= LOAD_SAFETY * slow_chain.seconds["commit"]


def test_floors_are_seconds_whatever_the_block_time() -> None:
    """A floor in blocks doubled the commit window on 2-s blocks (issue 35): floors are seconds."""
    small = WorkTimes(train_s=0.1, verify_s=0.1, heldout_s=0.01, merge_s=0.01, start_s=0.5)
    two = phase_windows(
        small, miners=3, validators=2, block_time=2.0, floors=FLOORS, cores=2, audit_window_s=0
    )
    assert two.blocks() == {f"{k}_blocks": v // 2 for k, v in FLOORS.items()}
    assert two.round_seconds(2.0) == sum(FLOORS.values())
    assert "floor 30 blocks (60s)" in two.derivation[0]


def test_no_interval_mining_keeps_the_floors() -> None:
    work = WorkTimes(train_s=100.0, verify_s=10.0, heldout_s=1.0, merge_s=1.0, start_s=10.0)
    pw = phase_windows(work, miners=3, validators=2, block_time=0, floors=FLOORS)
    assert pw.blocks() == {f"{k}_blocks": v for k, v in FLOORS.items()}
    assert all("not sized" in line for line in pw.derivation)


def test_slowest_setting_wins_per_unit() -> None:
    a = WorkTimes(train_s=1.0, verify_s=3.0, heldout_s=0.1, merge_s=0.1, start_s=5.0, setting={"A": "1"})
    b = WorkTimes(train_s=2.0, verify_s=1.0, heldout_s=0.2, merge_s=0.05, start_s=4.0, setting={"A": "2"})
    w = slowest([a, b])
    assert (w.train_s, w.verify_s, w.heldout_s, w.merge_s, w.start_s) == (2.0, 3.0, 0.2, 0.1, 5.0)
    assert "A=1" in w.setting["slowest_of"] and "A=2" in w.setting["slowest_of"]


def test_the_score_commit_holds_an_audit_that_waits_out_its_serving_window() -> None:
    """Below the serving window, an audited miner's hang was the member's own deadline and went unreported
    (issue 38, a devnet on 2 cores: 12.5 s of budget against a 20-s window): whatever the work, the score
    commit holds the nodes' fetch timeout plus the checks before its margin."""
    from protocol.node.settings import NodeConfig
    from validator.roundschedule import AUDIT_CHECK_S

    small = WorkTimes(train_s=0.1, verify_s=0.1, heldout_s=0.01, merge_s=0.01, start_s=0.5)
    for block_time in (1.0, 2.0, 12.0):
        pw = phase_windows(small, miners=3, validators=2, block_time=block_time, floors=FLOORS, cores=2)
        usable = (pw.score_commit - SCORE_COMMIT_MARGIN_BLOCKS) * block_time
        assert usable >= NodeConfig().fetch_timeout + AUDIT_CHECK_S
        assert pw.inputs["audit_window_s"] == NodeConfig().fetch_timeout + AUDIT_CHECK_S
