"""A miner's pay: each settled round's reward and consensus score into its round records, and this key's
account read from the chain (``protocol.node.account``), which also catches a commitment of this key that
this node did not make (:class:`protocol.node.account.KeyInUseError`)."""

from __future__ import annotations

import logging

from miner.connections import MinerConnections
from miner.state import COMMITTED, SERVED
from protocol.node.account import ChainAccount
from protocol.rounds.coordinator import Settlement

log = logging.getLogger(__name__)


class Rewards:
    """Record rewards and watch the account."""

    def __init__(self, conn: MinerConnections) -> None:
        self.conn = conn
        self.rounds_done = sum(1 for rec in conn.state.rounds().values() if rec.reward is not None)
        """Rounds settled with a reward recorded (``max_rounds`` counts them)."""
        self.account: ChainAccount | None = None
        """This key's account figures (None until first read, or on an in-memory coordinator)."""
        self._account_read = False
        self._settled: list[tuple[int, Settlement]] = []

    def take_settled(self) -> list[tuple[int, Settlement]]:
        """The rounds whose reward :meth:`collect` recorded since the last call, with their settlements (the
        node logs their lines: ``miner.node.MinerNode.report_settled``)."""
        taken, self._settled = self._settled, []
        return taken

    def collect(self, current_round: int) -> None:
        """Record each settled round's reward (kept for :meth:`take_settled`: the node logs the round's
        line), then read this key's account from the chain when the round,
        its record or the settled count changed (``/status`` ``account``, ``account_tokens`` gauges), and
        refuse a commitment of this key that this node did not make (:class:`KeyInUseError`)."""
        c = self.conn
        for r, rec in c.state.rounds().items():
            if r >= current_round or rec.reward is not None or rec.status not in (SERVED, COMMITTED):
                continue
            s = c.coord.settlement(r)
            if s is None:
                continue
            reward = s.miner_rewards.get(c.address, 0)
            with c.state.edit(r) as stored:
                stored.reward, stored.consensus_score = str(reward), s.consensus.get(c.address, 0)
            self.rounds_done += 1
            self._settled.append((r, s))
        if not self._account_read:
            self.account = ChainAccount.of(c.coord, c.address, c.metrics)
            self._account_read = True
        acc = self.account
        now = c.state.record(current_round)
        if acc is None or not acc.try_refresh((current_round, now and now.status, self.rounds_done)):
            return

        def own(round: int) -> bool:
            rec = c.state.record(round)
            return (
                rec is not None
                and rec.update_digest is not None
                and (
                    rec.status in (COMMITTED, SERVED)
                    or c.chain_has_commit(round, bytes.fromhex(rec.update_digest))
                )
            )

        acc.check_commits(current_round, own)
