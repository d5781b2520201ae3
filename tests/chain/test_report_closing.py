"""A contested unanswered-audit report is always closed (issue 26), on anvil: the witness that voted
against it is gone, and the reported miner's own node reads its held round's report (one batched read)
and expires it after the window, which releases the pay, a restart between the two included; a witness
restarted from its state file still expires the reports it contested. ``Chain.unanswered_report`` is one
round trip with the answers the three reads it replaced gave."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from web3 import Web3

from miner.config import MinerConfig
from miner.node import MinerNode
from miner.state import COMMITTED, MinerRoundRecord
from protocol.chain import Chain, UnansweredReport
from protocol.chain.coordinator import ChainCoordinator
from protocol.chain.events import MinerRewarded, ReportExpired
from protocol.node.traffic import TrafficLedger
from protocol.p2p.discovery import Discovery
from protocol.rounds.anvil import Anvil
from protocol.rounds.audits import REPORT_WINDOW_ROUNDS
from protocol.runspec import RunSpec
from tests.chain.chain_support import FAST, Net, make_net
from validator.state import ValidatorState
from validator.witness import ContestedReports

pytestmark = pytest.mark.chain

RULES = dataclasses.replace(FAST, audit_rate_bps=10_000, committee_size=1, vesting_rounds=2)


@pytest.fixture(scope="module")
def net(w3: Web3, anvil: Anvil) -> Net:
    return make_net(w3, anvil, n_miners=2, n_validators=3, params=RULES)


def _key(chain: Chain) -> str:
    assert chain.account is not None
    return "0x" + bytes(chain.account.key).hex()


def _counted(net: Net, chain: Chain) -> tuple[Chain, TrafficLedger]:
    ledger = TrafficLedger()
    assert chain.account is not None
    return Chain.connect(net.deployment, chain.account, traffic=ledger), ledger


def _requests(ledger: TrafficLedger) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in ledger.calls_json().values():
        for label, n in row.items():
            out[label] = out.get(label, 0) + n
    return out


def _roles(net: Net, r: int, miner: str) -> tuple[Chain, Chain]:
    """(committee member, witness) of ``miner``'s audit in ``r`` (c = 1 of 3 validators)."""
    reader = net.reader()
    committee = reader.audit_draw(r, miner).committee
    witnesses = net.validators[0].audit_witnesses(r, miner)
    bit = {v.address: 1 << reader.account_info(v.address).validator_index for v in net.validators}
    member = next(v for v in net.validators if bit[v.address] & committee)
    witness = next(v for v in net.validators if bit[v.address] & witnesses)
    return member, witness


def _digest(r: int) -> bytes:
    return bytes([r]) * 32


def _contested_round(net: Net) -> tuple[int, Chain, Chain, bytes]:
    """A round in which every miner commits, a lying committee member reports the first miner unanswered
    and its witness votes against (contested), and which is then settled: (round, miner, witness,
    evidence). The report holds the miner's pay."""
    r = net.fresh_round()
    for m in net.miners:
        m.commit_update(r, _digest(r))
    for _ in range(2):  # Commit -> Reveal -> ScoreCommit: the seed, and so the draw, is fixed
        net.mine_past_deadline()
        net.deployer.advance()
    miner = net.miners[0]
    liar, witness = _roles(net, r, miner.address)
    liar.report_unanswered(miner.address, r)
    evidence = witness.unanswered_report(miner.address, r).evidence
    witness.vote_slash(evidence, False)
    n = len(net.miners)
    for v in net.validators:
        v.commit_scores(r, [5_000] * n, b"\x05" * 32)
    net.mine_past_deadline()
    net.deployer.advance()
    for v in net.validators:
        v.reveal_scores(r, [5_000] * n, b"\x05" * 32)
    net.mine_past_deadline()
    pay = {e.miner: e.amount for e in net.deployer.finalize_round(r).events if isinstance(e, MinerRewarded)}
    assert pay[miner.address] == 0  # held by the open report
    return r, miner, witness, evidence


def _past_window(net: Net, r: int) -> int:
    """Finalize empty rounds until the report of ``r`` may expire; the current round."""
    while net.reader().round_state().round <= r + REPORT_WINDOW_ROUNDS:
        net.fresh_round()
    return net.reader().round_state().round


def _three_reads(chain: Chain, miner: str, r: int) -> UnansweredReport:
    """The report as ``Chain.unanswered_report`` read it before issue 26: three sequential reads."""
    f = chain.network.functions
    evidence = bytes(f.unansweredEvidence(miner, r).call())
    target, _voted, executed, rejected, *_rest = f.slashProposal(evidence).call()
    is_open = int(target, 16) != 0 and not executed and not rejected
    voted = is_open and chain.account is not None and bool(f.hasVoted(evidence, chain.address).call())
    return UnansweredReport(evidence, is_open, voted)


def test_a_report_is_read_in_one_round_trip_with_the_answers_of_three_reads(net: Net) -> None:
    assert int(net.reader().network.functions.REPORT_WINDOW_ROUNDS().call()) == REPORT_WINDOW_ROUNDS
    r = net.fresh_round()
    for m in net.miners:
        m.commit_update(r, _digest(r))
    for _ in range(2):
        net.mine_past_deadline()
        net.deployer.advance()
    miner = net.miners[0].address
    liar, witness = _roles(net, r, miner)
    readers = [net.reader(), liar, witness, net.miners[0]]
    states = []
    for step in ("none", "open", "voted"):
        if step == "open":
            liar.report_unanswered(miner, r)
        if step == "voted":
            witness.vote_slash(witness.unanswered_report(miner, r).evidence, False)
        for chain in readers:
            got = chain.unanswered_report(miner, r)
            assert got == _three_reads(chain, miner, r), (step, chain.address)
            states.append((step, got.open, got.voted))
    assert ("none", False, False) in states and ("open", True, True) in states  # the liar voted by filing
    assert ("voted", True, True) in states and ("voted", True, False) in states
    counted, ledger = _counted(net, witness)
    before = _requests(ledger)
    counted.unanswered_report(miner, r)
    after = _requests(ledger)
    assert {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)} == {"batch": 1}
    # closed past its window (anyone may): while any report against a miner is open the contract holds
    # all its unvested pay and releases none at another's close, and the module's later tests count that pay
    _past_window(net, r)
    witness.expire_report(witness.unanswered_report(miner, r).evidence)
    assert not net.reader().unanswered_report(miner, r).open


def test_the_miner_expires_its_own_contested_report_when_its_witness_is_gone(
    net: Net, tmp_path: Path
) -> None:
    """The witness voted against the report and then never expires it (gone): the miner's node finds the
    held round from its settlement, reads the report once, and after a restart expires it."""
    reader = net.reader()
    miner = net.miners[0]
    chain, ledger = _counted(net, miner)
    coord = ChainCoordinator(chain, _key(miner))
    node = MinerNode(
        MinerConfig(data_dir=tmp_path / "m"), RunSpec(), coord, Discovery(coord.chain_id, _key(miner))
    )
    r = reader.round_state().round + 1  # the round _contested_round opens
    node.state.prepare(r, MinerRoundRecord(round=r, update_digest=_digest(r).hex()), {})
    node.state.set_status(r, COMMITTED)
    assert _contested_round(net)[0] == r
    stake0 = reader.account_info(miner.address).stake
    evidence = miner.unanswered_report(miner.address, r).evidence
    node.rewards.collect(r + 1)
    before = _requests(ledger)
    node.reports.close(r + 1, node.rewards.rounds_done)
    node.reports.close(r + 1, node.rewards.rounds_done)  # once per round and settlement: no request again
    rec = node.state.record(r)
    assert rec is not None and rec.reward == "0" and rec.held_report == evidence.hex()
    spent = {k: n - before.get(k, 0) for k, n in _requests(ledger).items() if n != before.get(k, 0)}
    assert spent == {"batch": 1}  # the report, one round trip; nothing was sent before its window
    assert node.status()["unanswered_reports"] == {
        "open": {str(r): "0x" + evidence.hex()},
        "expired": 0,
        "closed": 0,
        "failed": 0,
    }
    current = _past_window(net, r)
    owed = reader.account_info(miner.address).owed
    # restarted: a fresh node on the same data dir and a fresh chain view
    again = MinerNode(
        MinerConfig(data_dir=tmp_path / "m"),
        RunSpec(),
        ChainCoordinator(Chain(net.w3, net.deployment, miner.account), _key(miner)),
        Discovery(coord.chain_id, _key(miner)),
    )
    again.rewards.collect(current)
    again.reports.close(current, again.rewards.rounds_done)
    expired = reader.events("ReportExpired", evidence=evidence)
    assert len(expired) == 1 and isinstance(expired[0], ReportExpired)
    assert expired[0].target == miner.address and expired[0].round == r and expired[0].released > 0
    assert reader.account_info(miner.address).owed == owed + expired[0].released  # the pay is released
    assert (
        reader.account_info(miner.address).stake == stake0
        and not reader.unanswered_report(miner.address, r).open
    )
    st = again.status()["unanswered_reports"]
    assert st == {"open": {}, "expired": 1, "closed": 0, "failed": 0}
    sample = again.metrics.registry.get_sample_value(
        "tessera_miner_unanswered_reports_total", {"outcome": "expired"}
    )
    assert sample == 1.0
    # the witness comes back with the report in its state: closed already, it forgets it
    contested = ContestedReports(ValidatorState(tmp_path / "v"))
    contested.add(evidence, r)
    anyone = net.validators[0]
    assert contested.expire_due(ChainCoordinator(anyone, _key(anyone)), current) == []
    assert contested.open() == {}


def test_a_restarted_witness_expires_the_reports_it_contested(net: Net, tmp_path: Path) -> None:
    """The witness's contested set lives in its state file: a fresh witness over the same data dir (the
    node restarted) still expires the report after its window, which releases the pay."""
    reader = net.reader()
    r, miner, witness, evidence = _contested_round(net)
    ContestedReports(ValidatorState(tmp_path / "v")).add(evidence, r)  # what the witness records as it votes
    restarted = ContestedReports(ValidatorState(tmp_path / "v"))
    coord = ChainCoordinator(witness, _key(witness))
    assert restarted.open() == {evidence: r}
    assert restarted.expire_due(coord, r + REPORT_WINDOW_ROUNDS) == []  # the window is not over: kept
    assert restarted.open() == {evidence: r}
    current = _past_window(net, r)
    owed = reader.account_info(miner.address).owed
    assert ContestedReports(ValidatorState(tmp_path / "v")).expire_due(coord, current) == [evidence]
    expired = reader.events("ReportExpired", evidence=evidence)
    assert len(expired) == 1 and isinstance(expired[0], ReportExpired) and expired[0].released > 0
    assert reader.account_info(miner.address).owed == owed + expired[0].released
    assert ValidatorState(tmp_path / "v").contested() == {}  # dropped once closed
