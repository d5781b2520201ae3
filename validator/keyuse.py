"""A second validator on this node's key: the chain holds a seed share of this key that this
node's data dir has no record of making (:class:`KeyUse`).

The miners' counterpart watches their update commitments (``protocol.node.account.ChainAccount``); a
validator's first action in every round is its seed share, so that is what it watches. The second
instance stops with one :class:`~protocol.node.account.KeyInUseError` (fatal to ``NodeRuntime.run``) at its
first step that sees the original's share, before it fetches or verifies anything; the original logs the
conflict once a round and shows it in ``/status`` (``key_in_use``) and keeps running.

Not caught: two instances started within the same commit phase before either share is mined (each holds
a secret, one commitment lands, the other's transaction reverts ``AlreadyDone``); the loser's reveal then
fails each round with a contract error, and the next round's first share tells them apart again.
"""

from __future__ import annotations

import logging

from protocol.node.account import KeyInUseError
from protocol.rounds.coordinator import Coordinator
from validator.state import ValidatorState

log = logging.getLogger(__name__)


class KeyUse:
    """Watches this key's seed shares for ones this node did not commit."""

    def __init__(self, coord: Coordinator, state: ValidatorState, address: str) -> None:
        self.coord, self.state, self.address = coord, state, address
        self.first_round: int | None = None
        """The round of the first check (this process's start)."""
        self.committed_here = False
        """Whether this process has seen a share of its own on the chain (it is the original of two)."""
        self.own_round: int | None = None
        """The last round whose share on the chain is this node's: a round holds one share, so that round
        needs no further reads (the check runs every step; it cost a chain read and a copy of every record)."""
        self.conflict = ""
        """The last conflict's message (``/status`` ``key_in_use``; empty when there is none)."""

    def check(self, round: int) -> None:
        """At each step: whether ``round``'s seed share of this key, if the chain holds one, is this node's
        (its data dir kept the secret, written before the share is sent). One it did not make is another
        node on the key: :class:`KeyInUseError` at the first check or while this process has committed no
        share of its own since it started (it is the newcomer); else the conflict is logged once a round
        and kept for ``/status``."""
        first = self.first_round is None
        if self.first_round is None:
            self.first_round = round
        if round == self.own_round or f"round {round}:" in self.conflict:
            return
        committed, _ = self.coord.seed_share_status(round)
        if not committed:
            return
        rec = self.state.rounds().get(round)
        if rec is not None and rec.seed_secret is not None:
            self.committed_here, self.own_round = True, round
            return
        if first or not self.committed_here:
            self.conflict = (
                f"round {round}: key {self.address} committed a seed share this validator did not make (its "
                "data dir has no record of it): another validator runs with this key; stop this one (each "
                f"node needs its own key), or if this node's data dir was replaced, start it again after "
                f"round {round}"
            )
            raise KeyInUseError(self.conflict)
        self.conflict = (
            f"round {round}: key {self.address} committed a seed share this validator did not make: another "
            "validator runs with this key (stop one; each needs its own key), or its data dir was replaced"
        )
        log.error("key in use: %s; this node keeps running, the other one should stop", self.conflict)
