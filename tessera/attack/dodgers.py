"""Miners that dodge an audit: each trains or fakes as it likes and then, in the rounds the seed
draws it for an audit (public once the seed is fixed, after its commit), serves its committee nothing, late,
or a transcript built to pass. ``tessera attack`` runs each against an honest miner
(``tessera.attack.scenarios``); an unanswered audit costs what a caught fake costs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from miner.behaviour import Behaviour, BehaviourContext
from protocol.errors import ProtocolError
from protocol.runspec import RunSpec
from training.digest import part_digests
from training.inner import InnerResult, Transcript, start_state
from training.model import module_params


def audited_reader(coord: Any) -> Callable[[int, str], bool]:
    """Whether the chain's draw audits ``miner`` in ``round`` (public once the seed is fixed), as a miner
    reads it through its coordinator."""

    def audited(round: int, miner: str) -> bool:
        return any(d.audited for d in coord.audit_draws(round, [miner]).values())

    return audited


class WithholdWhenAudited(Behaviour):
    """Trains honestly and serves its update, transcript digests and residuals, but refuses the transcript
    states exactly in the rounds the seed draws it for an audit (public once the seed is fixed, after its
    commit): the cheap way out of an audit of a fake, unless it costs what a caught fake costs.

    ``audited(round, miner)`` reads the round's draw (the chain's ``auditDraw``; None: read through the
    coordinator the node binds, as when started by name in a devnet); a draw it cannot read counts as not
    audited (it serves), so every refusal is of an audit.
    """

    name = "withhold-when-audited"

    def __init__(self, audited: Callable[[int, str], bool] | None = None) -> None:
        self.audited = audited
        self.known: dict[int, bool] = {}
        """Round -> whether it was audited (the draw is fixed with the seed)."""

    def bind(self, spec: Any, coord: Any) -> None:
        """Read the draw through the node's coordinator unless given a reader."""
        if self.audited is None:
            self.audited = audited_reader(coord)

    def serves_state(self, ctx: BehaviourContext) -> bool:
        """No state of an audited round."""
        if self.audited is None:
            return True
        if ctx.round not in self.known:
            try:
                self.known[ctx.round] = bool(self.audited(ctx.round, ctx.miner))
            except ProtocolError:
                return True
        return not self.known[ctx.round]


HANG_S = 60.0
"""Seconds a miner hanging when audited holds a state request before it closes it unanswered: longer than
any fetch's window (the suite's validators give one 5 s, a deployment's 10 s)."""
DRIP_S = 25.0
"""Seconds a miner dripping when audited waits before it serves a state (25 s, as measured):
past the fetch's window, so the committee gets nothing in time, and the bytes come after all."""

Sleep = Callable[[float], None]


class HangWhenAudited(WithholdWhenAudited):
    """Trains honestly and serves its update; when audited, a state request hangs (no answer within any
    fetch's window) instead of a prompt 404 (the hang that retries once made unreportable)."""

    name = "hang-when-audited"

    def __init__(
        self,
        audited: Callable[[int, str], bool] | None = None,
        hang_s: float = HANG_S,
        sleep: Sleep = time.sleep,
    ):
        super().__init__(audited)
        self.hang_s = hang_s
        self.sleep = sleep

    def serves_state(self, ctx: BehaviourContext) -> bool:
        """Serves when not audited; when audited, holds the request ``hang_s`` seconds, then refuses."""
        if super().serves_state(ctx):
            return True
        self.sleep(self.hang_s)
        return False


class DripWhenAudited(WithholdWhenAudited):
    """Trains honestly; when audited, serves each state only after ``delay_s`` seconds (past the window of
    the committee's fetch): the bytes exist and come, too late to finish the audit."""

    name = "drip-when-audited"

    def __init__(
        self,
        audited: Callable[[int, str], bool] | None = None,
        delay_s: float = DRIP_S,
        sleep: Sleep = time.sleep,
    ):
        super().__init__(audited)
        self.delay_s = delay_s
        self.sleep = sleep

    def serves_state(self, ctx: BehaviourContext) -> bool:
        """Serves, after ``delay_s`` seconds when audited."""
        if not super().serves_state(ctx):
            self.sleep(self.delay_s)
        return True


class LastDeltaRider(Behaviour):
    """Trains nothing: each inner step adds ``(theta_r - theta_{r-1}) / H`` to the parameters (the last
    outer step again), moments zero, and the transcript, its digests and the error feedback are built
    from those states, so everything it serves is consistent. The checks that move no state
    pass; only an audit's replay of a step tells it apart (provably). Honest in its first round (no
    theta_{r-1} yet)."""

    name = "free-rider-last-delta"

    def __init__(self, spec: RunSpec | None = None) -> None:
        self.spec = spec
        """The run (H, the transcript interval, the batch shape for the token count); None: the node's."""
        self.previous: dict[str, Tensor] = {}
        """theta_{r-1}: the checkpoint of the last round it saw."""
        self.trained = 0
        """Rounds it trained honestly (its first)."""

    def inner_result(
        self, ctx: BehaviourContext, checkpoint: Mapping[str, Tensor], train: Callable[[], InnerResult]
    ) -> InnerResult:
        """The made-up result (the honest one in its first round)."""
        prev, self.previous = self.previous, {k: v.clone() for k, v in checkpoint.items()}
        if not prev or self.spec is None:
            self.trained += 1
            return train()
        return last_delta_result(self.spec, checkpoint, prev, ctx.modules)

    def bind(self, spec: Any, coord: Any) -> None:
        """Take the node's run file unless given one."""
        if self.spec is None:
            self.spec = spec


def last_delta_result(
    spec: RunSpec,
    checkpoint: Mapping[str, Tensor],
    previous: Mapping[str, Tensor],
    modules: tuple[str, ...],
) -> InnerResult:
    """An inner loop's result with no training: from ``checkpoint`` (theta_r), each of the ``H`` steps adds
    ``(theta_r - previous) / H`` to ``modules``' parameters; moments zero; AdamW's step as if trained;
    the transcript's states every ``transcript_interval`` steps and their digests as the honest loop
    records them."""
    inner = spec.inner
    H, k = inner.steps, inner.transcript_interval
    theta = module_params(checkpoint, modules)
    delta = {n: (t - previous[n]) / H if n in previous else torch.zeros_like(t) for n, t in theta.items()}
    base = start_state(checkpoint, list(theta))
    transcript = Transcript(k)
    final: dict[str, Tensor] = {}
    for step in sorted({*range(0, H, k), H}):
        state = {key: t.clone() for key, t in base.items()}
        state["step"] = torch.tensor(step, dtype=torch.int64)
        state["adam_step"] = torch.tensor(step, dtype=torch.int64)
        for n, t in theta.items():  # step 0 is theta_r bit for bit (the anchor every validator checks)
            state[f"param/{n}"] = t.clone() if step == 0 else (t + step * delta[n]).to(t.dtype)
        transcript.steps.append(step)
        transcript.parts.append(part_digests(state))
        transcript.states[step] = state
        final = state
    params = {n: final[f"param/{n}"] for n in theta}
    carried = {key: t for key, t in final.items() if not key.startswith("param/") and key != "step"}
    tokens = H * inner.batch_size * spec.model.seq_len  # what it claims to have read
    return InnerResult(params, transcript, [0.0] * H, tokens, carried)


class LastDeltaHangWhenAudited(LastDeltaRider):
    """The last-delta rider that also hangs when audited: trains nothing, and holds the audit's state
    requests unanswered (what one retry once turned into no report at all)."""

    name = "free-rider-last-delta-hang"

    def __init__(
        self,
        spec: RunSpec | None = None,
        audited: Callable[[int, str], bool] | None = None,
        hang_s: float = HANG_S,
        sleep: Sleep = time.sleep,
    ) -> None:
        super().__init__(spec)
        self.hang = HangWhenAudited(audited, hang_s, sleep)

    def bind(self, spec: Any, coord: Any) -> None:
        """The run file and the draw, through the node's, unless given."""
        super().bind(spec, coord)
        self.hang.bind(spec, coord)

    def serves_state(self, ctx: BehaviourContext) -> bool:
        """As :class:`HangWhenAudited`."""
        return self.hang.serves_state(ctx)
