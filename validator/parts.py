"""What every part of the validator node shares: its configuration, its connections, its durable
state, and the round in memory (theta_r and the updates fetched so far).

The node (:class:`validator.node.ValidatorNode`) is the phase machine; intake, slashing, checkpoints and the
HTTP API are mixins over :class:`ValidatorParts` in their own modules, so each concern reads on its own page
while an adversarial subclass of the node (``tessera.attack.validators``) can still override any step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from protocol.node.api import NodeMetrics
from protocol.p2p.discovery import Discovery
from protocol.p2p.transfer import BlobStore, FetchPolicy, get_capped
from protocol.rounds.coordinator import (
    Coordinator,
    RoundState,
)
from protocol.runspec import RunSpec
from protocol.wire.canonical import check_json_depth
from training.config import CodecConfig
from training.data import Dataset, prepare
from training.merge import MergePolicy
from validator.config import ValidatorConfig
from validator.residuals import ResidualCache
from validator.state import ValidatorState
from validator.verify import (
    CheckEvidence,
    RoundContext,
    VerifyPolicy,
)


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


class ValidatorParts:
    """The attributes :class:`validator.node.ValidatorNode` sets up, typed once for every mixin."""

    cfg: ValidatorConfig
    spec: RunSpec
    coord: Coordinator
    discovery: Discovery
    address: str
    check_evidence: CheckEvidence | None
    state: ValidatorState
    public: BlobStore
    metrics: NodeMetrics
    fetch_policy: FetchPolicy
    policy: VerifyPolicy
    merge_policy: MergePolicy
    phase: str
    last_error: str
    url: str
    _ds: Dataset | None
    _theta: Theta | None
    _cache: RoundCache
    _pending: set[str]
    _first_miss: dict[str, float]
    _rechecked_phases: set[tuple[int, int]]
    _residuals: ResidualCache

    @property
    def dataset(self) -> Dataset:
        """The run's prepared corpus."""
        if self._ds is None:
            self._ds = prepare(self.spec.load_corpus(), self.spec.model)
        return self._ds

    def _run_model(self, theta: Theta) -> tuple[dict[str, tuple[int, ...]], CodecConfig]:
        """The run's parameter shapes and codec, which an update's header must match before it decodes."""
        return {n: tuple(t.shape) for n, t in theta.params.items()}, self.spec.codec

    def _round_context(self, st: RoundState, theta: Theta) -> RoundContext:
        assert st.seed is not None
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
        )

    def _peer_json(self, url: str, path: str, max_bytes: int) -> Any:
        """A peer validator's JSON answer at ``path``, bounded in bytes, wall time and nesting; raises
        ``ProtocolError`` (transfer, depth), ``httpx.HTTPError`` or ``ValueError`` (not JSON)."""
        body = get_capped(f"{url.rstrip('/')}{path}", max_bytes=max_bytes, timeout=self.cfg.fetch_timeout)
        check_json_depth(body)
        return json.loads(body)
