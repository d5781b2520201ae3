"""A devnet round's payouts as the chain's events state them (the report once called a round
"refused" while the chain paid it). ``MinerRewarded`` is what ``finalize`` credited (0 where a fraud proof
froze the pay, whatever the median), ``PayFrozen`` what a proof holds, ``Forfeited`` what a confirmed
proof or unanswered audit took back."""

from __future__ import annotations

from typing import Any

from protocol.chain import Chain


def chain_payouts(chain: Chain, round: int, names: dict[str, str]) -> dict[str, Any]:
    """The report's payout fields of ``round`` from the chain's events (``names``: address -> node name;
    forfeits are listed by the round of the proof's evidence when it names one)."""
    mr = chain.events("MinerRewarded", round=round)
    vr = chain.events("ValidatorRewarded", round=round)
    frozen = chain.events("PayFrozen", round=round)
    return {
        "rewards_wei": {names.get(e.miner, e.miner): int(e.amount) for e in mr},
        "validator_rewards_wei": {e.validator: int(e.amount) for e in vr},
        "frozen_wei": {names.get(e.miner, e.miner): int(e.amount) for e in frozen},
        "paid_from": "chain events",
    }
