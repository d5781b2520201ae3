"""The ways around an audit started by name (``tessera devnet --adversary miner3=free-rider-last-delta-hang``,
which runs ``python -m tessera.attack.node``): the node binds its run file and coordinator, through which the
behaviour reads the chain's audit draw, as an attacker outside the suite would."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from miner.behaviour import BehaviourContext, make_behaviour
from protocol.rounds.audits import AuditDraw
from tessera.attack.dodgers import HangWhenAudited, LastDeltaHangWhenAudited
from tessera.attack.miners import RunLazyMiner, register_all
from tests.support.rounds import MINERS, make_round


class DrawBoard:
    """A coordinator's audit draws: ``miner`` audited in ``rounds``."""

    def __init__(self, rounds: set[int]) -> None:
        self.rounds = rounds
        self.asked: list[int] = []

    def audit_draws(self, round: int, miners: Sequence[str]) -> dict[str, AuditDraw]:
        self.asked.append(round)
        return {m: AuditDraw(round in self.rounds, 0b1 if round in self.rounds else 0) for m in miners}


@pytest.fixture(autouse=True)
def registered() -> None:
    register_all()


def ctx(round: int) -> BehaviourContext:
    return BehaviourContext(round, MINERS[0], ("m",), 6)


@pytest.mark.parametrize(
    "name",
    ["withhold-when-audited", "hang-when-audited", "drip-when-audited", "free-rider-last-delta-hang"],
)
def test_a_named_dodger_reads_the_draw_through_the_coordinator_it_is_bound_to(name: str) -> None:
    b = make_behaviour(name)
    assert b.serves_state(ctx(3)), "unbound, it cannot read the draw: it serves"
    board = DrawBoard({3})
    b.bind(make_round().spec, board)
    for dodger in (b, getattr(b, "hang", None)):  # the rider's hang reads the draw
        if isinstance(dodger, HangWhenAudited):
            dodger.sleep = lambda s: None
    assert b.serves_state(ctx(2)), "not audited: served"
    served = b.serves_state(ctx(3))
    assert served == (name == "drip-when-audited"), "audited: refused, or (drip) served late"
    assert 3 in board.asked


def test_the_named_rider_takes_the_nodes_run_file() -> None:
    b = make_behaviour("free-rider-last-delta-hang")
    assert isinstance(b, LastDeltaHangWhenAudited) and b.spec is None
    spec = make_round().spec
    b.bind(spec, DrawBoard(set()))
    assert b.spec is spec


def test_a_named_lazy_miner_fakes_its_share_of_the_runs_segments() -> None:
    b = make_behaviour("lazy-10")
    assert isinstance(b, RunLazyMiner)
    spec = make_round().spec
    b.bind(spec, DrawBoard(set()))
    assert b.segments == spec.inner.steps // spec.inner.transcript_interval
