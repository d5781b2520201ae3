"""One INFO line per round per node and the same figures in ``/status``: a miner node on anvil whose
committed round is settled by a validator logs committed, served, consensus and reward, and its ``/status``
carries them; a validator node's line counts verified miners, reveals and its reward. The node emits the
line (``report_settled``) after its service recorded the settlement, once a round."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
from web3 import Web3

from miner.config import MinerConfig
from miner.node import MinerNode
from miner.state import COMMITTED, MinerRoundRecord
from protocol.chain.coordinator import ChainCoordinator
from protocol.node.api import NodeServer, create_node_app
from protocol.node.roundreport import MinerRoundFigures, RoundReport, ValidatorRoundFigures
from protocol.node.traffic import Kind
from protocol.p2p.blobs import BlobStore
from protocol.p2p.discovery import Discovery
from protocol.rounds.anvil import Anvil
from protocol.runspec import RunSpec
from tests.chain.chain_support import Net, make_net
from validator.config import ValidatorConfig
from validator.context import Verdict
from validator.node import ValidatorNode
from validator.stages import UNVERIFIED_STAGES, Stage

pytestmark = pytest.mark.chain


@pytest.fixture(scope="module")
def net1(w3: Web3, anvil: Anvil) -> Net:
    return make_net(w3, anvil, n_miners=1, n_validators=1)


def _settle(net: Net, r: int, digest: bytes) -> None:
    """Round ``r``: the miner commits ``digest``, the only validator scores it, the round is finalized."""
    (m,), (v,) = net.miners, net.validators
    m.commit_update(r, digest)
    v.commit_seed(r, b"\x09" * 32)
    net.mine_past_deadline()
    v.advance()
    v.reveal_seed(r, b"\x09" * 32)
    net.mine_past_deadline()
    v.advance()
    v.commit_scores(r, [5000], b"\x07" * 32)
    net.mine_past_deadline()
    v.advance()
    v.reveal_scores(r, [5000], b"\x07" * 32)
    net.mine_past_deadline()
    v.finalize_round(r)


def test_a_miner_logs_one_line_per_settled_round_and_shows_it(
    net1: Net, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    chain = net1.miners[0]
    key = "0x" + bytes(chain.account.key).hex()  # type: ignore[union-attr]
    coord = ChainCoordinator(chain, key)
    node = MinerNode(MinerConfig(data_dir=tmp_path / "m"), RunSpec(), coord, Discovery(coord.chain_id, key))
    net1.fresh_round()
    r = net1.fresh_round()
    digest = b"\x61" * 32
    node.state.prepare(r, MinerRoundRecord(round=r, update_digest=digest.hex()), {})
    with node.state.edit(r) as rec:
        rec.status = COMMITTED
    node.traffic.add(Kind.UPDATE, round=r, sent=1000, sent_overhead=200)
    node.traffic.add(Kind.RPC, round=r, sent=5000)  # its chain reads are not what it served
    _settle(net1, r, digest)
    reward = coord.settlement(r).miner_rewards[chain.address]  # type: ignore[union-attr]
    with caplog.at_level(logging.INFO, logger="miner"):
        node.settle(r + 1)
        node.settle(r + 1)  # once a round
    lines = [x.getMessage() for x in caplog.records if x.name == "miner"]
    assert lines == [
        f"round {r}: committed, served 1200 bytes, consensus 5000, reward {reward / 10**18:.6f} tokens"
    ]
    app = create_node_app(
        role="miner", status=node.status, store=BlobStore(tmp_path / "s"), metrics=node.metrics
    )
    server = NodeServer(app).start()
    try:
        got = httpx.get(f"{server.url}/status", timeout=10).json()["round_report"]
    finally:
        server.stop()
    assert got == {
        "round": r,
        "committed": True,
        "status": "committed",
        "served_bytes": 1200,
        "consensus": 5000,
        "reward_wei": str(reward),
        "line": lines[0],
    }


def test_a_validator_line_counts_verified_miners_reveals_and_reward(
    net1: Net, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    v = net1.validators[0]
    key = "0x" + bytes(v.account.key).hex()  # type: ignore[union-attr]
    coord = ChainCoordinator(v, key)
    node = ValidatorNode(
        ValidatorConfig(data_dir=tmp_path / "v"), RunSpec(), coord, Discovery(coord.chain_id, key), key
    )
    net1.fresh_round()
    r = net1.fresh_round()
    _settle(net1, r, b"\x62" * 32)
    s = coord.settlement(r)
    assert s is not None
    with node.state.edit(r) as rec:
        rec.miners, rec.score_revealed = ["0xA", "0xB", "0xC"], True
    node.state.put_verdict(r, "0xA", Verdict("0xA", r, True, Stage.OK, "ok", score=5000))
    node.state.put_verdict(r, "0xB", Verdict("0xB", r, False, Stage.FORMAT, "bad", provable=True))
    node.state.put_verdict(r, "0xC", Verdict("0xC", r, False, Stage.BUDGET, "out of time"))
    # the round its checkpoints service recorded the settlement of (``Checkpoints.settle_previous``)
    monkeypatch.setattr(node.checkpoints, "take_settled", lambda: [(r, s)])
    with caplog.at_level(logging.INFO, logger="validator"):
        node.report_settled()
        node.report_settled()  # once a round
    reward = s.validator_rewards[v.address]
    line = f"round {r}: verified 2 of 3 miners (1 accepted), scores revealed, reward {reward / 10**18:.6f} tokens"
    assert [x.getMessage() for x in caplog.records if x.name == "validator"] == [line]
    assert node.metrics.round_report.to_json() == {
        "round": r,
        "verified": 2,
        "miners": 3,
        "accepted": 1,
        "scores_revealed": True,
        "reward_wei": str(reward),
        "line": line,
    }


def test_the_figures_keep_their_order_and_a_round_is_reported_once() -> None:
    """The JSON writes the shared ``reward_wei`` after the role's own figures, then ``line``; a round
    already reported (or an older one) is not logged again."""
    miner = MinerRoundFigures(
        round=3,
        reward_wei="1500000000000000000",
        committed=False,
        status="prepared",
        served_bytes=0,
        consensus=0,
    )
    assert list(miner.to_json()) == [
        "round",
        "committed",
        "status",
        "served_bytes",
        "consensus",
        "reward_wei",
        "line",
    ]
    assert (
        miner.line()
        == "round 3: not committed (prepared), served 0 bytes, consensus 0, reward 1.500000 tokens"
    )
    validator = ValidatorRoundFigures(
        round=4, reward_wei="0", verified=0, miners=2, accepted=0, scores_revealed=False
    )
    assert list(validator.to_json())[-2:] == ["reward_wei", "line"]
    assert "scores NOT revealed" in validator.line()
    report = RoundReport("validator")
    assert report.to_json() is None
    assert report.emit(validator) == validator.line()
    assert report.emit(validator) is None and report.emit(miner) is None
    assert report.to_json() == validator.to_json()


def test_the_unverified_stages_match_a_stored_stage() -> None:
    """A verdict's stage is stored as a string: it is found among the members."""
    assert {Stage.BUDGET.value, Stage.ERROR.value} == UNVERIFIED_STAGES
    assert "budget" in UNVERIFIED_STAGES and "ok" not in UNVERIFIED_STAGES
