"""A node's ``/status`` document, typed: :class:`NodeStatus` declares the fields both roles show, once, each
with its docstring; a role's own fields are its part (:class:`MinerStatus`, :class:`ValidatorStatus`), held
by the document and written into the same JSON object (``status()`` of ``miner.node.MinerNode`` and
``validator.api.ValidatorApi`` build it). The operator guides' ``/status`` tables are tested against these
fields (``tests/test_status_guides.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from protocol.node.connections import NodeConnections


def _json(doc: Any, *, leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    """A dataclass's fields by name, shallow (their values are JSON already)."""
    return {f.name: getattr(doc, f.name) for f in fields(doc) if f.name not in leave_out}


@dataclass(frozen=True)
class MinerStatus:
    """The ``/status`` fields only a miner shows."""

    behaviour: str
    """How this miner trains and serves (``honest`` for every operator's node; ``miner.behaviour``)."""
    rounds_done: int
    """Rounds settled with a reward recorded (what ``max_rounds`` counts)."""
    last_round: dict[str, Any] | None
    """Its latest round record as ``state.json`` holds it (status, losses, digests, reward); None before
    the first."""
    unanswered_reports: dict[str, Any]
    """The rounds whose pay an open unanswered-audit report holds (``open``: round -> evidence) and the
    count of each outcome (``expired``, ``closed``, ``failed``)."""


@dataclass(frozen=True)
class ValidatorStatus:
    """The ``/status`` fields only a validator shows."""

    theta_round: int | None
    """The round whose checkpoint theta_r it holds (None until known)."""


RolePart = MinerStatus | ValidatorStatus
"""A role's own ``/status`` fields."""


@dataclass(frozen=True)
class NodeStatus:
    """The ``/status`` document: the fields both roles show, and the role's :attr:`part`."""

    role: str
    """``miner`` or ``validator``."""
    address: str
    """This node's address (its key's, on chain)."""
    url: str
    """This node's public URL (empty until it started serving)."""
    round: int
    """The round the node works on (a miner's round material, a validator's updates; 0 before the
    first)."""
    phase: str
    """What the node is doing (``serving``, ``verify``, ``waiting-checkpoint``, ...)."""
    last_error: str
    """The last step's error, until a step succeeds again (empty when none)."""
    account: dict[str, Any] | None
    """This key's account as the chain holds it: ``role``, ``stake_wei``, ``owed_wei``, ``claimed_wei``,
    ``balance_wei``, ``unbonding_wei`` (exact decimal strings) and the ``block`` they were read at;
    None before the first read or on an in-memory coordinator (``protocol.node.account``)."""
    key_in_use: str
    """The last sign that another node acts with this key (the newcomer stops with it, the original keeps
    running and shows it; empty when none)."""
    dht_refused_records: int
    """Signed node records this node's own lookups refused (malformed, badly signed, expired)."""
    dht_refused_at_node: int
    """Records its DHT daemon's validator refused, peers' stores and reads alike (0 without a DHT)."""
    dht_maddrs: list[str]
    """Its DHT's multiaddrs, what others pass as ``dht_peers`` (empty without a running DHT)."""
    round_report: dict[str, Any] | None
    """The last settled round's figures and INFO line (``protocol.node.roundreport``); None before the
    first."""
    part: RolePart
    """The role's own fields, written into the same JSON object (not under a key of their own)."""

    @classmethod
    def read(
        cls,
        conn: NodeConnections[Any, Any],
        *,
        round: int,
        account: dict[str, Any] | None,
        key_in_use: str,
        part: RolePart,
    ) -> NodeStatus:
        """The document of the node over ``conn`` (its runtime, discovery and round report), with what the
        role reads its own way."""
        runtime, discovery = conn.runtime, conn.discovery
        dht = discovery.dht
        return cls(
            role=runtime.role,
            address=conn.address,
            url=conn.url,
            round=round,
            phase=runtime.phase,
            last_error=runtime.last_error,
            account=account,
            key_in_use=key_in_use,
            dht_refused_records=discovery.refused,
            dht_refused_at_node=discovery.refused_by_dht(),
            dht_maddrs=dht.visible_maddrs() if dht is not None and dht.running else [],
            round_report=conn.metrics.round_report.to_json(),
            part=part,
        )

    def to_json(self) -> dict[str, Any]:
        """The ``/status`` JSON: the shared fields and the role's, in one object."""
        return {**_json(self, leave_out=("part",)), **_json(self.part)}


def field_names(part: type[RolePart]) -> set[str]:
    """The ``/status`` keys of a node whose role part is ``part`` (what its guide's table names)."""
    shared = {f.name for f in fields(NodeStatus) if f.name != "part"}
    return shared | {f.name for f in fields(part)}
