"""What every service of a validator node is given: its configuration and connections
(:class:`Connections`: the chain, discovery, durable state, the blob store it serves, metrics and the
runtime), and the round material the services hand each other (:class:`Theta`, :class:`RoundCache`).

The node (``validator.node``) composes its services over one :class:`Connections`; each service keeps
its own state (intake the round's fetched updates, checkpoints theta_r, slashing what it re-checked).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from protocol.node.connections import NodeConnections
from protocol.node.traffic import TrafficLedger
from protocol.p2p.discovery import Discovery
from protocol.p2p.transfer import FetchPolicy, get_capped
from protocol.rounds.coordinator import Coordinator, RoundState
from protocol.rounds.epochs import round_epoch
from protocol.runspec import RunSpec
from protocol.wire.canonical import check_json_depth
from protocol.wire.tensorblob import tensor_blob_digest
from validator.config import ValidatorConfig
from validator.context import RoundContext
from validator.errors import ValidatorError
from validator.state import ValidatorState


@dataclass
class Theta:
    """theta_r as this validator holds it: the parameters and the outer momentum, by digest."""

    round: int
    digest: str
    params: dict[str, Tensor]
    momentum: dict[str, Tensor]


@dataclass
class RoundCache:
    """The current round's fetched updates and TEE evidence, by miner (in memory only)."""

    round: int
    updates: dict[str, bytes] = field(default_factory=dict)
    evidence: dict[str, bytes] = field(default_factory=dict)
    first_miss: dict[str, float] = field(default_factory=dict)
    """When each pending miner's update or states first failed to arrive this round (monotonic)."""
    pending: set[str] = field(default_factory=set)
    """Miners that could not be reached yet and are within their grace period (retried next step)."""


@dataclass(frozen=True)
class Connections(NodeConnections[ValidatorConfig, ValidatorState]):
    """A validator's configuration and connections, shared read-only by its services: the fields every
    node has (``protocol.node.connections.NodeConnections``: settings, whose ``verify`` is the
    verification policy; run; round view; discovery; state; the blobs it serves, checkpoints and the
    updates it holds; metrics; runtime), and its fetch policy."""

    fetch_policy: FetchPolicy
    """Size cap, timeout and attempts of every fetch from a peer."""

    @classmethod
    def create(
        cls,
        cfg: ValidatorConfig,
        spec: RunSpec,
        coord: Coordinator,
        discovery: Discovery,
        traffic: TrafficLedger | None = None,
    ) -> Connections:
        """A validator's connections: its state opened in ``cfg.data_dir``, its blob store beside it."""
        parts = cls.parts(
            "validator",
            cfg,
            coord,
            discovery,
            ValidatorState,
            traffic=traffic,
            retried=(ValidatorError,),
            digest_fn=tensor_blob_digest,
        )
        policy = FetchPolicy(
            max_bytes=cfg.verify.max_update_bytes, timeout=cfg.fetch_timeout, attempts=cfg.fetch_attempts
        )
        return cls(cfg, spec, coord, discovery, *parts, policy)

    def peer_urls(self) -> list[str]:
        """The configured peer validators' URLs, this validator's own left out."""
        return [u for u in self.cfg.peer_urls if u != self.url]

    def round_context(self, st: RoundState, theta: Theta) -> RoundContext:
        """What is fixed for every miner verified in round ``st`` (the seed must be set)."""
        assert st.seed is not None
        epoch = round_epoch(self.coord, st.round, st.assign_seed, self.spec.epoch_rounds)
        return RoundContext(
            spec=self.spec,
            dataset=self.dataset,
            round=st.round,
            chain_id=self.coord.chain_id,
            contract=self.coord.contract,
            validator=self.address,
            checkpoint=theta.params,
            checkpoint_digest=bytes.fromhex(theta.digest[2:]),
            assign_seed=st.assign_seed,
            seed=st.seed,
            registry=self.coord.miners(st.round),
            validators=self.coord.validators(),
            epoch_seed=epoch.seed,
            epoch_registry=epoch.registry,
        )

    def peer_json(self, url: str, path: str, max_bytes: int) -> Any:
        """A peer validator's JSON answer at ``path``, bounded in bytes, wall time and nesting; raises
        ``ProtocolError`` (transfer, depth), ``httpx.HTTPError`` or ``ValueError`` (not JSON)."""
        body = get_capped(f"{url.rstrip('/')}{path}", max_bytes=max_bytes, timeout=self.cfg.fetch_timeout)
        check_json_depth(body)
        return json.loads(body)
