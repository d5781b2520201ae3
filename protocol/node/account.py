"""A node's own account as the chain holds it: stake, rewards owed and claimed, balance.

:func:`read_account` is the one read of an account (``tessera account status`` and the nodes);
:class:`ChainAccount` keeps a node's figures for its ``/status`` (exact wei) and its ``account_tokens``
gauges (tokens), read when the node asks, never per request; :class:`KeyInUseError` is a commitment of the
node's key that the node did not make.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from protocol.errors import ProtocolError
from protocol.node.api import NodeMetrics

log = logging.getLogger(__name__)


class KeyInUseError(ProtocolError):
    """The chain shows an action of this node's key that this node did not take: another instance runs
    with the same key. Fatal to the node that raises it (``protocol.node.start.NodeRuntime.run``)."""


WEI_PER_TOKEN = 10**18

RETRY_AFTER_S = 30.0
"""Seconds before a failed read of the same key is tried again (:meth:`ChainAccount.try_refresh`)."""


def read_account(chain: Any, address: str) -> dict[str, Any]:
    """What the chain holds for ``address`` (a :class:`protocol.chain.Chain`), every figure of one block (one
    batch request at the latest block): role, stake, owed rewards, token balance, unbonding, last committed
    round. ``tessera account status`` and the nodes' account figures."""
    block = chain.block_number()
    info, unbonding, balance, unvested = chain.account_at(address, block)  # one batch, all at ``block``
    return {
        "address": address,
        "role": info.role.name.lower(),
        "stake_wei": info.stake,
        "owed_wei": info.owed,
        # earned but still vesting: claimable K rounds later, forfeited if a proof is confirmed
        "unvested_wei": unvested,
        "vesting": vesting_rule(chain.params().vesting_rounds),
        "balance_wei": balance,
        "unbonding_wei": unbonding.amount,
        "unbonding_end_block": unbonding.end,
        "withdrawable": bool(unbonding.amount) and block >= unbonding.end,
        "last_commit_round": info.last_commit_round,
        "block": block,
    }


def vesting_rule(vesting_rounds: int) -> str:
    """When a round's miner pay vests, in words an operator reads beside ``unvested``."""
    if vesting_rounds == 0:
        return "a round's pay is owed when the round is finalized (no vesting)"
    return (
        f"a round's pay vests when the round {vesting_rounds} after it is finalized (round r's at round "
        f"r + {vesting_rounds}); until then it is unvested and forfeited if a proof against the miner is confirmed"
    )


LOG_CHUNK = 5_000
"""Blocks per ``eth_getLogs`` when summing ``Claimed`` events (public RPC providers cap the range)."""


def claimed_between(chain: Any, address: str, from_block: int, to_block: int) -> int:
    """Wei ``address`` claimed in blocks ``from_block..to_block`` (its ``Claimed`` events: ``claim`` and a
    miner's ``commitAndClaim``; the contract keeps no running total), read :data:`LOG_CHUNK` blocks at a
    time."""
    total = 0
    for start in range(from_block, to_block + 1, LOG_CHUNK):
        end = min(start + LOG_CHUNK - 1, to_block)
        total += sum(int(e.amount) for e in chain.events("Claimed", start, end, account=address))
    return total


@dataclass
class ChainAccount:
    """A node's own account as the chain holds it, read when the node asks (:meth:`refresh`, at most once
    per key: a round), never per request: exact wei as decimal strings in ``/status`` (:meth:`to_json`), and
    the ``account_tokens{figure=stake|owed|claimed}`` gauges in tokens (a float holds wei exactly only up to
    2**53 wei, 0.009 tokens; tokens keep 15 significant digits), with the block they were read at."""

    chain: Any
    address: str
    metrics: NodeMetrics
    figures: dict[str, Any] = field(default_factory=dict)
    key: object = None
    claimed: int = 0
    scanned: int = -1
    """The last block whose ``Claimed`` events are summed in ``claimed`` (-1: none yet)."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    first_round: int | None = None
    conflict: str = ""
    """The last :class:`KeyInUseError` message (kept for ``/status``)."""
    committed_here: bool = False
    """Whether this process has made a commitment the chain holds (the original of two nodes on a key)."""
    failed: tuple[object, float] | None = None
    busy: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def of(cls, coord: Any, address: str, metrics: NodeMetrics) -> ChainAccount | None:
        """The tracker of a node whose coordinator is on a chain (None for an in-memory one)."""
        chain = getattr(coord, "chain", None)
        return None if chain is None else cls(chain, address, metrics)

    def refresh(self, key: object = None) -> bool:
        """Read the account from the chain unless the last read was for ``key`` (None: read anyway)."""
        with self.lock:
            if key is not None and key == self.key:
                return False
            read = read_account(self.chain, self.address)
            start = self.chain.deployment.block if self.scanned < 0 else self.scanned + 1
            if read["block"] >= start:
                self.claimed += claimed_between(self.chain, self.address, start, read["block"])
                self.scanned = read["block"]
            self.key = key
            self.figures = {**read, "claimed_wei": self.claimed}
            for name in ("stake", "owed", "claimed"):
                self.metrics.account.labels(figure=name).set(self.figures[f"{name}_wei"] / WEI_PER_TOKEN)
            self.metrics.account_block.set(read["block"])
            return True

    def check_commits(self, current_round: int, own: Callable[[int], bool]) -> None:
        """Watch the last round the chain says this account committed to (``own(round)``: whether this
        node made that commitment). A commitment this node did not make is another node holding its key:

        - at the first check (start), one of this or the previous round: :class:`KeyInUseError`, so a
          second instance stops before it trains, registers work or competes for the commit;
        - later, in a round this process saw start: :class:`KeyInUseError` if this process has not
          committed since it started (it is the newcomer), else the conflict is logged once and kept for
          ``/status`` (``key_in_use``) and the node keeps running: it is the original."""
        first = self.first_round is None
        if self.first_round is None:
            self.first_round = current_round
        last = int(self.figures.get("last_commit_round", 0))
        if last < 1 or f"round {last}:" in self.conflict:
            return
        if own(last):
            self.committed_here = self.committed_here or last >= self.first_round
            return
        if first and last >= current_round - 1:
            self.conflict = (
                f"round {last}: key {self.address} committed an update this node did not make (its data dir "
                "has no record of it): another node runs with this key; stop this one (each node needs its "
                f"own key), or if this node's data dir was replaced, start it again after round {last + 1}"
            )
            raise KeyInUseError(self.conflict)
        if last < self.first_round:
            return
        self.conflict = (
            f"round {last}: key {self.address} committed an update this node did not make: another miner "
            "runs with this key (stop one; each needs its own key), or its data dir was replaced"
        )
        if self.committed_here:
            log.error("key in use: %s; this node keeps running, the other one should stop", self.conflict)
            return
        raise KeyInUseError(self.conflict)

    def try_refresh(self, key: object = None) -> bool:
        """:meth:`refresh`, logging a chain error instead of raising it (the figures are not worth a node's
        step); after a failure, the same ``key`` is tried again :data:`RETRY_AFTER_S` later, not at every
        call. True if it read."""
        if key is not None and self.failed is not None and self.failed[0] == key:
            if time.monotonic() < self.failed[1] + RETRY_AFTER_S:
                return False
        try:
            done = self.refresh(key)
            self.failed = None
            return done
        except ProtocolError as exc:
            self.failed = (key, time.monotonic())
            log.warning("account figures not read: %s: %s", type(exc).__name__, exc)
            return False

    def refresh_soon(self, key: object) -> None:
        """:meth:`try_refresh` in a thread of its own unless ``key`` was read or a read is under way: a
        request handler answers at once with the figures it has (their ``block`` says when they were read)."""
        if key == self.key or self.busy.locked():
            return

        def run() -> None:
            with self.busy:
                self.try_refresh(key)

        threading.Thread(target=run, daemon=True, name="account-read").start()

    def to_json(self) -> dict[str, Any] | None:
        """``{stake_wei, owed_wei, unvested_wei, claimed_wei, balance_wei, unbonding_wei, block}`` as decimal
        strings (wei exceed JSON's safe integers), ``role``, and ``vesting``: when a round's pay vests; None
        until read."""
        f = self.figures
        if not f:
            return None
        wei = ("stake_wei", "owed_wei", "unvested_wei", "claimed_wei", "balance_wei", "unbonding_wei")
        out = {"role": f["role"], **{k: str(f[k]) for k in wei if k in f}, "block": f["block"]}
        return out | ({"vesting": f["vesting"]} if "vesting" in f else {})
