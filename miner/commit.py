"""A miner's round up to its commitment: train on theta_r (``miner.work``), keep the update, its
transcript snapshots and error feedback in ``miner.state`` before the transaction, commit the update's
digest, and after a restart reconcile a prepared round with the chain."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from miner.behaviour import BehaviourContext
from miner.connections import MinerConnections, RoundMaterial, part_index
from miner.errors import MinerError, MinerStateError
from miner.state import ABANDONED, COMMITTED, MinerRoundRecord
from miner.work import BuiltUpdate, RoundInputs, build_update
from protocol.rounds.coordinator import CoordinatorError, NotRegisteredError, RoundState
from protocol.rounds.epochs import RoundEpoch, round_epoch
from protocol.rounds.phases import Phase
from protocol.runspec import COMPUTE_LOCK
from protocol.wire.tensorblob import encode_tensors, tensor_blob_digest

log = logging.getLogger(__name__)


class Committer:
    """Train, record and commit one round's update; the round's material goes to ``material``, which the
    publish service serves from."""

    def __init__(self, conn: MinerConnections, material: RoundMaterial) -> None:
        self.conn = conn
        self.material = material
        self.ahead_tried = 0
        """The last round this process tried to train ahead of its certificate (once a round)."""

    def _phase(self, phase: str) -> None:
        self.conn.runtime.phase = phase

    def work_ahead(self, st: RoundState) -> bool:
        """Train round ``st`` before its checkpoint is certified, on theta_r rebuilt as the validators merge
        it (``miner.checkpoints.CheckpointSource.rebuild_uncertified``), so that a slow certificate does not
        eat the commit window; the update is kept prepared and committed only once the chain certifies the
        digest it was trained on (:meth:`reconcile`). False when theta_r cannot be rebuilt yet (tried once a
        round; the miner then waits for the certificate as before)."""
        if self.ahead_tried == st.round or st.round <= 1:
            return False
        self.ahead_tried = st.round
        got = self.material.checkpoints.rebuild_uncertified(st.round)
        if got is None:
            return False
        digest = bytes.fromhex(got[1].removeprefix("0x"))
        log.info("round %d: training ahead of the certificate on theta_r %s", st.round, got[1][:18])
        self.work(replace(st, checkpoint=digest), commit=False)
        return self.conn.state.record(st.round) is not None

    def work(self, st: RoundState, commit: bool = True) -> None:
        """Round ``st``'s work: fetch theta_r, train, keep everything needed to resume, commit (unless
        ``commit`` is False: trained ahead of the certificate, :meth:`work_ahead`)."""
        assert st.checkpoint is not None
        c, r = self.conn, st.round
        self._phase("fetching")
        t0 = time.perf_counter()
        ckpt = self.material.checkpoint(r, st.checkpoint)
        c.metrics.phase_seconds.labels(phase="fetch").observe(time.perf_counter() - t0)
        registry = c.coord.miners(r)
        if self._sits_out(r, registry):
            return
        self._phase("training")
        ef_state, ef_source = c.state.ef_carry_for(r)
        epoch = round_epoch(c.coord, r, st.assign_seed, c.spec.epoch_rounds)
        inputs = RoundInputs(
            r, c.address, ckpt, st.checkpoint, st.assign_seed, registry, ef_state, ef_source,
            epoch_seed=epoch.seed, epoch_registry=epoch.registry,
        )  # fmt: skip
        built = self._train(inputs)
        c.metrics.phase_seconds.labels(phase="train").observe(built.train_seconds)
        c.state.blobs.put(built.update)
        snaps = {}
        for step, tensors in built.snapshots.items():
            snaps[str(step)] = c.state.blobs.put(encode_tensors(tensors), digest_fn=tensor_blob_digest)
        record = _round_record(st, built, (registry, epoch), snaps, ef_source, c.spec.inner.steps)
        c.state.prepare(r, record, built.ef_state)
        live = self.material.live
        live.built = built
        live.snapshots = dict(built.states)
        live.parts = part_index(
            built.transcript_steps, [(p.hex(), q.hex()) for p, q in built.transcript_parts]
        )
        if commit:
            self.commit(r, built.digest)
        else:
            self._phase("trained ahead; commits when theta_r's certificate lands")

    def _sits_out(self, round: int, registry: list[str]) -> bool:
        """Whether this miner skips ``round`` (recorded as abandoned): registered after it opened, or
        its behaviour chose not to commit."""
        c = self.conn
        if c.address not in registry:
            self._phase(f"joining: registered after round {round} opened, works from round {round + 1}")
            c.state.prepare(round, MinerRoundRecord(skipped=True, reason="not in the round's registry"), {})
            self._abandon(round, "not in the round's registry")
            return True
        if not c.behaviour.should_commit(BehaviourContext(round, c.address, (), c.spec.inner.steps)):
            self._phase("skipping (behaviour)")
            c.state.prepare(round, MinerRoundRecord(skipped=True), {})
            self._abandon(round, "behaviour chose not to commit")
            return True
        return False

    def _train(self, inputs: RoundInputs) -> BuiltUpdate:
        """The round's update (``miner.work.build_update``), under the process's compute lock."""
        c = self.conn
        with COMPUTE_LOCK:
            return build_update(
                c.spec,
                c.dataset,
                inputs,
                c.behaviour,
                snapshot_every=c.cfg.snapshot_every,
                device=c.cfg.device,
            )

    def commit(self, round: int, digest: bytes) -> None:
        """Commit the update ``digest`` for ``round`` while the commit phase is open (else abandon it)."""
        c = self.conn
        self._phase("committing")
        st = c.coord.current()
        if st.round != round or st.phase != Phase.COMMIT or st.block > st.deadline:
            self._abandon(round, "commit phase closed before the update was ready")
            log.warning("round %d: update ready after the commit deadline; abandoned", round)
            return
        try:
            c.coord.commit_update(round, digest)
        except NotRegisteredError as exc:
            # stake below the run's minimum (after an unbond) or not a miner: no retry can commit this round
            self._abandon(round, f"not allowed to commit: {exc}")
            self._phase("not staked: bond stake (`tessera account bond`) to commit again")
            log.warning("round %d: cannot commit (%s); bond stake to commit again", round, exc)
            return
        except CoordinatorError as exc:
            if c.chain_has_commit(round, digest):
                log.info("round %d: commitment already on-chain", round)
            else:
                raise MinerError(f"commit for round {round} failed: {exc}") from exc
        with c.state.edit(round) as rec:
            rec.status, rec.committed_at = COMMITTED, time.time()
        self._phase("committed")
        log.info("round %d: committed %s", round, digest.hex()[:16])

    def reconcile(self, st: RoundState, rec: MinerRoundRecord) -> None:
        """A ``prepared`` round after a restart: committed on-chain, commit now, or abandon."""
        r = st.round
        if rec.update_digest is None:
            raise MinerStateError(f"round {r} is prepared without an update digest")
        digest = bytes.fromhex(rec.update_digest)
        open_now = st.phase == Phase.COMMIT and st.block <= st.deadline
        if self.conn.chain_has_commit(r, digest):
            with self.conn.state.edit(r) as stored:
                stored.status, stored.reconciled = COMMITTED, True
        elif st.checkpoint is None and open_now:
            self._phase("trained ahead; commits when theta_r's certificate lands")  # trained ahead: wait
        elif st.checkpoint is not None and rec.checkpoint != st.checkpoint.hex():
            # trained ahead on a theta_r the validators did not certify: that update is worth nothing
            log.warning("round %d: certified theta_r differs from the one trained ahead on; retraining", r)
            self._abandon(r, "trained ahead on a theta_r that was not certified")
            if open_now:
                self.work(st)
        elif open_now:
            self.commit(r, digest)
        else:
            self._abandon(r, "not committed before the deadline")

    def _abandon(self, round: int, reason: str) -> None:
        """Mark ``round`` abandoned, saying why; its residual is never used."""
        with self.conn.state.edit(round) as rec:
            rec.status, rec.reason = ABANDONED, reason


def _round_record(
    st: RoundState,
    built: BuiltUpdate,
    registries: tuple[list[str], RoundEpoch],
    snaps: dict[str, str],
    ef_source: tuple[int, bytes] | None,
    inner_steps: int,
) -> MinerRoundRecord:
    """What ``miner.state`` keeps of a prepared round: enough to commit, serve and resume it (``registries``:
    the round's registry and its assignment epoch)."""
    assert st.checkpoint is not None
    registry, epoch = registries
    return MinerRoundRecord(
        round=st.round,
        update_digest=built.digest.hex(),
        update_bytes=len(built.update),
        checkpoint=st.checkpoint.hex(),
        assign_seed=st.assign_seed.hex(),
        registry=registry,
        epoch_seed=epoch.seed.hex(),
        epoch_registry=list(epoch.registry),
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
