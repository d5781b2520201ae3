"""A miner's pay: each settled round's reward and consensus score into its round records, and this key's
account read from the chain (``protocol.node.account``), which also catches a commitment of this key that
this node did not make (:class:`protocol.node.account.KeyInUseError`)."""

from __future__ import annotations

import logging

from miner.parts import MinerParts
from miner.state import COMMITTED, SERVED
from protocol.node.account import ChainAccount

log = logging.getLogger(__name__)


class RewardsMixin(MinerParts):
    """Record rewards and watch the account."""

    def _collect_rewards(self, current_round: int) -> None:
        """Record each settled round's reward, then read this key's account from the chain when the round,
        its record or the settled count changed (``/status`` ``account``, ``account_tokens`` gauges), and
        refuse a commitment of this key that this node did not make (:class:`KeyInUseError`)."""
        for r, rec in self.state.rounds().items():
            if r >= current_round or rec.reward is not None or rec.status not in (SERVED, COMMITTED):
                continue
            s = self.coord.settlement(r)
            if s is None:
                continue
            reward = s.miner_rewards.get(self.address, 0)
            with self.state.edit(r) as stored:
                stored.reward, stored.consensus_score = str(reward), s.consensus.get(self.address, 0)
            self.rounds_done += 1
            self.metrics.round_report.miner(r, rec, s, self.address, self.traffic)  # the round's INFO line
        if "_account" not in self.__dict__:
            self.__dict__["_account"] = ChainAccount.of(self.coord, self.address, self.metrics)
        acc: ChainAccount | None = self.__dict__["_account"]
        now = self.state.record(current_round)
        if acc is None or not acc.try_refresh((current_round, now and now.status, self.rounds_done)):
            return

        def own(round: int) -> bool:
            rec = self.state.record(round)
            return (
                rec is not None
                and rec.update_digest is not None
                and (
                    rec.status in (COMMITTED, SERVED)
                    or self._chain_has_commit(round, bytes.fromhex(rec.update_digest))
                )
            )

        acc.check_commits(current_round, own)
