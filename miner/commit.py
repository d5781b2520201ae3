"""A miner's round up to its commitment: train on theta_r (``miner.work``), keep the update, its
transcript snapshots and error feedback in ``miner.state`` before the transaction, commit the update's
digest, and after a restart reconcile a prepared round with the chain."""

from __future__ import annotations

import logging
import time

from torch import Tensor

from miner.behaviour import BehaviourContext
from miner.errors import MinerError, MinerStateError
from miner.parts import MinerParts, part_index
from miner.state import ABANDONED, COMMITTED, MinerRoundRecord
from miner.work import BuiltUpdate, build_update
from protocol.rounds.coordinator import CoordinatorError, Phase, RoundState
from protocol.runspec import COMPUTE_LOCK
from protocol.wire.tensorblob import encode_tensors, tensor_blob_digest

log = logging.getLogger(__name__)


class CommitMixin(MinerParts):
    """Train, record and commit one round's update."""

    def _work(self, st: RoundState) -> None:
        assert st.checkpoint is not None
        r = st.round
        self.phase = "fetching"
        t0 = time.perf_counter()
        ckpt = self._checkpoint(r, st.checkpoint)
        self.metrics.phase_seconds.labels(phase="fetch").observe(time.perf_counter() - t0)
        registry = self.coord.miners(r)
        if self._sits_out(r, registry):
            return
        self.phase = "training"
        ef_state, ef_source = self.state.ef_carry_for(r)
        built = self._train(st, ckpt, registry, ef_state, ef_source)
        self.metrics.phase_seconds.labels(phase="train").observe(built.train_seconds)
        self.state.blobs.put(built.update)
        snaps = {}
        for step, tensors in built.snapshots.items():
            snaps[str(step)] = self.state.blobs.put(encode_tensors(tensors), digest_fn=tensor_blob_digest)
        record = _round_record(st, built, registry, snaps, ef_source, self.spec.inner.steps)
        self.state.prepare(r, record, built.ef_state)
        self._live.built = built
        self._live.snapshots = dict(built.states)
        self._live.parts = part_index(
            built.transcript_steps, [(p.hex(), q.hex()) for p, q in built.transcript_parts]
        )
        self._commit(r, built.digest)

    def _sits_out(self, round: int, registry: list[str]) -> bool:
        """Whether this miner skips ``round`` (recorded as abandoned): registered after it opened, or
        its behaviour chose not to commit."""
        if self.address not in registry:
            self.phase = f"joining: registered after round {round} opened, works from round {round + 1}"
            self.state.prepare(
                round, MinerRoundRecord(skipped=True, reason="not in the round's registry"), {}
            )
            self._abandon(round, "not in the round's registry")
            return True
        if not self.behaviour.should_commit(BehaviourContext(round, self.address, (), self.spec.inner.steps)):
            self.phase = "skipping (behaviour)"
            self.state.prepare(round, MinerRoundRecord(skipped=True), {})
            self._abandon(round, "behaviour chose not to commit")
            return True
        return False

    def _train(
        self,
        st: RoundState,
        ckpt: dict[str, Tensor],
        registry: list[str],
        ef_state: dict[str, Tensor],
        ef_source: tuple[int, bytes] | None,
    ) -> BuiltUpdate:
        """The round's update (``miner.work.build_update``), under the process's compute lock."""
        assert st.checkpoint is not None
        with COMPUTE_LOCK:
            return build_update(
                self.spec,
                self.dataset,
                round=st.round,
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

    def _commit(self, round: int, digest: bytes) -> None:
        self.phase = "committing"
        st = self.coord.current()
        if st.round != round or st.phase != Phase.COMMIT or st.block > st.deadline:
            self._abandon(round, "commit phase closed before the update was ready")
            log.warning("round %d: update ready after the commit deadline; abandoned", round)
            return
        try:
            self.coord.commit_update(round, digest)
        except CoordinatorError as exc:
            if self._chain_has_commit(round, digest):
                log.info("round %d: commitment already on-chain", round)
            else:
                raise MinerError(f"commit for round {round} failed: {exc}") from exc
        with self.state.edit(round) as rec:
            rec.status, rec.committed_at = COMMITTED, time.time()
        self.phase = "committed"
        log.info("round %d: committed %s", round, digest.hex()[:16])

    def _reconcile(self, st: RoundState, rec: MinerRoundRecord) -> None:
        """A ``prepared`` round after a restart: committed on-chain, commit now, or abandon."""
        r = st.round
        if rec.update_digest is None:
            raise MinerStateError(f"round {r} is prepared without an update digest")
        digest = bytes.fromhex(rec.update_digest)
        if self._chain_has_commit(r, digest):
            with self.state.edit(r) as stored:
                stored.status, stored.reconciled = COMMITTED, True
        elif st.phase == Phase.COMMIT and st.block <= st.deadline:
            self._commit(r, digest)
        else:
            self._abandon(r, "not committed before the deadline")

    def _abandon(self, round: int, reason: str) -> None:
        """Mark ``round`` abandoned, saying why; its residual is never used."""
        with self.state.edit(round) as rec:
            rec.status, rec.reason = ABANDONED, reason


def _round_record(
    st: RoundState,
    built: BuiltUpdate,
    registry: list[str],
    snaps: dict[str, str],
    ef_source: tuple[int, bytes] | None,
    inner_steps: int,
) -> MinerRoundRecord:
    """What ``miner.state`` keeps of a prepared round: enough to commit, serve and resume it."""
    assert st.checkpoint is not None
    return MinerRoundRecord(
        round=st.round,
        update_digest=built.digest.hex(),
        update_bytes=len(built.update),
        checkpoint=st.checkpoint.hex(),
        assign_seed=st.assign_seed.hex(),
        registry=registry,
        modules=list(built.assignment.module_ids),
        loss_first=built.losses[0],
        loss_last=built.losses[-1],
        tokens=built.tokens,
        train_seconds=round(built.train_seconds, 4),
        train_cpu_seconds=round(built.train_cpu_seconds, 4),
        trained_params=built.trained_params,
        inner_steps=inner_steps,
        transcript_steps=built.transcript_steps,
        transcript_parts=[[p.hex(), q.hex()] for p, q in built.transcript_parts],
        snapshots=snaps,
        ef_after=built.ef_after.hex(),
        ef_source=None if ef_source is None else [ef_source[0], ef_source[1].hex()],
    )
