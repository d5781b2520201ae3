"""The verification schedule (issue 27 items 1-2) on a fake clock: budgets from the phase window and the
number of miners, the seed's order, leftovers to later miners, a paused chain, an RPC outage, retries."""

from __future__ import annotations

import hashlib
import threading
import time
from types import SimpleNamespace

from validator.blockclock import BlockClock
from validator.context import Verdict
from validator.roundschedule import MAX_TRIES, RETRY_DELAY_S, RoundSchedule, seeded_order
from validator.schedule import VerifyScheduler
from validator.stages import Stage


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


MINERS = ["0x" + hashlib.sha256(bytes([i])).hexdigest()[:40] for i in range(6)]
LOW = ["0x000" + "1" * 37, "0x000" + "2" * 37]


def test_order_is_the_seeds_not_the_addresses() -> None:
    everyone = [*MINERS, *LOW]
    orders = [seeded_order(bytes([s]) * 32, everyone) for s in range(8)]
    assert all(sorted(o) == sorted(everyone) for o in orders)
    assert len({tuple(o) for o in orders}) == 8  # each round's seed shuffles anew
    assert seeded_order(b"\1" * 32, everyone) == seeded_order(b"\1" * 32, list(reversed(everyone)))
    # ground low addresses are first in at most their fair share of rounds (here: not in most)
    firsts = sum(o[0] in LOW for o in (seeded_order(bytes([s, 7]) * 16, everyone) for s in range(64)))
    assert firsts < 32


def _schedule(clock: FakeClock, n: int, window: float, workers: int = 4) -> RoundSchedule:
    return RoundSchedule.create(
        2, b"\2" * 32, MINERS[:n], lambda: 1000.0 + window, workers=workers, clock=clock
    )


def test_budgets_share_the_window_and_leftovers_go_to_later_miners() -> None:
    clock = FakeClock()
    s = _schedule(clock, 6, 120.0, workers=2)
    a, b = s.start_next(), s.start_next()
    assert a is not None and b is not None and s.start_next() is None  # two workers
    assert a.budget_s == b.budget_s == 40.0  # 120 s over three waves of two
    clock.t += 5  # a was quick
    s.finish(a.miner)
    c = s.start_next()
    assert c is not None and c.budget_s == 115.0 / 3  # 5 unfinished in 3 waves
    clock.t += 35  # b, a dripping peer, is cut at its budget (t = 40) and takes nothing more
    assert b.out_of_time() and b.remaining() == 0.0 and not c.out_of_time()
    s.finish(b.miner)
    d = s.start_next()
    assert d is not None and d.budget_s == 80.0 / 2  # 4 unfinished: two waves of what is left


def test_fetch_bound_is_what_is_left_of_the_budget() -> None:
    clock = FakeClock()
    s = _schedule(clock, 1, 30.0)
    slot = s.start_next()
    assert slot is not None and slot.budget_s == 30.0
    clock.t += 12.5
    assert slot.remaining() == 17.5
    clock.t += 20
    assert slot.remaining() == 0.0 and slot.out_of_time() and s.due()
    assert s.start_next() is None  # nothing starts past the commit point


def test_commit_point_follows_the_chain_and_survives_an_outage() -> None:
    clock = FakeClock()
    blocks = BlockClock(clock)
    for b in range(100, 105):  # 2-s blocks
        blocks.observe(b)
        clock.t += 2
    clock.t -= 2
    assert blocks.block_seconds() == 2.0
    s = RoundSchedule.create(2, b"\3" * 32, MINERS[:2], lambda: blocks.at(120), clock=clock)
    assert s.time_left() == 32.0
    slot = s.start_next()
    assert slot is not None
    # the chain pauses (a lockstep harness): readings keep coming, the block does not move: no one is cut
    for _ in range(30):
        clock.t += 2
        blocks.observe(104)
    assert s.time_left() >= 30 and not slot.out_of_time()
    # the RPC goes down: no readings; the clock alone brings the commit point
    clock.t += 31
    assert s.due() and slot.out_of_time()


def test_retries_are_bounded() -> None:
    clock = FakeClock()
    s = _schedule(clock, 1, 100.0)
    m = MINERS[0]
    for _ in range(MAX_TRIES - 1):
        assert s.start_next() is not None and s.retry(m)
        assert s.start_next() is None  # a transient failure waits before its next try
        clock.t += RETRY_DELAY_S
    assert s.start_next() is not None and not s.retry(m)
    assert s.complete() is False or not s.queue
    s.finish(m)
    assert s.complete()


def test_a_step_hands_the_loop_back_while_a_worker_waits() -> None:
    """One step verifies for at most its slice and returns False; the worker goes on, and a later step
    records its verdict (a step that held the phase kept a restarted miner from re-announcing)."""
    release = threading.Event()
    miner = MINERS[0]

    def verify(inc: object, ctx: object) -> Verdict:
        release.wait(10)  # a fetch from a miner that answers late
        return Verdict(miner=miner, round=2, accepted=True, stage=Stage.OK, reason="", score=7)

    coord = SimpleNamespace(
        update_commitments=lambda r: {miner: b"\1" * 32},
        current=lambda max_age=0: SimpleNamespace(block=100),
    )
    conn = SimpleNamespace(coord=coord, state=SimpleNamespace(verdict=lambda r, m: None),
                           cfg=SimpleNamespace(poll_interval=0.5), fetch_policy=SimpleNamespace(timeout=20.0))  # fmt: skip
    intake = SimpleNamespace(incoming=lambda *a: a, cache=SimpleNamespace(updates={}))
    sched = VerifyScheduler(conn, intake, SimpleNamespace(verify=verify), workers=2)  # type: ignore[arg-type]
    sched.blocks.observe(100)
    st = SimpleNamespace(round=2, seed=b"\2" * 32, deadline=100 + 200)  # 196 blocks to the commit point
    got: dict[str, Verdict] = {}
    ctx = SimpleNamespace(registry=[miner], audits={})  # no draw: every validator audits
    t0 = time.monotonic()
    assert sched.run(st, ctx, got.__setitem__, slice_s=0.3) is False  # type: ignore[arg-type]
    assert time.monotonic() - t0 < 3 and got == {}
    release.set()
    assert sched.run(st, ctx, got.__setitem__, slice_s=5.0) is True  # type: ignore[arg-type]
    assert got[miner].score == 7 and got[miner].stage == Stage.OK


def test_audited_miners_go_first_with_at_least_the_serving_window() -> None:
    """A budget shared below the serving window made every fetch of an audited miner that hangs the
    validator's own deadline (unreported): on a 2-core devnet, 26 s to the commit point in two waves gave
    12.5 s against a 20-s window. The miners this validator audits start first, each with the window plus
    the checks' time while the commit point allows; the others share what is left."""
    clock = FakeClock()
    audited = MINERS[4]
    s = RoundSchedule.create(
        2, b"\2" * 32, MINERS[:6], lambda: 1000.0 + 26.0, workers=2, clock=clock, audited=[audited],
        audit_budget_s=25.0,
    )  # fmt: skip
    first = s.start_next()
    assert first is not None and first.miner == audited, "the audit starts first"
    assert first.budget_s == 25.0, "not 26 / 3 waves: the serving window plus the checks"
    other = s.start_next()
    assert other is not None and other.miner != audited and other.budget_s == 26.0 / 3
    # never past the commit point
    late = RoundSchedule.create(
        2, b"\2" * 32, [audited], lambda: 1000.0 + 10.0, clock=clock, audited=[audited], audit_budget_s=25.0
    )
    slot = late.start_next()
    assert slot is not None and slot.budget_s == 10.0
    # a miner not audited by this validator keeps the plain share
    plain = RoundSchedule.create(2, b"\2" * 32, MINERS[:6], lambda: 1000.0 + 26.0, workers=2, clock=clock)
    assert [plain.start_next(), plain.start_next()][0].budget_s == 26.0 / 3  # type: ignore[union-attr]
