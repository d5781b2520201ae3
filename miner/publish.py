"""A miner's round after its commitment: publish the update, the transcript, the error-feedback states a
validator recomputes the update from (F12) and any TEE evidence; announce them with this process's URL;
and serve transcript states on demand (replayed from the nearest snapshot, ``miner.work``)."""

from __future__ import annotations

import logging
import time

from torch import Tensor

from miner.behaviour import BehaviourContext
from miner.connections import EvidenceFn, MinerConnections, RoundMaterial, part_index
from miner.errors import MinerStateError
from miner.state import SERVED, MinerRoundRecord
from miner.work import KeptTranscript, assignment_for, transcript_state
from protocol.node.api import NodeNotReadyError
from protocol.rounds.coordinator import RoundState
from protocol.runspec import COMPUTE_LOCK
from protocol.wire.records import Served
from protocol.wire.tensorblob import decode_tensors, encode_tensors, tensor_blob_digest
from protocol.wire.updateheader import transcript_tensors
from training.digest import split_state

log = logging.getLogger(__name__)


class Publisher:
    """Serve what a committed round's validators fetch, from the round's ``material``."""

    def __init__(
        self, conn: MinerConnections, material: RoundMaterial, evidence_fn: EvidenceFn | None
    ) -> None:
        self.conn = conn
        self.material = material
        self.evidence_fn = evidence_fn
        """Produces the round's TEE evidence (None: this miner serves none)."""
        self.announced: set[int] = set()
        """Rounds this process has announced its update for (a restarted process announces again)."""
        self.synced = False
        """Set after the first step since start: until then a missing transcript state may only mean this
        process has not restored its round yet, so it is answered 503 (retry), not 404 (not served)."""

    def ensure_live(self, round: int) -> None:
        """Reload the round's serving material from disk (after a restart)."""
        live = self.material.live
        if live.round == round and live.snapshots:
            return
        state = self.conn.state
        rec = state.record(round)
        if rec is None or rec.snapshots is None or rec.checkpoint is None:
            return
        params = self.material.checkpoint(round, bytes.fromhex(rec.checkpoint))
        live = self.material.live
        live.snapshots = {int(s): decode_tensors(state.blobs.get(d)) for s, d in rec.snapshots.items()}
        # a record written before the transcript had parts serves none (its round is long settled)
        live.parts = part_index(rec.transcript_steps or [], rec.transcript_parts or [])
        live.checkpoint = params

    def serve(self, st: RoundState) -> None:
        """After the commit deadline: publish the update (+ evidence) and announce it."""
        c, r = self.conn, st.round
        rec = c.state.record(r)
        assert rec is not None
        self.ensure_live(r)
        self.publish(r, rec)
        with c.state.edit(r) as stored:
            stored.status, stored.served_at = SERVED, time.time()
        c.metrics.rounds.inc()
        c.runtime.phase = "serving"
        log.info("round %d: serving update at %s", r, c.url)

    def publish(self, round: int, rec: MinerRoundRecord) -> None:
        """Put the round's update, error-feedback states and evidence in the public store and announce
        them with this process's URL (idempotent: the store is content-addressed)."""
        c = self.conn
        if rec.update_digest is None:
            raise MinerStateError(f"round {round} is {rec.status} without an update to serve")
        digest = rec.update_digest
        extra = {"update_digest": bytes.fromhex(digest), "chain_id": c.coord.chain_id}
        ctx = BehaviourContext(round, c.address, tuple(rec.modules or ()), c.spec.inner.steps, extra)
        data = c.behaviour.served_update(ctx, c.state.blobs.get("0x" + digest))
        served = [Served("update", "0x" + digest, len(data))]
        c.public.put(data, "0x" + digest) if data else None
        # the transcript, which the header commits to by its root only
        parts = [(bytes.fromhex(p), bytes.fromhex(q)) for p, q in rec.transcript_parts or []]
        c.public.put(encode_tensors(transcript_tensors(parts)), digest_fn=tensor_blob_digest)
        self._publish_error_feedback(round, rec)
        evidence = self.evidence_fn(round, c.address, bytes.fromhex(digest)) if self.evidence_fn else None
        evidence = c.behaviour.evidence(ctx, evidence)
        if evidence:
            ed = c.public.put(evidence)
            served.append(Served("evidence", ed, len(evidence)))
        c.discovery.announce(round, "miner", c.url, served)
        self.announced.add(round)

    def _publish_error_feedback(self, round: int, rec: MinerRoundRecord) -> None:
        """Serve what a validator needs to recompute the compressed update (F12): the residual after this
        round and, if the update started from an earlier one, that round's update and residual."""
        state, public = self.conn.state, self.conn.public
        rounds = [round]
        src = rec.ef_source
        if src:
            rounds.append(int(src[0]))
            if state.blobs.has(f"0x{src[1]}"):
                public.put(state.blobs.get(f"0x{src[1]}"), f"0x{src[1]}")
        for q in rounds:
            try:
                after = {k: v for k, v in state.ef_state(q).items() if k.startswith("ef/")}
            except MinerStateError as exc:
                log.warning("round %d: error-feedback residual of round %d not served: %s", round, q, exc)
                continue
            public.put(encode_tensors(after), digest_fn=tensor_blob_digest)

    def serve_transcript_state(self, digest: str) -> bytes | None:
        """Bytes of a transcript state of the current served round (replayed from a snapshot if needed)."""
        tensors = self.transcript_part(digest)
        return None if tensors is None else encode_tensors(tensors)

    def transcript_part(self, digest: str) -> dict[str, Tensor] | None:
        """A part of a transcript state of the current served round (its parameters or the rest) by its
        digest (``0x`` + hex), None if this process does not serve it; :class:`NodeNotReadyError` until
        the first step since start."""
        if not self.synced:
            raise NodeNotReadyError("restoring the round after a start")
        c = self.conn
        with self.material.lock:
            live = self.material.live
            rec = c.state.record(live.round)
            if rec is None or rec.status != SERVED or digest not in live.parts or live.checkpoint is None:
                return None
            drawn = rec.assignment_inputs()
            if rec.assign_seed is None or drawn is None:
                return None
            ctx = BehaviourContext(live.round, c.address, tuple(rec.modules or ()), c.spec.inner.steps)
            if not c.behaviour.serves_state(ctx):
                return None
            step, is_params = live.parts[digest]
            a = assignment_for(c.spec, drawn[0], drawn[1], c.address, drawn[2])
            with COMPUTE_LOCK:
                kept = KeptTranscript(
                    live.round, live.checkpoint, bytes.fromhex(rec.assign_seed), a, live.snapshots
                )
                tensors = transcript_state(c.spec, c.dataset, kept, step, device=c.cfg.device)
            return split_state(tensors)[0 if is_params else 1]
