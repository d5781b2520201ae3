"""The miner's inner loop (H AdamW steps on its modules) and the transcript validators spot-check.

Determinism: given (checkpoint, assignment, batches, round index, configs, the step-0 state) the loop is
a fixed sequence of torch ops (``torch.optim.AdamW``: the single-tensor path on the CPU, the multi-tensor
``foreach`` path on a GPU, where one kernel per op over every trained tensor replaces one per tensor; its
moments start fresh or carried from the miner's previous round), learning rate
``lr_at(global_step)``, gradient clipping over the trained parameters, no dropout. Frozen modules take
part in the forward pass but are never updated. On one platform and torch build, a replay is
bit-identical; across platforms, compare with :data:`REPLAY_REL_TOL`.

Device: the loop and the replay compute on the ``device`` they are given (``training.device``; the model,
the batches and AdamW's moments live there) and return every tensor on the CPU in fp32, so transcript
states, digests and updates do not depend on where they were computed. On a GPU the recorded states are
copied to pinned host memory without waiting (``non_blocking``) and digested by a helper thread once a
CUDA event says the copy is done, so neither the copy nor SHA-256 stalls the steps; the bytes digested are
the same.

Transcript: the *state* at inner step s is the trained parameters plus AdamW's moments and step counts,
named ``param/<name>``, ``exp_avg/<name>``, ``exp_avg_sq/<name>``, ``step`` (s) and ``adam_step`` (AdamW's
own count, which includes steps carried from earlier rounds). The transcript holds
``part_digests(state)`` (the digest of the parameters and of the rest) at s = 0, k, 2k, ... and at s = H,
and (if asked) the states themselves, which
the miner serves so a validator can :func:`replay_segment` from s to the next recorded step and compare.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import torch
from torch import Tensor

from training.assignment import Assignment
from training.config import InnerConfig, ModelConfig
from training.errors import ModuleIdError, ReplayError
from training.model import TesseraModel, build_model, lm_loss, load_params, model_holding, module_params
from training.snapshots import capture, capture_async, digest_future, on_gpu, restore

#: Where the inner loop computes (a ``torch.device`` or its name: ``cpu``, ``cuda``, ``cuda:N``).
Device = torch.device | str

REPLAY_REL_TOL = 1e-4
"""Default tolerance of :func:`states_close`: every tensor of a replayed state must satisfy
``||a - b||_2 <= REPLAY_REL_TOL * max(||b||_2, 1e-12)`` (the same platform gives 0). The validator uses its
own, calibrated across platforms (``validator.config``: 1e-4 for parameters, 1e-3 for AdamW moments)."""


def lr_at(cfg: InnerConfig, global_step: int) -> float:
    """Inner learning rate at a global step: linear warm-up, then cosine decay to ``min_lr_ratio * lr``."""
    if global_step < cfg.warmup_steps:
        return cfg.lr * (global_step + 1) / cfg.warmup_steps
    span = max(1, cfg.total_steps - cfg.warmup_steps)
    t = min(1.0, (global_step - cfg.warmup_steps) / span)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


@dataclass
class Transcript:
    """State digests every k inner steps (and optionally the states) of one miner's round: per recorded
    step the digest of its parameters and of the rest (one pass over the state's bytes)."""

    interval: int
    """k."""
    steps: list[int] = field(default_factory=list)
    """Inner steps at which the state was recorded (0, k, 2k, ..., H)."""
    parts: list[tuple[bytes, bytes]] = field(default_factory=list)
    """``part_digests`` of the state at each recorded step: (parameters, the rest), what the update commits
    to, so that a check reading parameters only fetches them alone."""
    states: dict[int, dict[str, Tensor]] = field(default_factory=dict)
    """The recorded states by step (empty unless ``keep_states``)."""

    def segment_end(self, start: int) -> int:
        """The recorded step after ``start``."""
        i = self.steps.index(start)
        if i + 1 >= len(self.steps):
            raise ReplayError(f"no recorded step after {start}")
        return self.steps[i + 1]


@dataclass
class InnerResult:
    """What the inner loop returns."""

    params: dict[str, Tensor]
    """theta_local of the trained modules (detached CPU copies; with ``keep_states`` the same tensors as
    the transcript's state at H, so neither may be changed in place)."""
    transcript: Transcript
    """Digests (and states) every k steps."""
    losses: list[float]
    """Training loss (cross-entropy, without aux) of each step."""
    tokens: int
    """Tokens consumed (steps * batch * seq)."""
    optimizer_state: dict[str, Tensor]
    """AdamW's moments and ``adam_step`` after the last step, to carry into the next round."""


def _optimizer(cfg: InnerConfig, params: dict[str, torch.nn.Parameter]) -> torch.optim.AdamW:
    decay = [p for n, p in params.items() if p.dim() >= 2]
    no_decay = [p for n, p in params.items() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        [g for g in groups if g["params"]],
        lr=cfg.lr,
        betas=(cfg.beta1, cfg.beta2),
        eps=cfg.eps,
        # the CPU keeps the single-tensor path its golden transcripts were made with; a GPU launches one
        # kernel per op over all tensors instead of one per tensor (the same elementwise math)
        foreach=on_gpu(params),
    )


def start_state(
    checkpoint: Mapping[str, Tensor], trained: list[str], carried: Mapping[str, Tensor] | None = None
) -> dict[str, Tensor]:
    """The state at inner step 0: the checkpoint's trained parameters and AdamW moments.

    ``carried`` is the miner's optimizer state from an earlier round (``InnerResult.optimizer_state``):
    its ``adam_step`` and the moments of the parameters it has; other parameters start with zero
    moments. Without it the optimizer starts fresh (``adam_step`` 0). A validator checks that the
    ``param/*`` entries of a served step-0 state equal theta_r; the moments are the miner's choice.
    """
    adam_step = int(carried["adam_step"]) if carried is not None else 0
    state: dict[str, Tensor] = {
        "step": torch.tensor(0, dtype=torch.int64),
        "adam_step": torch.tensor(adam_step, dtype=torch.int64),
    }
    for name in trained:
        p = checkpoint[name]
        state[f"param/{name}"] = p.detach().clone()
        for kind in ("exp_avg", "exp_avg_sq"):
            key = f"{kind}/{name}"
            c = carried.get(key) if carried is not None else None
            state[key] = c.clone() if c is not None and c.shape == p.shape else torch.zeros_like(p)
    return state


def _is_capture(
    state: Mapping[str, Tensor], params: dict[str, torch.nn.Parameter], adam_step: int, carried: bool
) -> bool:
    """Whether ``start_state``'s output, once restored, is bit for bit what :func:`capture` would return
    at step 0 (so the loop keeps it, not a second copy): the parameters' dtypes are the model's, and its
    moments are the ones restored (only when ``adam_step > 0``; else zeros in the parameters' dtype)."""
    if any(state[f"param/{n}"].dtype != p.dtype for n, p in params.items()):
        return False
    return adam_step > 0 or not carried


def _setup(
    model_cfg: ModelConfig,
    inner_cfg: InnerConfig,
    checkpoint: Mapping[str, Tensor],
    assignment: Assignment,
    model: TesseraModel | None,
    device: Device,
) -> tuple[TesseraModel, dict[str, torch.nn.Parameter], torch.optim.AdamW]:
    dev = torch.device(device)
    if model is None:
        try:  # every parameter from the checkpoint: no initialisation to draw
            model = model_holding(model_cfg, checkpoint, dev)
        except ModuleIdError:  # a partial checkpoint: the rest keeps theta_0's initialisation
            model = build_model(model_cfg)
    if next(model.parameters()).device != dev:
        model.to(dev)
    load_params(model, checkpoint)
    trained = set(module_params(dict(model.named_parameters()), assignment.module_ids))
    params: dict[str, torch.nn.Parameter] = {}
    for name, p in model.named_parameters():
        p.requires_grad_(name in trained)
        if name in trained:
            params[name] = p
    model.train()
    return model, params, _optimizer(inner_cfg, params)


@dataclass(frozen=True)
class Segment:
    """Inner steps ``first``..``last`` of one miner's round: what :func:`_steps` runs."""

    inner_cfg: InnerConfig
    """The inner loop's config (H, schedule, clipping, transcript interval)."""
    assignment: Assignment
    """The miner's assignment (its DiPaCo path, if any, routes the forward pass)."""
    batches: Tensor
    """The round's batches ``[H, B, T+1]`` on the CPU (step ``s`` trains on ``batches[s]``)."""
    first: int
    """First inner step run."""
    last: int
    """Inner step after the last one run."""
    round: int
    """Outer round (with the step, the learning rate's global step)."""
    adam_offset: int
    """AdamW's own step count minus the inner step (steps carried from earlier rounds)."""


@dataclass(frozen=True)
class Recording:
    """Where :func:`_steps` records the transcript's states."""

    transcript: Transcript
    """The transcript the recorded steps and digests are appended to."""
    keep_states: bool = False
    """Keep every recorded state (else only the state at H, the loop's result)."""
    pool: ThreadPoolExecutor | None = None
    """The helper thread that digests copied states while the next steps run."""


def _steps(
    model: TesseraModel,
    params: dict[str, torch.nn.Parameter],
    opt: torch.optim.AdamW,
    seg: Segment,
    rec: Recording | None = None,
) -> list[float]:
    """The inner steps of ``seg``; with ``rec``, the recorded states' digests are appended to its
    transcript (a copied state's in its pool, while the next steps run; live views, on the CPU, here)."""
    inner_cfg, assignment, first, last, round = seg.inner_cfg, seg.assignment, seg.first, seg.last, seg.round
    transcript, keep_states, pool = (
        (rec.transcript, rec.keep_states, rec.pool) if rec else (None, False, None)
    )
    adam_offset = seg.adam_offset
    losses: list[Tensor] = []
    plist = list(params.values())
    digests: list[Future[tuple[bytes, bytes]]] = []
    dev = next(model.parameters()).device
    gpu = dev.type == "cuda"
    # one copy up front, not a synchronous one per step (on the CPU: a view)
    on_dev = seg.batches[first:last].to(dev)
    for s in range(first, last):
        lr = lr_at(inner_cfg, round * inner_cfg.steps + s)
        for g in opt.param_groups:
            g["lr"] = lr
        ce, total = lm_loss(model, on_dev[s - first], assignment.path)
        opt.zero_grad(set_to_none=True)
        total.backward()
        # An expert that routed no token this step has no gradient, and AdamW would skip it: its own step
        # count would then drift from the transcript's single ``adam_step`` and no replay could match.
        # A zero gradient keeps every trained parameter on the same AdamW clock.
        for p in plist:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if inner_cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(plist, inner_cfg.grad_clip, foreach=gpu)
        opt.step()
        losses.append(ce.detach())
        done = s + 1
        if transcript is not None and (done % inner_cfg.transcript_interval == 0 or done == inner_cfg.steps):
            # the state at H is the loop's result too: one copy serves both (train_inner drops the others
            # unless keep_states)
            copy = keep_states or done == inner_cfg.steps
            transcript.steps.append(done)
            if gpu:  # always a copy (pinned, not waited for): digested in the pool once it has landed
                state, landed = capture_async(params, opt, done, adam_offset + done)
                digests.append(digest_future(state, pool, landed))
            else:
                state = capture(params, opt, done, adam_offset + done, copy=copy)
                digests.append(digest_future(state, pool if copy else None))
            if copy:
                transcript.states[done] = state
    if transcript is not None:
        transcript.parts.extend(d.result() for d in digests)
    return torch.stack(losses).tolist() if losses else []


def train_inner(
    model_cfg: ModelConfig,
    inner_cfg: InnerConfig,
    checkpoint: Mapping[str, Tensor],
    assignment: Assignment,
    batches: Tensor,
    round: int,
    keep_states: bool = False,
    model: TesseraModel | None = None,
    optimizer_state: Mapping[str, Tensor] | None = None,
    device: Device = "cpu",
) -> InnerResult:
    """Run ``inner_cfg.steps`` AdamW steps on the assigned modules from ``checkpoint`` (all parameters).

    ``batches`` is ``[H, B, T+1]`` (see ``training.data.miner_batches``); ``model`` may be passed to reuse
    its storage (its parameters are overwritten with the checkpoint); ``optimizer_state`` carries AdamW's
    moments from the miner's previous round (see :func:`start_state`); ``device`` is where it computes
    (``training.device``); inputs and results are CPU tensors.
    """
    if batches.shape[0] < inner_cfg.steps:
        raise ReplayError(f"need {inner_cfg.steps} batches, got {batches.shape[0]}")
    model, params, opt = _setup(model_cfg, inner_cfg, checkpoint, assignment, model, device)
    state0 = start_state(checkpoint, list(params), optimizer_state)
    _, adam_offset = restore(params, opt, state0)
    if not _is_capture(state0, params, adam_offset, optimizer_state is not None):
        state0 = capture(params, opt, 0, adam_offset)  # a copy: it is digested while the steps run
    transcript = Transcript(inner_cfg.transcript_interval)
    transcript.steps.append(0)
    if keep_states:
        transcript.states[0] = state0
    # state0 and the kept states are copies no step touches: their digests overlap the next steps
    with ThreadPoolExecutor(max_workers=1) as pool:
        digests0 = digest_future(state0, pool)
        seg = Segment(inner_cfg, assignment, batches, 0, inner_cfg.steps, round, adam_offset)
        losses = _steps(model, params, opt, seg, Recording(transcript, keep_states, pool))
        transcript.parts.insert(0, digests0.result())
    # the state at H was captured as a copy (and digested) by the last step: the result shares its tensors
    final = transcript.states.get(inner_cfg.steps)
    if not keep_states:
        transcript.states.clear()
    if final is None:
        final = capture(params, opt, inner_cfg.steps, adam_offset + inner_cfg.steps)
    out = {n: final[f"param/{n}"] for n in params}
    carried = {k: v for k, v in final.items() if not k.startswith("param/") and k != "step"}
    tokens = inner_cfg.steps * batches.shape[1] * (batches.shape[2] - 1)
    return InnerResult(out, transcript, losses, tokens, carried)


def replay_segment(
    model_cfg: ModelConfig,
    inner_cfg: InnerConfig,
    checkpoint: Mapping[str, Tensor],
    assignment: Assignment,
    batches: Tensor,
    round: int,
    state: Mapping[str, Tensor],
    end_step: int,
    model: TesseraModel | None = None,
    device: Device = "cpu",
) -> dict[str, Tensor]:
    """Recompute the transcript state at ``end_step`` from the served state at its ``step``.

    A validator calls it with the round's checkpoint, the miner's assignment and batches (which it
    recomputes), a served start state whose digest is in the transcript, and the next recorded step; it
    then checks ``part_digests(result)`` against the transcript (or :func:`states_close` across platforms).
    ``device`` is where it computes; the result is on the CPU.
    """
    model, params, opt = _setup(model_cfg, inner_cfg, checkpoint, assignment, model, device)
    start, adam_step = restore(params, opt, state)
    if not 0 <= start < end_step <= inner_cfg.steps:
        raise ReplayError(f"bad segment {start}..{end_step} for H={inner_cfg.steps}")
    offset = adam_step - start
    _steps(model, params, opt, Segment(inner_cfg, assignment, batches, start, end_step, round, offset))
    return capture(params, opt, end_step, offset + end_step)


def states_close(a: Mapping[str, Tensor], b: Mapping[str, Tensor], rel_tol: float = REPLAY_REL_TOL) -> bool:
    """Whether two states have the same names and shapes and every tensor is within ``rel_tol`` (L2)."""
    if set(a) != set(b):
        return False
    for k in a:
        x, y = a[k].double(), b[k].double()
        if x.shape != y.shape:
            return False
        if torch.linalg.vector_norm(x - y) > rel_tol * max(float(torch.linalg.vector_norm(y)), 1e-12):
            return False
    return True


def is_start_state(state: Mapping[str, Tensor], checkpoint: Mapping[str, Tensor], fresh: bool = True) -> bool:
    """Whether a served step-0 state starts from ``checkpoint`` (and, if ``fresh``, from zero moments).

    A validator calls it before replaying segment 0..k: the parameters must equal theta_r bit for bit;
    with ``carry_optimizer=False`` the moments and ``adam_step`` must be zero too.
    """
    if int(state.get("step", torch.tensor(-1))) != 0:
        return False
    for key, t in state.items():
        kind, _, name = key.partition("/")
        if kind == "param" and (name not in checkpoint or not torch.equal(t, checkpoint[name])):
            return False
        if fresh and kind in ("exp_avg", "exp_avg_sq") and bool(t.any()):
            return False
    return not fresh or int(state.get("adam_step", torch.tensor(-1))) == 0
