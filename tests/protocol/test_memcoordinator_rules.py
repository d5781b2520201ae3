"""The in-memory ledger mirrors issue 26's settlement: committee medians (the same draw as the contract),
a fraud proof that zeroes the round's pay whatever the median, vesting after K rounds and forfeiture of
unvested pay when a proof is confirmed."""

from __future__ import annotations

from collections.abc import Callable

from eth_account import Account

from protocol.rounds.audits import audit_draw
from protocol.rounds.coordinator import Settlement
from protocol.rounds.memcoordinator import MemoryCoordinator, MemoryLedger
from protocol.rounds.phases import Phase

KEYS = ["0x" + f"{i:064x}" for i in range(31, 36)]
SALT = b"\x09" * 32


def _net(**kw: int) -> tuple[MemoryLedger, list[MemoryCoordinator], list[MemoryCoordinator]]:
    ledger = MemoryLedger(b"\x01" * 32, phase_blocks=10, validator_share_bps=0, **kw)
    vals = [MemoryCoordinator(ledger, Account.from_key(k).address) for k in KEYS[:3]]
    miners = [MemoryCoordinator(ledger, Account.from_key(k).address) for k in KEYS[3:]]
    for v in vals:
        v.ensure_registered("validator", 1000)
    for m in miners:
        m.ensure_registered("miner", 100)
    ledger.phase_start = ledger.block
    return ledger, vals, sorted(miners, key=lambda c: int(c.address, 16))


def _to(ledger: MemoryLedger, coord: MemoryCoordinator, phase: Phase) -> None:
    while ledger.phase != phase:
        ledger.mine(ledger.phase_blocks)
        assert coord.advance()


def _play(
    ledger: MemoryLedger,
    vals: list[MemoryCoordinator],
    miners: list[MemoryCoordinator],
    rows: Callable[[int], list[list[int]]],
    prove: Callable[[int], object] | None = None,
) -> Settlement | None:
    r = ledger.round
    for i, m in enumerate(miners):
        m.commit_update(r, bytes([r, i]) * 16)
    _to(ledger, vals[0], Phase.SCORE_COMMIT)
    if prove is not None:
        prove(r)
    for v, row in zip(vals, rows(r), strict=True):
        v.commit_scores(r, row, SALT)
    _to(ledger, vals[0], Phase.SCORE_REVEAL)
    for v, row in zip(vals, rows(r), strict=True):
        v.reveal_scores(r, row, SALT)
    _to(ledger, vals[0], Phase.FINALIZE)
    vals[0].finalize(r)
    return vals[0].settlement(r)


def test_committee_median_matches_the_draw() -> None:
    ledger, vals, miners = _net(committee_size=1)

    def rows(r: int) -> list[list[int]]:
        d = audit_draw(ledger.seeds[r], miners[0].address, 3, 10_000, 1)
        return [[0 if d.counts(i) else 9_000, 5_000] for i in range(3)]

    s = _play(ledger, vals, miners, rows)
    assert s is not None and s.consensus[miners[0].address] == 0 and s.miner_rewards[miners[0].address] == 0


def test_one_proof_zeroes_the_pay_and_a_confirmed_one_forfeits_the_unvested() -> None:
    ledger, vals, miners = _net(vesting_rounds=2)
    cheat, honest = miners[0].address, miners[1].address

    def same(r: int) -> list[list[int]]:
        return [[5_000, 5_000]] * 3

    s1 = _play(ledger, vals, miners, same)
    assert s1 is not None and s1.miner_rewards[cheat] > 0
    assert miners[0].owed() == 0 and miners[0].unvested() == s1.miner_rewards[cheat]  # vesting
    # round 2: one validator proves the cheat in time: paid 0 though every score is 5000
    s2 = _play(ledger, vals, miners, same, prove=lambda r: vals[0].slash(cheat, b"\x42" * 32, r))
    assert s2 is not None and s2.consensus[cheat] == 5_000 and s2.miner_rewards[cheat] == 0
    assert ledger.slashed.get(cheat) is None
    vals[1].slash(cheat, b"\x42" * 32, 2)  # 2 of 3: confirmed
    assert ledger.slashed[cheat] == 1
    assert ledger.forfeited[cheat] == s1.miner_rewards[cheat] + ledger.emission // 2  # held + unvested
    assert miners[0].unvested() == 0
    # the honest miner's round-1 pay vests once round 1 + K = 3 is finalized
    _play(ledger, vals, miners[1:], lambda r: [[5_000]] * 3)
    assert miners[1].owed() == s1.miner_rewards[honest]
