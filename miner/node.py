"""The miner node: join, then every round fetch, train, package, commit, serve, and collect rewards.

The node is a loop over :meth:`MinerNode.step`, which looks at the chain and takes the next action that
is due. Every action is idempotent and recorded in :class:`miner.state.MinerState` before or after the
transaction as described there, so killing the process at any point and starting it again resumes the
round (or joins the next one) without committing twice or losing error feedback.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from miner.behaviour import Behaviour, RoundContext, make_behaviour
from miner.checkpoints import CheckpointSource
from miner.config import MinerConfig
from miner.errors import MinerError, MinerStateError
from miner.livepage import mount_live_page
from miner.state import ABANDONED, COMMITTED, PREPARED, SERVED, MinerState
from miner.work import BuiltUpdate, assignment_for, build_update, transcript_state
from protocol.coordinator import Coordinator, CoordinatorError, Phase, RoundState, update_commitment
from protocol.discovery import Discovery
from protocol.nodeapi import (
    NodeMetrics,
    NodeNotReadyError,
    NodeServer,
)
from protocol.nodestart import ServingNode
from protocol.records import Served
from protocol.runspec import COMPUTE_LOCK, RunSpec
from protocol.tensorblob import (
    decode_tensors,
    encode_tensors,
    split_checkpoint,
    tensor_blob_digest,
)
from protocol.traffic import TrafficLedger
from protocol.transfer import BlobStore, FetchPolicy
from protocol.update import transcript_tensors
from training.data import Dataset, prepare
from training.digest import split_state

log = logging.getLogger(__name__)

#: Produces TEE evidence for (round, miner, update digest); None when the node runs without a TEE.
EvidenceFn = Callable[[int, str, bytes], bytes | None]


def simulated_evidence(chain_id: int, seed: bytes) -> EvidenceFn:
    """Evidence from the development TDX enclave of ``attestation.simulated`` (devnet only; ``seed`` is
    the run's fresh development root, never a public constant)."""
    from attestation import report_data
    from attestation.simulated import SimulatedEnclave

    enclave = SimulatedEnclave.from_seed(seed)

    def make(round: int, miner: str, digest: bytes) -> bytes:
        return enclave.quote(report_data(chain_id, round, miner, digest))

    return make


@dataclass
class _Live:
    """The current round's in-memory material (re-derived from disk after a restart)."""

    round: int = 0
    checkpoint: dict[str, Tensor] | None = None
    checkpoint_digest: bytes = b""
    built: BuiltUpdate | None = None
    snapshots: dict[int, dict[str, Tensor]] = field(default_factory=dict)
    parts: dict[str, tuple[int, bool]] = field(default_factory=dict)
    """Digest (0x-hex) of a transcript state's part -> (step, whether it is the parameters), for serving
    on demand."""


class MinerNode(ServingNode):
    """A miner: one process, one key, one run (``start`` and ``stop``: ``protocol.nodestart``)."""

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
        self._live = _Live()
        self._lock = threading.RLock()
        self.phase = "starting"
        self.last_error = ""
        self.rounds_done = sum(1 for rec in self.state.rounds().values() if "reward" in rec)
        self.server: NodeServer | None = None
        self.url = ""
        self._announced: set[int] = set()
        self._synced = False
        """Set after the first step since start: until then a missing transcript state may only mean this
        process has not restored its round yet, so it is answered 503 (retry), not 404 (not served)."""
        """Rounds this process has announced its update for (a restarted process announces again)."""

    # -- lifecycle -------------------------------------------------------------------------------------
    @property
    def dataset(self) -> Dataset:
        """The run's prepared corpus (loaded once)."""
        if self._ds is None:
            self._ds = prepare(self.spec.load_corpus(), self.spec.model)
        return self._ds

    def _blob_fallback(self) -> Callable[[str], bytes | None]:
        return self.serve_transcript_state

    def _add_routes(self, app: Any) -> None:
        @app.get("/rounds", summary="This miner's round records")
        def rounds() -> dict[str, Any]:
            return {str(r): rec for r, rec in self.state.rounds().items()}

        mount_live_page(app, self.status, self.state.rounds)  # GET / (issue 16)

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
            "last_round": recs.get(last) if last is not None else None,
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
            elif rec["status"] == PREPARED:
                self._reconcile(st, rec)
            elif rec["status"] in (COMMITTED, SERVED) and "update_digest" in rec:
                digest = bytes.fromhex(rec["update_digest"])
                if not self._chain_has_commit(st.round, digest):
                    # the chain lost the commitment (restarted from an older state): send it again
                    log.warning(
                        "round %d: commitment missing on-chain (chain rolled back); re-sending", st.round
                    )
                    self._commit(st.round, digest)
        else:
            if rec is not None and rec["status"] == PREPARED:
                self._reconcile(st, rec)
                rec = self.state.record(st.round)
            if rec is not None and rec["status"] == COMMITTED:
                self._serve(st)
            elif rec is not None and rec["status"] == SERVED:
                self._ensure_live(st.round)
                if st.round not in self._announced:
                    # served before a restart: the old record may name a dead URL (issue 10), so the
                    # update, its evidence and this process's URL are published again
                    self._publish(st.round, self.state.record(st.round) or rec)
                    log.info("round %d: serving again after a restart at %s", st.round, self.url)
                self.phase = "serving"
            else:
                self.phase = "idle (not committed this round)"

    # -- round work ------------------------------------------------------------------------------------
    def _checkpoint(self, round: int, digest: bytes) -> dict[str, Tensor]:
        """theta_round's parameters (``miner.checkpoints``), kept in memory for the round."""
        if (
            self._live.round == round
            and self._live.checkpoint is not None
            and self._live.checkpoint_digest == digest
        ):
            return self._live.checkpoint
        params, _momentum = split_checkpoint(self.checkpoints.get(round, "0x" + digest.hex()))
        self._live = _Live(round=round, checkpoint=params, checkpoint_digest=digest)
        return params

    def _work(self, st: RoundState) -> None:
        assert st.checkpoint is not None
        r = st.round
        self.phase = "fetching"
        t0 = time.perf_counter()
        ckpt = self._checkpoint(r, st.checkpoint)
        self.metrics.phase_seconds.labels(phase="fetch").observe(time.perf_counter() - t0)
        registry = self.coord.miners(r)
        if self.address not in registry:
            self.phase = f"joining: registered after round {r} opened, works from round {r + 1}"
            self.state.prepare(r, {"skipped": True, "reason": "not in the round's registry"}, {})
            self.state.set_status(r, ABANDONED, reason="not in the round's registry")
            return
        ctx = RoundContext(r, self.address, (), self.spec.inner.steps)
        if not self.behaviour.should_commit(ctx):
            self.phase = "skipping (behaviour)"
            self.state.prepare(r, {"skipped": True}, {})
            self.state.set_status(r, ABANDONED, reason="behaviour chose not to commit")
            return
        self.phase = "training"
        ef_state, ef_source = self.state.ef_carry_for(r)
        with COMPUTE_LOCK:
            built = build_update(
                self.spec,
                self.dataset,
                round=r,
                miner=self.address,
                checkpoint=ckpt,
                checkpoint_digest=st.checkpoint,
                assign_seed=st.assign_seed,
                registry=registry,
                ef_state=ef_state,
                ef_source=ef_source,
                behaviour=self.behaviour,
                snapshot_every=self.cfg.snapshot_every,
                device=self.cfg.device,
            )
        self.metrics.phase_seconds.labels(phase="train").observe(built.train_seconds)
        self.state.blobs.put(built.update)
        snaps = {}
        for step, tensors in built.snapshots.items():
            data = encode_tensors(tensors)
            snaps[str(step)] = self.state.blobs.put(data, digest_fn=tensor_blob_digest)
        record = {
            "round": r,
            "update_digest": built.digest.hex(),
            "update_bytes": len(built.update),
            "checkpoint": st.checkpoint.hex(),
            "assign_seed": st.assign_seed.hex(),
            "registry": registry,
            "modules": list(built.assignment.module_ids),
            "loss_first": built.losses[0],
            "loss_last": built.losses[-1],
            "tokens": built.tokens,
            "train_seconds": round(built.train_seconds, 4),
            "trained_params": built.trained_params,
            "inner_steps": self.spec.inner.steps,
            "transcript_steps": built.transcript_steps,
            "transcript_parts": [[p.hex(), q.hex()] for p, q in built.transcript_parts],
            "snapshots": snaps,
            "ef_after": built.ef_after.hex(),
            "ef_source": None if ef_source is None else [ef_source[0], ef_source[1].hex()],
        }
        self.state.prepare(r, record, built.ef_state)
        self._live.built = built
        self._live.snapshots = dict(built.states)
        self._live.parts = _part_index(
            built.transcript_steps, [(p.hex(), q.hex()) for p, q in built.transcript_parts]
        )
        self._commit(r, built.digest)

    def _commit(self, r: int, digest: bytes) -> None:
        self.phase = "committing"
        st = self.coord.current()
        if st.round != r or st.phase != Phase.COMMIT or st.block > st.deadline:
            self.state.set_status(r, ABANDONED, reason="commit phase closed before the update was ready")
            log.warning("round %d: update ready after the commit deadline; abandoned", r)
            return
        try:
            self.coord.commit_update(r, digest)
        except CoordinatorError as exc:
            if self._chain_has_commit(r, digest):
                log.info("round %d: commitment already on-chain", r)
            else:
                raise MinerError(f"commit for round {r} failed: {exc}") from exc
        self.state.set_status(r, COMMITTED, committed_at=time.time())
        self.phase = "committed"
        log.info("round %d: committed %s", r, digest.hex()[:16])

    def _chain_has_commit(self, r: int, digest: bytes) -> bool:

        got = self.coord.update_commitments(r).get(self.address)
        return got is not None and got == update_commitment(
            self.coord.chain_id, self.coord.contract, r, self.address, digest
        )

    def _reconcile(self, st: RoundState, rec: dict[str, Any]) -> None:
        """A ``prepared`` round after a restart: committed on-chain, commit now, or abandon."""
        r = st.round
        digest = bytes.fromhex(rec["update_digest"])
        if self._chain_has_commit(r, digest):
            self.state.set_status(r, COMMITTED, reconciled=True)
        elif st.phase == Phase.COMMIT and st.block <= st.deadline:
            self._commit(r, digest)
        else:
            self.state.set_status(r, ABANDONED, reason="not committed before the deadline")

    def _ensure_live(self, r: int) -> None:
        """Reload the round's serving material from disk (after a restart)."""
        if self._live.round == r and self._live.snapshots:
            return
        rec = self.state.record(r)
        if rec is None or "snapshots" not in rec:
            return
        params = self._checkpoint(r, bytes.fromhex(rec["checkpoint"]))
        self._live.snapshots = {
            int(s): decode_tensors(self.state.blobs.get(d)) for s, d in rec["snapshots"].items()
        }
        # a record written before the transcript had parts serves none (its round is long settled)
        self._live.parts = _part_index(rec["transcript_steps"], rec.get("transcript_parts") or [])
        self._live.checkpoint = params

    def _serve(self, st: RoundState) -> None:
        """After the commit deadline: publish the update (+ evidence) and announce it."""
        r = st.round
        rec = self.state.record(r)
        assert rec is not None
        self._ensure_live(r)
        self._publish(r, rec)
        self.state.set_status(r, SERVED, served_at=time.time())
        self.metrics.rounds.inc()
        self.phase = "serving"
        log.info("round %d: serving update at %s", r, self.url)

    def _publish(self, r: int, rec: dict[str, Any]) -> None:
        """Put the round's update, error-feedback states and evidence in the public store and announce
        them with this process's URL (idempotent: the store is content-addressed)."""
        extra = {"update_digest": bytes.fromhex(rec["update_digest"]), "chain_id": self.coord.chain_id}
        ctx = RoundContext(r, self.address, tuple(rec["modules"]), self.spec.inner.steps, extra)
        data = self.behaviour.served_update(ctx, self.state.blobs.get("0x" + rec["update_digest"]))
        served = [Served("update", "0x" + rec["update_digest"], len(data))]
        self.public.put(data, "0x" + rec["update_digest"]) if data else None
        # the transcript, which the header commits to by its root only (issue 13)
        parts = [(bytes.fromhex(p), bytes.fromhex(q)) for p, q in rec.get("transcript_parts") or []]
        self.public.put(encode_tensors(transcript_tensors(parts)), digest_fn=tensor_blob_digest)
        self._publish_error_feedback(r, rec)
        evidence = (
            self.evidence_fn(r, self.address, bytes.fromhex(rec["update_digest"]))
            if self.evidence_fn
            else None
        )
        evidence = self.behaviour.evidence(ctx, evidence)
        if evidence:
            ed = self.public.put(evidence)
            served.append(Served("evidence", ed, len(evidence)))
        self.discovery.announce(r, "miner", self.url, served)
        self._announced.add(r)

    def _publish_error_feedback(self, r: int, rec: dict[str, Any]) -> None:
        """Serve what a validator needs to recompute the compressed update (F12): the residual after this
        round and, if the update started from an earlier one, that round's update and residual."""
        rounds = [r]
        src = rec.get("ef_source")
        if src:
            rounds.append(int(src[0]))
            if self.state.blobs.has("0x" + src[1]):
                self.public.put(self.state.blobs.get("0x" + src[1]), "0x" + src[1])
        for q in rounds:
            try:
                after = {k: v for k, v in self.state.ef_state(q).items() if k.startswith("ef/")}
            except MinerStateError as exc:
                log.warning("round %d: error-feedback residual of round %d not served: %s", r, q, exc)
                continue
            self.public.put(encode_tensors(after), digest_fn=tensor_blob_digest)

    def serve_transcript_state(self, digest: str) -> bytes | None:
        """Bytes of a transcript state of the current served round (replayed from a snapshot if needed)."""
        tensors = self.transcript_part(digest)
        return None if tensors is None else encode_tensors(tensors)

    def transcript_part(self, digest: str) -> dict[str, Tensor] | None:
        """A part of a transcript state of the current served round (its parameters or the rest) by its
        digest (``0x`` + hex), None if this process does not serve it; :class:`NodeNotReadyError` until
        the first step since start."""
        if not self._synced:
            raise NodeNotReadyError("restoring the round after a start")
        with self._lock:
            live = self._live
            rec = self.state.record(live.round)
            if rec is None or rec["status"] != SERVED or digest not in live.parts or live.checkpoint is None:
                return None
            step, is_params = live.parts[digest]
            a = assignment_for(self.spec, bytes.fromhex(rec["assign_seed"]), rec["registry"], self.address)
            with COMPUTE_LOCK:
                tensors = transcript_state(
                    self.spec,
                    self.dataset,
                    round=live.round,
                    checkpoint=live.checkpoint,
                    assign_seed=bytes.fromhex(rec["assign_seed"]),
                    assignment=a,
                    snapshots=live.snapshots,
                    step=step,
                    device=self.cfg.device,
                )
            return split_state(tensors)[0 if is_params else 1]

    def _collect_rewards(self, current_round: int) -> None:
        """Record each settled round's reward, then read this key's account from the chain when the round,
        its record or the settled count changed (``/status`` ``account``, ``account_tokens`` gauges), and
        refuse a commitment of this key that this node did not make (:class:`KeyInUseError`)."""
        from protocol.nodeaccount import ChainAccount

        for r, rec in self.state.rounds().items():
            if r >= current_round or "reward" in rec or rec["status"] not in (SERVED, COMMITTED):
                continue
            s = self.coord.settlement(r)
            if s is None:
                continue
            reward = s.miner_rewards.get(self.address, 0)
            self.state.update(r, reward=str(reward), consensus_score=s.consensus.get(self.address, 0))
            self.rounds_done += 1
            log.info("round %d: consensus score %s, reward %d", r, s.consensus.get(self.address), reward)
        if "_account" not in self.__dict__:
            self.__dict__["_account"] = ChainAccount.of(self.coord, self.address, self.metrics)
        acc: ChainAccount | None = self.__dict__["_account"]
        now = self.state.record(current_round) or {}
        if acc is None or not acc.try_refresh((current_round, now.get("status"), self.rounds_done)):
            return

        def own(r: int) -> bool:
            rec = self.state.record(r) or {}
            return "update_digest" in rec and (
                rec["status"] in (COMMITTED, SERVED)
                or self._chain_has_commit(r, bytes.fromhex(rec["update_digest"]))
            )

        acc.check_commits(current_round, own)


def _part_index(
    steps: list[int], parts: list[tuple[str, str]] | list[list[str]]
) -> dict[str, tuple[int, bool]]:
    """Digest (``0x`` + hex) of each recorded state's parameters and rest -> (step, is the parameters)."""
    out: dict[str, tuple[int, bool]] = {}
    for step, (p, q) in zip(steps, parts, strict=bool(parts)):
        out["0x" + p] = (step, True)
        out["0x" + q] = (step, False)
    return out
