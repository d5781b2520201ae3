"""The vote a witness's own audit calls for (issue 26, the reverse attack): not served -> for the report,
served and checking out -> against it, a fake -> a fraud proof instead, a verdict that never reached
the states -> no vote (the report then expires). Issue 38: the update not served any way confirms it too,
a witness whose own link brought nothing does not vote on a miner it could not reach, and a report filed
through a member's own fault is voted down by a witness the miner serves."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from torch import Tensor

from protocol.p2p.blobs import FetchTimeoutError
from protocol.rounds.audits import AuditDraw
from protocol.rounds.coordinator import CoordinatorError
from protocol.wire.commitments import update_commitment
from tests.support.rounds import CHAIN_ID, CONTRACT, MINERS, VALIDATOR, Round, make_round
from validator.context import AuditRole, Incoming, Verdict
from validator.pipeline import VerificationPipeline
from validator.policy import VerifyPolicy
from validator.stages import Stage
from validator.witness import Witness, witness_vote


def _v(stage: Stage, accepted: bool = False, provable: bool = False, **evidence: object) -> Verdict:
    ev = {"audit": str(AuditRole.AUDIT), **evidence}
    return Verdict("0xm", 3, accepted, str(stage), "", provable=provable, evidence=ev)


def test_not_served_confirms_the_report() -> None:
    assert witness_vote(_v(Stage.RECOMPUTE, unanswered=True)) is True


def test_served_and_checking_out_rejects_it_whatever_the_score() -> None:
    assert witness_vote(_v(Stage.OK, accepted=True)) is False
    assert witness_vote(_v(Stage.USEFULNESS)) is False  # answered; a low usefulness is no withholding


def test_a_fake_is_proven_not_voted() -> None:
    assert witness_vote(_v(Stage.RECOMPUTE, provable=True)) is None


def test_no_vote_before_the_states() -> None:
    for stage in (Stage.FETCH, Stage.DIGEST, Stage.FORMAT, Stage.BOUNDS, Stage.BUDGET, Stage.ERROR):
        assert witness_vote(_v(stage)) is None
    assert witness_vote(_v(Stage.RECOMPUTE)) is None  # an unprovable replay failure: no opinion


# -- issue 38: not served any way, and whose fault ----------------------------------------------------


def test_the_update_not_served_to_the_witness_confirms_the_report() -> None:
    for stage in (Stage.FETCH, Stage.DIGEST):
        assert witness_vote(_v(stage, unanswered=True)) is True


def test_a_witness_whose_link_brought_nothing_does_not_vote_on_an_unreachable_miner() -> None:
    hang = _v(Stage.RECOMPUTE, unanswered=True, unreachable=True)
    assert witness_vote(hang, link_ok=True) is True
    assert witness_vote(hang, link_ok=False) is None
    # a miner that answered 404 or with the wrong bytes reached the witness: its link is not in question
    assert witness_vote(_v(Stage.RECOMPUTE, unanswered=True), link_ok=False) is True


OTHER = "0x" + "d4" * 20


@pytest.fixture(scope="module")
def rnd() -> Round:
    return make_round()


class Board:
    """The chain as a witness sees it: takes its votes."""

    def __init__(self) -> None:
        self.votes: list[tuple[bytes, bool]] = []

    def vote_unanswered(self, evidence: bytes, support: bool) -> None:
        self.votes.append((evidence, support))


def witness(rnd: Round, *, states: str, link_ok: bool = True) -> tuple[Board, list[Verdict]]:
    """This validator (index 0) witnesses a report that validators[1], the committee, filed on MINERS[0]:
    the miner serves its states to the witness (``states="served"``) or hangs (``"hang"``)."""
    miner = MINERS[0]
    built = rnd.build(miner)
    served = dict(built.published())
    parts = {d for i in range(len(built.transcript_steps)) for d in built.state_parts(i)}

    def fetch_state(digest: str) -> dict[str, Tensor]:
        if states == "hang" and digest in parts:
            raise FetchTimeoutError("no complete answer within 10.0s (stalling peer)")
        return {k: t.clone() for k, t in served[digest].items()}

    commitment = update_commitment(CHAIN_ID, CONTRACT, rnd.round, miner, built.digest)
    inc = Incoming(miner, commitment, lambda: built.update, fetch_state, fetch_source=rnd.fetch_source)
    cache = SimpleNamespace(updates={MINERS[1]: b"v"} if link_ok else {})
    intake = SimpleNamespace(incoming=lambda *a, **k: inc, cache=cache)
    conn = SimpleNamespace(state=SimpleNamespace(put_contested=lambda e, r: None))
    proofs: list[Verdict] = []
    w = Witness(conn, intake, VerificationPipeline(VerifyPolicy()), proofs.append)  # type: ignore[arg-type]
    ctx = replace(
        rnd.ctx(), validators=[VALIDATOR, OTHER], audits={miner: AuditDraw(True, 0b10)}, validator_index=0
    )
    board = Board()
    w._audit_and_vote(board, ctx, miner, commitment, b"\xee" * 32)  # type: ignore[arg-type]
    return board, proofs


def test_a_report_from_a_members_own_fault_is_voted_down_by_the_witness(rnd: Round) -> None:
    """The member's RPC, bandwidth or deadline failed it; the miner serves the witness, from another machine
    with the whole window, and the audit checks out: the witness votes against the report."""
    board, proofs = witness(rnd, states="served")
    assert board.votes == [(b"\xee" * 32, False)] and proofs == []


def test_a_miner_that_hangs_for_the_witness_too_is_confirmed(rnd: Round) -> None:
    board, _ = witness(rnd, states="hang")
    assert board.votes == [(b"\xee" * 32, True)]


def test_a_witness_that_reached_nobody_this_round_does_not_vote(rnd: Round) -> None:
    board, _ = witness(rnd, states="hang", link_ok=False)
    assert board.votes == []


class Chain:
    """The chain as a committee member sees it: this validator (index 0) is MINERS[0]'s committee; the
    report path's RPC fails ``fail`` times."""

    def __init__(self, fail: int = 0) -> None:
        self.fail = fail
        self.reports: list[tuple[str, int]] = []

    def update_commitments(self, round: int) -> dict[str, bytes]:
        return {MINERS[0]: b"\x01" * 32}

    def audit_draws(self, round: int, miners: list[str]) -> dict[str, AuditDraw]:
        return {m: AuditDraw(True, 0b01) for m in miners}

    def audit_witnesses(self, round: int, miners: list[str]) -> dict[str, int]:
        return {m: 0b10 for m in miners}

    def unanswered_report(self, miner: str, round: int) -> SimpleNamespace:
        return SimpleNamespace(evidence=b"\xee" * 32, open=bool(self.reports), voted=bool(self.reports))

    def report_unanswered(self, miner: str, round: int) -> None:
        if self.fail:
            self.fail -= 1
            raise CoordinatorError("RPC down")
        self.reports.append((miner, round))

    def vote_unanswered(self, evidence: bytes, support: bool) -> None:
        raise AssertionError("a committee member is no witness of its own report")

    def expire_report(self, evidence: bytes) -> None:
        raise AssertionError("nothing to expire")


def member(rnd: Round, chain: Chain, own: Verdict) -> Witness:
    ctx = replace(rnd.ctx(), validators=[VALIDATOR, OTHER])
    state = SimpleNamespace(verdict=lambda r, m: own if m == MINERS[0] else None, contested=dict)
    conn = SimpleNamespace(coord=chain, state=state, round_context=lambda st, theta: replace(ctx))
    return Witness(conn, SimpleNamespace(), VerificationPipeline(VerifyPolicy()), lambda v: None)  # type: ignore[arg-type]


def test_a_report_the_members_rpc_failed_to_send_is_sent_at_its_next_check(rnd: Round) -> None:
    own = _v(Stage.RECOMPUTE, unanswered=True)
    own.miner, own.round = MINERS[0], rnd.round
    chain = Chain(fail=1)
    w = member(rnd, chain, own)
    st = SimpleNamespace(round=rnd.round, seed=b"\x02" * 32)
    w.check(st, None)  # type: ignore[arg-type]
    assert chain.reports == []  # the RPC failed again: nothing counted, nothing lost
    w.check(st, None)  # type: ignore[arg-type]
    assert chain.reports == [(MINERS[0], rnd.round)]
    w.check(st, None)  # type: ignore[arg-type]
    assert chain.reports == [(MINERS[0], rnd.round)]  # sent once


def test_a_member_does_not_report_what_was_its_own_fault(rnd: Round) -> None:
    own = _v(Stage.RECOMPUTE, unanswered=True, unreachable=True, own_fault="deadline")
    own.miner, own.round = MINERS[0], rnd.round
    chain = Chain()
    w = member(rnd, chain, own)
    w.check(SimpleNamespace(round=rnd.round, seed=b"\x02" * 32), None)  # type: ignore[arg-type]
    assert chain.reports == []
