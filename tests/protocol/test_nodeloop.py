"""The node loop: steps at the interval, backs off on typed errors, stops on ``stop`` or ``done``."""

from __future__ import annotations

import threading

import pytest

from protocol.errors import ProtocolError
from protocol.node.loop import MAX_BACKOFF, StepLoop


class _Clock(threading.Event):
    """A stop event whose ``wait`` records the requested waits instead of sleeping."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.waits: list[float] = []
        self.limit = limit

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(float(timeout or 0))
        if len(self.waits) >= self.limit:
            self.set()
        return self.is_set()


def test_backoff_doubles_on_typed_errors_and_resets_on_success() -> None:
    outcomes = iter([ProtocolError("rpc down")] * 6 + [None, ProtocolError("again"), None])
    seen: list[tuple[str, float]] = []

    def step() -> None:
        exc = next(outcomes)
        if exc is not None:
            raise exc

    clock = _Clock(limit=9)
    StepLoop(interval=0.5, retry_on=(ProtocolError,), on_error=lambda e, b: seen.append((str(e), b))).run(
        step, clock
    )
    assert clock.waits == [1.0, 2.0, 4.0, 8.0, MAX_BACKOFF, MAX_BACKOFF, 0.5, 1.0, 0.5]
    assert [b for _, b in seen] == [0.5, 1.0, 2.0, 4.0, 8.0, MAX_BACKOFF, 0.5]


def test_done_ends_the_loop_and_untyped_errors_are_survived() -> None:
    calls: list[int] = []
    StepLoop(
        interval=0.1, retry_on=(ProtocolError,), on_error=lambda e, b: None, done=lambda: len(calls) >= 3
    ).run(lambda: calls.append(1), _Clock(limit=100))
    assert len(calls) == 3

    def bug() -> None:
        raise KeyError("one peer's input broke a boundary")

    seen: list[str] = []
    clock = _Clock(limit=5)
    StepLoop(
        interval=0.1, retry_on=(ProtocolError,), on_error=lambda e, b: seen.append(type(e).__name__)
    ).run(bug, clock)
    assert seen == ["KeyError"] * 5 and clock.waits == [0.2, 0.4, 0.8, 1.6, 3.2]  # reported, backed off
    with pytest.raises(KeyError):
        StepLoop(
            interval=0.1, retry_on=(ProtocolError,), on_error=lambda e, b: None, survive_untyped=False
        ).run(bug, _Clock(limit=5))

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        StepLoop(interval=0.1, retry_on=(ProtocolError,), on_error=lambda e, b: None).run(
            interrupted, _Clock(limit=5)
        )


def test_failure_reporter_keeps_counts_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    import logging
    from types import SimpleNamespace

    from protocol.node.loop import failure_reporter

    counts: dict[str, int] = {}

    class _Counter:
        def labels(self, type: str) -> SimpleNamespace:
            return SimpleNamespace(inc=lambda: counts.__setitem__(type, counts.get(type, 0) + 1))

    node = SimpleNamespace(last_error="", metrics=SimpleNamespace(errors=_Counter()))
    report = failure_reporter(node, "miner", logging.getLogger("test.nodeloop"))
    with caplog.at_level(logging.WARNING, logger="test.nodeloop"):
        report(ProtocolError("rpc down"), 2.0)
    assert node.last_error == "ProtocolError: rpc down" and counts == {"ProtocolError": 1}
    assert "miner step failed (retrying in 2.0s): ProtocolError: rpc down" in caplog.text


def test_status_stops_showing_an_error_once_the_node_recovers(caplog: pytest.LogCaptureFixture) -> None:
    """``/status`` kept the last error forever after the node recovered (issue 16)."""
    import logging
    from types import SimpleNamespace

    from protocol.node.loop import failure_reporter, recovery_reporter

    errors_seen: list[str] = []

    class _Counter:
        def labels(self, type: str) -> SimpleNamespace:
            return SimpleNamespace(inc=lambda: None)

    node = SimpleNamespace(last_error="", metrics=SimpleNamespace(errors=_Counter()))
    logger = logging.getLogger("test.nodeloop")
    outcomes = iter([ProtocolError("rpc down"), ProtocolError("rpc down"), None, None])

    def step() -> None:
        errors_seen.append(node.last_error)
        exc = next(outcomes)
        if exc is not None:
            raise exc

    with caplog.at_level(logging.WARNING, logger="test.nodeloop"):
        StepLoop(
            interval=1.0,
            retry_on=(ProtocolError,),
            on_error=failure_reporter(node, "miner", logger),
            on_recovery=recovery_reporter(node, "miner", logger),
        ).run(step, _Clock(limit=4))
    assert errors_seen == ["", "ProtocolError: rpc down", "ProtocolError: rpc down", ""]
    assert node.last_error == ""
    assert caplog.text.count("miner recovered (last error: ProtocolError: rpc down)") == 1


def test_the_poll_wait_doubles_while_nothing_changes_and_resets_on_a_change() -> None:
    """Issue 26: a look at the chain every 0.5 s was most of a node's requests; the wait grows while the
    node's view stays the same, up to the cap and half the time left to the deadline."""
    from protocol.node.loop import PollPacer

    pacer = PollPacer(0.5, cap=4.0)
    at = {"round": 3, "phase": 1, "block": 100, "deadline": 150}  # 50 blocks (1 s each until measured)
    # the cap: 4 s, or the window over PHASE_POLLS (8) = 6.25 s
    assert [pacer.next(**at, doing="serving") for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 6.25, 6.25]
    assert pacer.next(**at, doing="verifying") == 0.5  # the node started doing something else
    assert pacer.next(**{**at, "phase": 2}, doing="verifying") == 0.5  # the phase moved
    near = {**at, "phase": 2, "deadline": 102}  # 2 blocks left: at most half of them
    assert [pacer.next(**near, doing="verifying") for _ in range(3)] == [1.0, 1.0, 1.0]
    late = {**at, "phase": 2, "block": 103, "deadline": 102}  # past the deadline: a phase to advance
    assert pacer.next(**late, doing="verifying") == 0.5


def test_the_idle_polls_of_a_phase_do_not_grow_with_its_length() -> None:
    """Issue 26: with a fixed cap an idle node asked every 4 s, so a 220-s round cost twice a 110-s one; the
    cap is the phase window over ``PHASE_POLLS``, so a node idle through a phase asks about as often in a
    long one as in a short one."""
    from protocol.node.loop import PHASE_POLLS, PollPacer

    def polls(blocks: int) -> int:
        now = [0.0]
        pacer, n = PollPacer(0.5, cap=4.0, clock=lambda: now[0]), 0
        while now[0] < blocks:  # 1-s blocks: the block is the second
            now[0] += pacer.next(
                round=3, phase=1, block=100 + int(now[0]), deadline=100 + blocks, doing="serving"
            )
            n += 1
        return n

    short, long = polls(60), polls(600)
    assert short <= PHASE_POLLS + 12 and long <= PHASE_POLLS + 16, (short, long)
    assert long < 2 * short, (short, long)  # 14 and 21; a fixed 4-s cap asked about 150 times in 600 s


def test_no_wait_is_shorter_than_half_a_block() -> None:
    """Issue 26: on a chain of 2-s blocks a look every 0.5 s after each change sees the same block 4 times."""
    from protocol.node.loop import PollPacer

    now = [0.0]
    pacer = PollPacer(0.5, cap=4.0, clock=lambda: now[0])
    pacer.next(round=3, phase=1, block=100, deadline=200, doing="serving")
    now[0] = 20.0  # 10 blocks in 20 s: 2-s blocks
    pacer.next(round=3, phase=1, block=110, deadline=200, doing="serving")
    assert pacer.block_seconds() == 2.0
    assert pacer.next(round=3, phase=1, block=110, deadline=200, doing="verifying") == 1.0  # a change
    now[0] = 202.0
    assert pacer.next(round=3, phase=1, block=201, deadline=200, doing="verifying") == 1.0  # past it
