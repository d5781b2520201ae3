"""The miner node: join, then every round fetch, train, package, commit, serve, and collect rewards.

The node is a loop over :meth:`MinerNode.step`, which looks at the chain and takes the next action that
is due. Every action is idempotent and recorded in :class:`miner.state.MinerState` before or after the
transaction as described there, so killing the process at any point and starting it again resumes the
round (or joins the next one) without committing twice or losing error feedback.

Its actions are mixins over the attributes of ``miner.parts``:
``miner.commit`` (train, record, commit), ``miner.publish`` (serve the round's update, transcript and
error feedback) and ``miner.rewards`` (rewards and the account); start, run and stop are
``protocol.node.start``'s, shared with the validator.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from attestation import report_data
from attestation.simulated import SimulatedEnclave
from miner.behaviour import Behaviour, make_behaviour
from miner.checkpoints import CheckpointSource
from miner.commit import CommitMixin
from miner.config import MinerConfig
from miner.errors import MinerError
from miner.livepage import mount_live_page
from miner.parts import EvidenceFn, LiveRound
from miner.publish import PublishMixin
from miner.rewards import RewardsMixin
from miner.state import COMMITTED, PREPARED, SERVED, MinerState
from protocol.node.api import NodeMetrics, NodeServer
from protocol.node.start import ServingNode
from protocol.node.traffic import TrafficLedger
from protocol.p2p.discovery import Discovery
from protocol.p2p.transfer import BlobStore, FetchPolicy
from protocol.rounds.coordinator import Coordinator, Phase, RoundState
from protocol.runspec import RunSpec
from training.data import Dataset

log = logging.getLogger(__name__)

__all__ = ["EvidenceFn", "MinerNode", "simulated_evidence"]


def simulated_evidence(chain_id: int, seed: bytes) -> EvidenceFn:
    """Evidence from the development TDX enclave of ``attestation.simulated`` (devnet only; ``seed`` is
    the run's fresh development root, never a public constant)."""
    enclave = SimulatedEnclave.from_seed(seed)

    def make(round: int, miner: str, digest: bytes) -> bytes:
        return enclave.quote(report_data(chain_id, round, miner, digest))

    return make


class MinerNode(CommitMixin, PublishMixin, RewardsMixin, ServingNode):
    """A miner: one process, one key, one run; this class is its phase machine (``step``), the actions
    are the mixins' (``start``, ``run`` and ``stop``: ``protocol.node.start``)."""

    role = "miner"
    retried = (MinerError,)
    node_log = log
    cfg: MinerConfig

    def __init__(
        self,
        cfg: MinerConfig,
        spec: RunSpec,
        coord: Coordinator,
        discovery: Discovery,
        *,
        behaviour: Behaviour | None = None,
        evidence_fn: EvidenceFn | None = None,
        traffic: TrafficLedger | None = None,
    ) -> None:
        self.cfg = cfg
        self.traffic = traffic or TrafficLedger()
        self.spec = spec
        self.coord = coord
        self.discovery = discovery
        self.behaviour = behaviour or make_behaviour(cfg.behaviour)
        self.evidence_fn = evidence_fn
        self.address = coord.address
        self.state = MinerState(cfg.data_dir.expanduser())
        self.public = BlobStore(self.state.dir / "public")
        self.metrics = NodeMetrics.create("miner")
        self.fetch_policy = FetchPolicy(timeout=cfg.fetch_timeout, attempts=cfg.fetch_attempts)
        self.checkpoints = CheckpointSource(
            spec, coord, discovery, self.state, self.fetch_policy, self.metrics
        )
        self._ds: Dataset | None = None
        self._live = LiveRound()
        self._lock = threading.RLock()
        self.phase = "starting"
        self.last_error = ""
        self.rounds_done = sum(1 for rec in self.state.rounds().values() if rec.reward is not None)
        self.server: NodeServer | None = None
        self.url = ""
        self._announced: set[int] = set()
        self._synced = False

    # -- lifecycle -------------------------------------------------------------------------------------
    def _blob_fallback(self) -> Callable[[str], bytes | None]:
        return self.serve_transcript_state

    def _add_routes(self, app: Any) -> None:
        @app.get("/rounds", summary="This miner's round records")
        def rounds() -> dict[str, Any]:
            return {str(r): rec for r, rec in self._rounds_json().items()}

        mount_live_page(app, self.status, self._rounds_json)  # GET / (issue 16)

    def _rounds_json(self) -> dict[int, dict[str, Any]]:
        """The round records as ``state.json`` holds them, by round (``/rounds``, the live page)."""
        return {r: rec.to_json() for r, rec in self.state.rounds().items()}

    def status(self) -> dict[str, Any]:
        """The /status document."""
        recs = self.state.rounds()
        last = max(recs) if recs else None
        acc = self.__dict__.get("_account")
        dht = self.discovery.dht
        return {
            "role": "miner",
            "address": self.address,
            "behaviour": self.behaviour.name,
            "url": self.url,
            "round": self._live.round,
            "phase": self.phase,
            "rounds_done": self.rounds_done,
            "last_error": self.last_error,
            "last_round": recs[last].to_json() if last is not None else None,
            "account": acc.to_json() if acc is not None else None,
            "key_in_use": acc.conflict if acc is not None else "",
            "dht_refused_records": self.discovery.refused,
            "dht_maddrs": dht.visible_maddrs() if dht is not None and dht.running else [],
        }

    # -- the loop --------------------------------------------------------------------------------------
    def _done(self) -> bool:
        return bool(self.cfg.max_rounds) and self.rounds_done >= self.cfg.max_rounds

    def step(self) -> None:
        """Take whatever action the chain's current state calls for."""
        st = self.coord.current()
        self._act(st)
        self._synced = True
        self._maybe_advance(st)

    def _act(self, st: RoundState) -> None:
        self.metrics.round.set(st.round)
        self.traffic.round = st.round
        self._collect_rewards(st.round)
        rec = self.state.record(st.round)
        if st.phase == Phase.COMMIT and st.block <= st.deadline:
            if rec is None:
                if st.checkpoint is None:
                    self.phase = "waiting-checkpoint"
                    return
                self._work(st)
            elif rec.status == PREPARED:
                self._reconcile(st, rec)
            elif rec.status in (COMMITTED, SERVED) and rec.update_digest is not None:
                digest = bytes.fromhex(rec.update_digest)
                if not self._chain_has_commit(st.round, digest):
                    # the chain lost the commitment (restarted from an older state): send it again
                    log.warning(
                        "round %d: commitment missing on-chain (chain rolled back); re-sending", st.round
                    )
                    self._commit(st.round, digest)
        else:
            if rec is not None and rec.status == PREPARED:
                self._reconcile(st, rec)
                rec = self.state.record(st.round)
            if rec is not None and rec.status == COMMITTED:
                self._serve(st)
            elif rec is not None and rec.status == SERVED:
                self._ensure_live(st.round)
                if st.round not in self._announced:
                    # served before a restart: the old record may name a dead URL (issue 10), so the
                    # update, its evidence and this process's URL are published again
                    self._publish(st.round, self.state.record(st.round) or rec)
                    log.info("round %d: serving again after a restart at %s", st.round, self.url)
                self.phase = "serving"
            else:
                self.phase = "idle (not committed this round)"
