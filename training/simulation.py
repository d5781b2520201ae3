"""One-process rounds of N miners and the synchronous data-parallel baseline, for simulate and bench.

Pure math like the rest of ``training``: no clock, no files. What crosses the wire is left to the caller
through ``transport``: a function that receives each miner's encoded update and returns what arrives
(``tessera simulate`` passes one that goes through ``protocol.wire.update``'s bytes and counts them).

A round of :class:`Simulation`: the round seed fixes the assignments; each miner (in address order) draws
its batches, runs the inner loop from theta_r, takes its pseudo-gradient, compresses it with its error
feedback (or sends fp32 when the codec is ``None``); the merge averages each parameter over the miners
that trained it; the outer optimizer steps. :class:`Baseline` runs the same model on the same batches
synchronously: at every inner step one AdamW step on the concatenation of all miners' batches, which is
what data-parallel training with an fp32 gradient all-reduce computes.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch
from torch import Tensor

from training.assignment import Assignment, assign_epoch
from training.codecs import Encoded, encoded_bits
from training.config import RunConfig
from training.data import Dataset, eval_windows, miner_batches
from training.digest import state_digest
from training.diloco import OuterOptimizer, merge, pseudo_gradient
from training.feedback import ErrorFeedback
from training.inner import InnerResult, lr_at, train_inner
from training.model import TesseraModel, all_paths, build_model, lm_loss, load_params, param_state

Transport = Callable[
    [int, Assignment, dict[str, Encoded] | None, dict[str, Tensor], InnerResult, bytes],
    tuple[dict[str, Tensor], int],
]
"""``(round, assignment, encodings or None, decoded delta, inner result, base checkpoint digest)
-> (delta received, bytes sent)``."""

Merger = Callable[[list[tuple[float, str, dict[str, Tensor]]]], dict[str, Tensor]]
"""``[(weight, miner, delta)] -> merged pseudo-gradient``: how the round's updates combine (default
:func:`training.diloco.merge`; the bench passes the validators' ``training.merge.robust_merge``)."""


_Sent = tuple[dict[str, Tensor], int, float, ErrorFeedback | None]
"""What :meth:`Simulation._send` returns: (delta received, bytes sent, payload bits per parameter and step,
the miner's error feedback or None)."""


def round_seed(run_seed: int, round: int) -> bytes:
    """The simulated chain's seed of a round."""
    return hashlib.sha256(b"tessera.sim.round\0" + struct.pack("<QQ", run_seed, round)).digest()


def evaluate(
    model: TesseraModel, ds: Dataset, seq_len: int, max_windows: int = 256, batch: int = 64
) -> float:
    """Mean held-out cross-entropy (nats/byte); in ``dipaco`` mode each path on its routed documents."""
    cfg = model.cfg
    if cfg.mode == "dipaco":
        paths = all_paths(cfg)
        sets: list[tuple[tuple[int, ...] | None, Tensor]] = [
            (p, eval_windows(ds.path_heldout[g], seq_len, max(1, max_windows // len(paths))))
            for g, p in enumerate(paths)
        ]
    else:
        sets = [(None, eval_windows(ds.heldout, seq_len, max_windows))]
    total, count = 0.0, 0
    dev = next(model.parameters()).device  # the windows go where the model is (CPU or a GPU)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for path, win in sets:
            for i in range(0, win.shape[0], batch):
                b = win[i : i + batch].to(dev)
                ce, _ = lm_loss(model, b, path)
                total += float(ce) * b.shape[0]
                count += b.shape[0]
    model.train(was_training)
    return total / count


def fp32_bits(delta: dict[str, Tensor]) -> int:
    """Bits of an uncompressed fp32 pseudo-gradient."""
    return 32 * sum(t.numel() for t in delta.values())


@dataclass
class RoundStats:
    """Figures of one outer round."""

    round: int
    """Round index."""
    eval_loss: float
    """Held-out loss of theta_{r+1} (NaN when not evaluated this round)."""
    train_loss: float
    """Mean inner-loop loss over miners and steps."""
    bytes_sent: int
    """Bytes all miners sent this round (as counted by the transport)."""
    payload_bits_per_param_step: float
    """Codec payload bits per trained parameter per inner step, averaged over miners."""
    tokens: int
    """Training tokens this round (all miners)."""


class Simulation:
    """N miners training one model with compressed DiLoCo, in one process."""

    def __init__(
        self,
        run: RunConfig,
        ds: Dataset,
        miners: Sequence[str],
        run_seed: int = 0,
        compress: bool = True,
        experts_per_miner: int | None = None,
        transport: Transport | None = None,
        eval_windows: int = 256,
        ef_key: str = "name",
        merger: Merger | None = None,
        device: str = "cpu",
        epoch_rounds: int = 1,
    ) -> None:
        self.run = run
        self.epoch_rounds = epoch_rounds
        """Rounds an assignment is kept (``training.assignment.assign_epoch``); 1: a new one every round."""
        self.device = device
        """Where the miners' inner loops, the baseline and the evaluations compute (``cpu``, ``cuda``,
        ``cuda:N``); states, updates and the merge stay on the CPU, as on the network."""
        self.ds = ds
        self.miners = sorted(miners)
        self.run_seed = run_seed
        self.compress = compress
        self.experts_per_miner = experts_per_miner
        self.transport = transport
        self.eval_windows = eval_windows
        self.merger = merger
        if ef_key not in ("name", "assignment"):
            raise ValueError(f"unknown ef_key {ef_key!r}")
        self.ef_key = ef_key
        self.model = build_model(run.model, run_seed)
        self.params = param_state(self.model)
        self.outer = OuterOptimizer(run.outer)
        # error-feedback memory per (miner, key): key "" (one memory per parameter name, what a devnet miner
        # keeps) or the assignment's modules, so a residual built on one path's data waits for that path
        self.feedback: dict[tuple[str, str], ErrorFeedback] = {}
        self.optimizer_states: dict[str, dict[str, Tensor]] = {}
        self.overlap = device != "cpu"
        """Whether a miner's codec and wire run in a helper thread while the next miner trains (default: off
        the CPU, where the inner loop leaves the host's cores idle)."""

    def assignments(self, round: int) -> dict[str, Assignment]:
        """The round's assignments (drawn from the seed of its epoch's first round)."""
        return assign_epoch(
            lambda r: round_seed(self.run_seed, r),
            round,
            self.epoch_rounds,
            self.miners,
            self.run.model,
            self.experts_per_miner,
        )

    def batches(self, round: int, a: Assignment) -> Tensor:
        """A miner's batches for a round."""
        inner = self.run.inner
        seed = round_seed(self.run_seed, round)
        return miner_batches(self.ds, seed, a, inner.steps, inner.batch_size, self.run.model.seq_len)

    def _compress(
        self, miner: str, a: Assignment, delta: dict[str, Tensor]
    ) -> tuple[dict[str, Encoded], dict[str, Tensor], ErrorFeedback]:
        """A miner's encoded update, what it decodes to, and the miner's error feedback after it."""
        key = (miner, ",".join(a.module_ids) if self.ef_key == "assignment" else "")
        ef = self.feedback.setdefault(key, ErrorFeedback(self.run.codec))
        # as a devnet miner does (miner/work.py; the validator recomputes the update from the committed
        # residual of the parameters it names): only the residual of parameters assigned again is carried
        ef.buffers = {n: b for n, b in ef.buffers.items() if n in delta}
        encs, sent = ef.compress(delta)
        return encs, sent, ef

    def _send(self, round: int, miner: str, a: Assignment, res: InnerResult, base_digest: bytes) -> _Sent:
        """A miner's update after its inner loop: the pseudo-gradient, compressed with its error feedback
        (or fp32), through the transport: what arrives, the bytes sent, the payload bits per parameter
        and step, and the miner's error feedback (None uncompressed)."""
        delta = pseudo_gradient(self.params, res.params)
        encs: dict[str, Encoded] | None = None
        ef: ErrorFeedback | None = None
        if self.compress:
            encs, delta, ef = self._compress(miner, a, delta)
            payload = sum(encoded_bits(e.shape, self.run.codec) for e in encs.values())
        else:
            payload = fp32_bits(delta)
        numel = sum(t.numel() for t in delta.values())
        if self.transport is not None:
            delta, nbytes = self.transport(round, a, encs, delta, res, base_digest)
        else:
            nbytes = payload // 8
        return delta, nbytes, payload / numel / self.run.inner.steps, ef

    def step(self, round: int, evaluate_after: bool = True) -> RoundStats:
        """Run one outer round and move ``self.params`` to theta_{r+1}."""
        contributions: list[tuple[float, str, dict[str, Tensor]]] = []
        base_digest = state_digest(self.params) if self.transport is not None else b""
        sent_by: dict[str, dict[str, Tensor]] = {}
        ef_of: dict[str, ErrorFeedback] = {}
        sent_bytes, bits, losses, tokens = 0, [], [], 0
        # on an accelerator a miner's codec and wire (CPU) run in a helper thread while the next miner
        # trains; each miner's part is the same function of its own inputs, in the same order, so the
        # round's figures are those of the serial loop (which the CPU keeps: its cores are all in use)
        pool = ThreadPoolExecutor(max_workers=1) if self.overlap else None
        pending: list[tuple[str, InnerResult, Future[_Sent] | _Sent]] = []
        for miner, a in sorted(self.assignments(round).items()):
            res = train_inner(
                self.run.model,
                self.run.inner,
                self.params,
                a,
                self.batches(round, a),
                round,
                model=self.model,
                optimizer_state=self.optimizer_states.get(miner),
                device=self.device,
            )
            if self.run.inner.carry_optimizer:
                # what a devnet miner keeps (miner/work.py): the moments of this round's parameters only
                self.optimizer_states[miner] = res.optimizer_state
            args = (round, miner, a, res, base_digest)
            pending.append((miner, res, pool.submit(self._send, *args) if pool else self._send(*args)))
        for miner, res, job in pending:
            delta, nbytes, bit, ef = job.result() if isinstance(job, Future) else job
            if ef is not None:
                ef_of[miner] = ef
            bits.append(bit)
            sent_bytes += nbytes
            contributions.append((1.0, miner, delta))
            sent_by[miner] = delta
            losses.extend(res.losses)
            tokens += res.tokens
        if pool is not None:
            pool.shutdown()
        old = self.params
        if self.merger is not None:
            merged = self.merger(contributions)
        else:
            merged = merge([(w, d) for w, _, d in contributions], self.run.outer.merge)
        self.params = self.outer.step(self.params, merged)
        if self.compress and self.run.codec.feedback == "applied":
            for miner, sent in sent_by.items():
                ef_of[miner].settle(sent, {n: old[n] - self.params[n] for n in sent})
        loss = float("nan")
        if evaluate_after:
            load_params(self.model, self.params)
            loss = evaluate(self.model, self.ds, self.run.model.seq_len, self.eval_windows)
        return RoundStats(round, loss, sum(losses) / len(losses), sent_bytes, sum(bits) / len(bits), tokens)


class Baseline:
    """Synchronous data-parallel training on exactly the batches the simulation's miners draw."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.model = build_model(sim.run.model, sim.run_seed).to(sim.device)
        inner = sim.run.inner
        decay = [p for p in self.model.parameters() if p.dim() >= 2]
        rest = [p for p in self.model.parameters() if p.dim() < 2]
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": inner.weight_decay}, {"params": rest, "weight_decay": 0.0}],
            lr=inner.lr,
            betas=(inner.beta1, inner.beta2),
            eps=inner.eps,
            foreach=False,
        )

    def step(self, round: int, evaluate_after: bool = True) -> RoundStats:
        """H synchronous steps on the round's batches of all miners."""
        sim, inner = self.sim, self.sim.run.inner
        groups = [(a.path, sim.batches(round, a)) for _, a in sorted(sim.assignments(round).items())]
        n_total = sum(b.shape[1] for _, b in groups)
        losses, tokens = [], 0
        params = list(self.model.parameters())
        for s in range(inner.steps):
            for g in self.opt.param_groups:
                g["lr"] = lr_at(inner, round * inner.steps + s)
            self.opt.zero_grad(set_to_none=True)
            merged = _merge_by_path(groups, s)
            loss_sum = 0.0
            total = torch.zeros((), device=sim.device)
            for path, batch in merged:
                ce, tot = lm_loss(self.model, batch.to(sim.device), path)
                total = total + tot * (batch.shape[0] / n_total)
                loss_sum += float(ce.detach()) * batch.shape[0] / n_total
            total.backward()
            if inner.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(params, inner.grad_clip, foreach=False)
            self.opt.step()
            losses.append(loss_sum)
            tokens += n_total * (sim.run.model.seq_len)
        numel = sum(p.numel() for p in params)
        loss = (
            evaluate(self.model, sim.ds, sim.run.model.seq_len, sim.eval_windows)
            if evaluate_after
            else float("nan")
        )
        return RoundStats(round, loss, sum(losses) / len(losses), 4 * numel * inner.steps, 32.0, tokens)


def _merge_by_path(
    groups: list[tuple[tuple[int, ...] | None, Tensor]], step: int
) -> list[tuple[tuple[int, ...] | None, Tensor]]:
    by_path: dict[tuple[int, ...] | None, list[Tensor]] = {}
    for path, b in groups:
        by_path.setdefault(path, []).append(b[step])
    return [(p, torch.cat(bs)) for p, bs in by_path.items()]
