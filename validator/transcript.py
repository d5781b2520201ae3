"""The transcript of an update as the ``recompute`` checks read it: its digests list fetched by the
header's ``transcript.root`` (issue 13), and its states fetched part by part, each checked against its
digest (a state not served, or not the committed one: an unprovable failure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from torch import Tensor

from protocol.wire.update import Update
from protocol.wire.updateerrors import UpdateError
from protocol.wire.updateheader import with_transcript
from training.digest import PARAM_PREFIX, part_digests, state_digest
from validator.context import FetchState, _Fail, unreachable
from validator.stages import Stage


class _States:
    """The transcript's states as a check reads them, fetched part by part (issue 13): a state's
    parameters and the rest are committed apart, each fetched at most once and checked against its
    digest; theta_r's parameters stand for step 0's once they hash to its parameter digest."""

    def __init__(self, update: Update, fetch_state: FetchState) -> None:
        self.pairs = list(update.header.transcript_digests)
        self.steps = list(update.header.transcript_steps)
        self.fetch_state = fetch_state
        self.params: dict[int, dict[str, Tensor]] = {}
        self.full: dict[int, dict[str, Tensor]] = {}

    def _part(self, i: int, which: int, what: str) -> dict[str, Tensor]:
        digest = self.pairs[i][which]
        try:
            part = self.fetch_state("0x" + digest)
        except Exception as exc:
            raise _Fail(
                Stage.RECOMPUTE,
                f"{what} at step {self.steps[i]} not served: {exc}",
                False,
                step=self.steps[i],
                unreachable=unreachable(exc),
            ) from exc
        if state_digest(part).hex() != digest:
            raise _Fail(
                Stage.RECOMPUTE, f"{what} at step {self.steps[i]} does not match the transcript", False
            )
        # the bytes are the committed ones: a part holding the other part's tensors is the miner's, provably
        if any(k.startswith(PARAM_PREFIX) != (which == 0) for k in part):
            raise _Fail(Stage.RECOMPUTE, f"{what} at step {self.steps[i]} holds the wrong tensors", True)
        return part

    def params_of(self, i: int) -> dict[str, Tensor]:
        """The parameters (``param/*``) of the ``i``-th recorded state."""
        if i not in self.params:
            self.params[i] = self._part(i, 0, "parameters")
        return self.params[i]

    def get(self, i: int) -> dict[str, Tensor]:
        """The whole ``i``-th recorded state."""
        if i not in self.full:
            self.full[i] = {**self.params_of(i), **self._part(i, 1, "optimizer state")}
        return self.full[i]

    def matches(self, i: int, state: Mapping[str, Tensor]) -> bool:
        """Whether ``state`` is, bit for bit, the ``i``-th recorded state."""
        p, r = part_digests(state)
        return (p.hex(), r.hex()) == self.pairs[i]


def _fetch_digest_state(fetch_state: FetchState, digest: str, what: str) -> dict[str, Tensor]:
    """A state served by digest, checked against it (not served: an unprovable failure)."""
    try:
        st = fetch_state("0x" + digest)
    except Exception as exc:
        raise _Fail(
            Stage.RECOMPUTE, f"{what} not served: {exc}", False, unreachable=unreachable(exc)
        ) from exc
    if state_digest(st).hex() != digest:
        raise _Fail(Stage.RECOMPUTE, f"{what} does not match its digest", False)
    return st


def _with_transcript(update: Update, fetch_state: FetchState) -> Update:
    """``update`` with its transcript's digests attached: fetched by the header's ``transcript.root`` like a
    state (issue 13). Not served, or not the committed list: an unprovable failure, as for a state."""
    h = update.header
    if len(h.transcript_digests) == len(h.transcript_steps):
        return update
    served = _fetch_digest_state(fetch_state, h.transcript_root, "transcript")
    try:
        return replace(update, header=with_transcript(h, served))
    except UpdateError as exc:
        raise _Fail(Stage.RECOMPUTE, f"transcript: {exc}", False) from exc
