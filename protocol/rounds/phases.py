"""The round's phases: one enum for the contract client, the coordinator view and the nodes."""

from __future__ import annotations

from enum import IntEnum


class Phase(IntEnum):
    """Phases of a round, in order (``TesseraNetwork.Phase``; the values are the contract's)."""

    COMMIT = 0
    REVEAL = 1
    SCORE_COMMIT = 2
    SCORE_REVEAL = 3
    FINALIZE = 4
