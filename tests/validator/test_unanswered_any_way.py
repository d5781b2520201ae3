"""Issue 38: unanswered is unanswered whatever the way. An audited miner that does not serve its committee
what its commitment names -- the update itself or a state, by 404, a hang, a drip, a broken or refused
connection, or the wrong bytes -- leaves the audit unanswered, and a retry never turns that into a verdict
that cannot be reported. A committee member's own fault (a fetch its budget cut short of the serving
window, a link that reached nobody) is not reported."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from torch import Tensor

from protocol.p2p.blobs import BlobNotFoundError, DigestMismatchError, FetchTimeoutError, PeerUnavailableError
from protocol.p2p.transfer import FetchPolicy
from protocol.rounds.audits import AuditDraw
from protocol.wire.commitments import update_commitment
from tests.support.rounds import CHAIN_ID, CONTRACT, MINERS, VALIDATOR, Round, make_round
from validator import roundschedule, schedule
from validator.audits import (
    OwnFault,
    ServeWatch,
    answered,
    mark_audit,
    own_fault,
    report_unanswered,
    unanswered,
)
from validator.context import AuditRole, Incoming, Verdict, unreachable
from validator.pipeline import VerificationPipeline
from validator.policy import VerifyPolicy
from validator.roundschedule import MAX_TRIES
from validator.schedule import VerifyScheduler
from validator.stages import Stage

OTHER = "0x" + "d4" * 20
MINE = AuditDraw(True, 0b01)  # the committee is validators[0]: this validator
THEIRS = AuditDraw(True, 0b10)

#: Every way a miner can fail to serve, as the transfer layer reports it.
WAYS: dict[str, Callable[[], Exception]] = {
    "404": lambda: BlobNotFoundError("http://m/blobs/0x..: not found"),
    "hang": lambda: FetchTimeoutError("no complete answer within 10.0s (stalling peer)"),
    "drip": lambda: FetchTimeoutError("no complete answer within 10.0s (stalling peer)"),
    "partial": lambda: PeerUnavailableError("RemoteProtocolError: peer closed connection without sending"),
    "refused": lambda: PeerUnavailableError("ConnectError: [Errno 111] Connection refused"),
    "wrong-bytes": lambda: DigestMismatchError("bytes hash to 0xab.., expected 0xcd.."),
    "stalled-recently": lambda: FetchTimeoutError("http://m: stalled a fetch less than 30s ago; skipped"),
}


@pytest.fixture(scope="module")
def rnd() -> Round:
    return make_round()


def audit(
    rnd: Round,
    draw: AuditDraw,
    *,
    update_fails: Exception | None = None,
    state_fails: Exception | None = None,
    wrong_update: bool = False,
) -> Verdict:
    """Verify MINERS[0]'s honest update under ``draw`` with the update or its states failing as given, then
    tag it as the schedule and the witness do (``mark_audit``)."""
    miner = MINERS[0]
    built = rnd.build(miner)
    served = dict(built.published())
    parts = {d for i in range(len(built.transcript_steps)) for d in built.state_parts(i)}

    def fetch_update() -> bytes:
        if update_fails is not None:
            raise update_fails
        return built.update + b"\0" if wrong_update else built.update

    def fetch_state(digest: str) -> dict[str, Tensor]:
        if state_fails is not None and digest in parts:
            raise state_fails
        return {k: t.clone() for k, t in served[digest].items()}

    commitment = update_commitment(CHAIN_ID, CONTRACT, rnd.round, miner, built.digest)
    inc = Incoming(miner, commitment, fetch_update, fetch_state, fetch_source=rnd.fetch_source)
    ctx = replace(rnd.ctx(), validators=[VALIDATOR, OTHER], audits={miner: draw}, validator_index=0)
    return mark_audit(VerificationPipeline(VerifyPolicy()).verify(inc, ctx), ctx)


@pytest.mark.parametrize("way", sorted(WAYS))
def test_states_not_served_any_way_leave_the_audit_unanswered(rnd: Round, way: str) -> None:
    v = audit(rnd, MINE, state_fails=WAYS[way]())
    assert v.stage == Stage.RECOMPUTE and not v.provable and unanswered(v), (way, v.stage, v.reason)


@pytest.mark.parametrize("way", sorted(WAYS))
def test_the_update_withheld_from_an_audited_member_is_unanswered(rnd: Round, way: str) -> None:
    v = audit(rnd, MINE, update_fails=WAYS[way]())
    assert v.stage == Stage.FETCH and unanswered(v), (way, v.reason)
    assert v.evidence["audit"] == AuditRole.AUDIT
    # a validator that abstains on the miner reports nothing, whatever it was not served
    abstained = audit(rnd, THEIRS, update_fails=WAYS[way]())
    assert abstained.stage == Stage.FETCH and not unanswered(abstained)


def test_bytes_that_are_not_the_committed_update_are_unanswered(rnd: Round) -> None:
    v = audit(rnd, MINE, wrong_update=True)
    assert v.stage == Stage.DIGEST and unanswered(v), v.reason


def test_an_answered_audit_is_not_unanswered(rnd: Round) -> None:
    v = audit(rnd, MINE)
    assert v.accepted and answered(v) and not unanswered(v), v.reason


def test_a_miner_without_a_commitment_or_a_draw_is_never_reported(rnd: Round) -> None:
    no_commit = Verdict(MINERS[0], 2, False, Stage.COMMIT, "no commitment on-chain")
    ctx = replace(rnd.ctx(), validators=[VALIDATOR, OTHER], audits={MINERS[0]: MINE}, validator_index=0)
    assert not unanswered(mark_audit(no_commit, ctx))
    fetch = Verdict(MINERS[0], 2, False, Stage.FETCH, "not served", evidence={"unreachable": True})
    assert not unanswered(mark_audit(fetch, rnd.ctx()))  # no draw from the chain: no committee to report


# -- whose fault: the member's deadline and link -------------------------------------------------------


def _failing_fetch(exc: Exception) -> Callable[[str], dict[str, Tensor]]:
    def fetch(digest: str) -> dict[str, Tensor]:
        raise exc

    return fetch


def _not_served(exc: Exception) -> Verdict:
    return Verdict(
        MINERS[0], 2, False, Stage.RECOMPUTE, str(exc),
        evidence={"audit": str(AuditRole.AUDIT), "unanswered": True, "unreachable": unreachable(exc)},
    )  # fmt: skip


def test_a_timeout_within_less_than_the_serving_window_is_the_members_deadline() -> None:
    exc = FetchTimeoutError("no complete answer within 3.0s (stalling peer)")
    watch = ServeWatch(lambda: 3.0)  # 3 s of budget left when the fetch started: the window is 10 s
    inc = watch.wrap(Incoming(MINERS[0], b"c", lambda: b"", _failing_fetch(exc)))
    with pytest.raises(FetchTimeoutError):
        inc.fetch_state("0xab")
    assert watch.failed_window == 3.0 and watch.short_window(10.0)
    assert own_fault(_not_served(exc), watch, 10.0, link_ok=True) is OwnFault.DEADLINE
    full = ServeWatch(lambda: 40.0)
    with pytest.raises(FetchTimeoutError):
        full.wrap(inc).fetch_state("0xab")
    assert own_fault(_not_served(exc), full, 10.0, link_ok=True) is None  # the miner had its window


def test_a_404_or_wrong_bytes_is_the_miners_whatever_the_window() -> None:
    for exc in (BlobNotFoundError("not found"), DigestMismatchError("bytes hash to 0xab")):
        watch = ServeWatch(lambda: 0.5)
        with pytest.raises(type(exc)):
            watch.wrap(Incoming(MINERS[0], b"c", lambda: b"", _failing_fetch(exc))).fetch_state("0xab")
        assert not watch.short_window(10.0)
        assert own_fault(_not_served(exc), watch, 10.0, link_ok=False) is None


def test_a_member_whose_link_brought_nothing_does_not_blame_the_miner() -> None:
    exc = PeerUnavailableError("ConnectError: network is unreachable")
    v = _not_served(exc)
    assert own_fault(v, ServeWatch(), 10.0, link_ok=False) is OwnFault.LINK
    v.evidence["own_fault"] = str(OwnFault.LINK)
    assert not unanswered(v)


# -- the schedule: retries never lose the report ---------------------------------------------------------


class Board:
    """A coordinator that takes unanswered reports."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, int]] = []

    def report_unanswered(self, miner: str, round: int) -> None:
        self.reports.append((miner, round))


def run_schedule(
    tries: list[Callable[[Incoming], Verdict]],
    *,
    blocks_left: int = 200,
    updates: dict[str, bytes] | None = None,
) -> tuple[dict[str, Verdict], list[int], dict[str, bytes]]:
    """Run one miner's verification through :class:`VerifyScheduler`: its ``i``-th try ends in
    ``tries[i](incoming)`` (the last repeats); ``updates``: what the intake holds this round. Returns what
    was recorded, the number of tries and the intake's updates after it."""
    miner = MINERS[0]
    count = [0]
    # by default another miner's update came in this round: the member's link works
    cache = SimpleNamespace(updates=dict({MINERS[1]: b"v"} if updates is None else updates))

    def verify(inc: Incoming, ctx: object) -> Verdict:
        count[0] += 1
        return tries[min(count[0], len(tries)) - 1](inc)

    def incoming(round: int, m: str, commitment: Any, n: int, out_of_time: Any, remaining: Any) -> Incoming:
        return Incoming(m, commitment, lambda: b"u", _failing_fetch(FetchTimeoutError("hang")),
                        out_of_time=out_of_time)  # fmt: skip

    coord = SimpleNamespace(
        update_commitments=lambda r: {miner: b"\1" * 32},
        current=lambda max_age=0: SimpleNamespace(block=100),
    )
    conn = SimpleNamespace(coord=coord, state=SimpleNamespace(verdict=lambda r, m: None),
                           cfg=SimpleNamespace(poll_interval=0.5), fetch_policy=FetchPolicy(timeout=10.0))  # fmt: skip
    intake = SimpleNamespace(incoming=incoming, cache=cache)
    sched = VerifyScheduler(conn, intake, SimpleNamespace(verify=verify), workers=1)  # type: ignore[arg-type]
    sched.blocks.observe(100)
    st = SimpleNamespace(round=2, seed=b"\2" * 32, deadline=100 + schedule.RETRY_MARGIN_BLOCKS + blocks_left)
    ctx = SimpleNamespace(registry=[miner], audits={miner: MINE}, audit_role=lambda m: AuditRole.AUDIT)
    got: dict[str, Verdict] = {}
    end = time.monotonic() + 20
    while not sched.run(st, ctx, got.__setitem__, slice_s=1.0):  # type: ignore[arg-type]
        assert time.monotonic() < end
    return got, count, cache.updates


def states_hang(inc: Incoming) -> Verdict:
    """The states time out (the pipeline's verdict of a hanging miner), fetched through ``inc``."""
    try:
        inc.fetch_state("0x" + hashlib.sha256(b"state").hexdigest())
    except Exception as exc:
        return Verdict(inc.miner, 2, False, Stage.RECOMPUTE, f"parameters at step 3 not served: {exc}",
                       evidence={"audit": "audit", "unanswered": True, "unreachable": unreachable(exc)})  # fmt: skip
    raise AssertionError("the fetch was expected to fail")


def update_not_served(inc: Incoming) -> Verdict:
    """The retry's verdict once the transfer layer skips the miner as stalling: the update not served."""
    reason = "FetchTimeoutError: stalled a fetch less than 30s ago; skipped"
    return Verdict(inc.miner, 2, False, Stage.FETCH, reason, evidence={"unreachable": True})


def own_error(inc: Incoming) -> Verdict:
    """An error of the validator's own (its RPC)."""
    return Verdict(inc.miner, 2, False, Stage.ERROR, "CoordinatorError: RPC down")


def served(inc: Incoming) -> Verdict:
    return Verdict(inc.miner, 2, True, Stage.OK, "accepted", score=5, evidence={"audit": "audit"})


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(roundschedule, "RETRY_DELAY_S", 0.05)


@pytest.mark.usefixtures("quick_retries")
def test_a_hang_retried_into_update_not_served_is_still_reported() -> None:
    """The measured defect: the first try fails in recompute (states not served), the retry fails at fetch
    (the miner now skipped as stalling). The verdict recorded is reported."""
    got, count, _ = run_schedule([states_hang, update_not_served])
    v = got[MINERS[0]]
    assert count[0] == MAX_TRIES
    assert unanswered(v) and v.stage == Stage.RECOMPUTE, (v.stage, v.reason, v.evidence)
    assert v.evidence["tries"] == MAX_TRIES and "stalled" in v.evidence["last_try"]
    board = Board()
    assert report_unanswered(board, v) and board.reports == [(MINERS[0], 2)]


@pytest.mark.usefixtures("quick_retries")
def test_a_later_try_of_the_members_own_fault_keeps_the_unanswered_one() -> None:
    got, count, _ = run_schedule([states_hang, own_error])
    assert count[0] == MAX_TRIES and unanswered(got[MINERS[0]])


@pytest.mark.usefixtures("quick_retries")
def test_a_miner_that_answers_a_retry_is_not_reported() -> None:
    """A miner restarting when first asked, serving on the retry: its answered verdict stands."""
    got, count, _ = run_schedule([states_hang, served])
    v = got[MINERS[0]]
    assert count[0] == 2 and v.accepted and not unanswered(v)


@pytest.mark.usefixtures("quick_retries")
def test_the_update_that_matched_its_commitment_is_kept_for_the_retry() -> None:
    _, _, kept = run_schedule([states_hang, served], updates={MINERS[0]: b"u"})
    assert kept == {MINERS[0]: b"u"}  # the retry asks for the states, not the update, again
    _, _, dropped = run_schedule([update_not_served, served], updates={MINERS[0]: b"u", MINERS[1]: b"v"})
    assert dropped == {MINERS[1]: b"v"}  # an update not served (or not the committed bytes) is fetched afresh


def test_a_fetch_the_members_deadline_cut_short_is_not_reported() -> None:
    """The member's own deadline: ~6 s to the commit point, less than the 10-s serving window of one
    fetch. Recorded, refused, but not reported."""
    got, count, _ = run_schedule([states_hang], blocks_left=3, updates={MINERS[0]: b"u"})
    v = got[MINERS[0]]
    assert count[0] == 1 and not v.accepted
    assert v.evidence.get("own_fault") == OwnFault.DEADLINE and not unanswered(v), v.evidence


@pytest.mark.usefixtures("quick_retries")
def test_a_member_whose_link_reached_nobody_does_not_report() -> None:
    """No update came in this round from anyone (the member's own link is down): not reported."""
    got, _, _ = run_schedule([states_hang], blocks_left=200, updates={})
    v = got[MINERS[0]]
    assert v.evidence.get("own_fault") == OwnFault.LINK and not unanswered(v), v.evidence
