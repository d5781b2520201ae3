"""The nonces this process sent, and the gap a chain that went back leaves behind them.

A chain restarted from an older state (anvil from a dump two blocks old) or reorged forgets this process's
last transactions while the count the transport keeps has moved past them: the next transaction then waits
in the node's queue for a nonce nobody sends (a validator sat 120 s on a receipt and missed a round's
certificate). :class:`SentTransactions` tells such a lost nonce from one still pending, or one another
sender of the key used: only nonces this process sent and the node no longer knows are refilled, with
:func:`empty_transaction`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SENT_KEPT = 32
"""This process's most recent transactions kept by nonce."""
GAP_CHECK_S = 4.0
"""Seconds a known transaction may wait unmined before the node is asked whether a nonce below it is gone
(and between such questions)."""


class SentTransactions:
    """The hashes of this process's last :data:`SENT_KEPT` transactions, by nonce."""

    def __init__(self) -> None:
        self._by_nonce: dict[int, bytes] = {}

    def remember(self, nonce: int, tx_hash: bytes) -> None:
        """Record a transaction sent with ``nonce``."""
        self._by_nonce[nonce] = tx_hash
        for old in sorted(self._by_nonce)[:-SENT_KEPT]:
            del self._by_nonce[old]

    def lost_below(self, nonce: int, latest: int, known: Callable[[bytes], bool]) -> list[int]:
        """The nonces from ``latest`` (the chain's count) up to ``nonce`` when every one was sent here and
        ``known`` (does the node still have this hash?) says none is left; otherwise none."""
        gap = list(range(latest, nonce))
        for n in gap:
            h = self._by_nonce.get(n)
            if h is None or known(h):
                return []
        return gap


def empty_transaction(address: str, nonce: int, chain_id: int, fees: dict[str, int]) -> dict[str, Any]:
    """A transaction that only takes ``nonce``: no value, to the sender itself, plain transfer gas."""
    return {
        "from": address, "to": address, "value": 0, "gas": 21_000, "nonce": nonce, "chainId": chain_id, **fees
    }  # fmt: skip
