"""Issue 13: a validator moves only the bytes a check needs.

The update's header commits to its transcript by a root; the per-step digests are fetched apart, once. A
replayed segment's end state is fetched only when the replay is not bit-identical (another platform's
rounding); the residual after the update only when the recomputed one does not hash to the committed
digest, and a recomputed residual is kept for the next round's error-feedback source."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import torch
from torch import Tensor

from protocol.wire import update as wire
from protocol.wire import updateerrors, updateheader
from protocol.wire.commitments import update_commitment
from protocol.wire.tensorblob import tensors_digest
from tests.support.rounds import CHAIN_ID, CONTRACT, MINERS, Round, make_round
from validator.context import Incoming, Verdict
from validator.pipeline import VerificationPipeline
from validator.policy import VerifyPolicy


@pytest.fixture(scope="module")
def rnd() -> Round:
    return make_round()


def _run(
    rnd: Round,
    miner: str,
    serve: Mapping[str, Mapping[str, Tensor]] | None = None,
) -> tuple[Verdict, list[str], dict[str, Mapping[str, Tensor]], Any]:
    """Verify ``miner``'s honest update; the digests fetched, the residuals kept, and the build."""
    built = rnd.build(miner)
    states: dict[str, Mapping[str, Tensor]] = {**rnd.published, **(serve or {})}
    calls: list[str] = []
    kept: dict[str, Mapping[str, Tensor]] = {}

    def fetch_state(digest: str) -> dict[str, Tensor]:
        calls.append(digest)
        return {k: v.clone() for k, v in states[digest].items()}

    commitment = update_commitment(CHAIN_ID, CONTRACT, rnd.round, miner, built.digest)
    incoming = Incoming(
        miner, commitment, lambda: built.update, fetch_state,
        fetch_source=rnd.fetch_source, keep_residual=kept.__setitem__,
    )  # fmt: skip
    verdict = VerificationPipeline(VerifyPolicy()).verify(incoming, rnd.ctx())
    return verdict, calls, kept, built


def test_the_wire_header_carries_the_transcript_root_and_not_its_digests(rnd: Round) -> None:
    built = rnd.build(MINERS[0])
    header = wire.decode_update(built.update).header
    assert header.transcript_digests == ()
    assert header.transcript_root == updateheader.transcript_root(built.transcript_parts)
    assert built.transcript_parts[0][0].hex() not in built.update.hex()  # no digest travels in the message
    attached = updateheader.with_transcript(header, built.transcript())
    assert attached.transcript_digests == tuple((p.hex(), r.hex()) for p, r in built.transcript_parts)


def test_a_transcript_other_than_the_committed_one_is_refused(rnd: Round) -> None:
    built = rnd.build(MINERS[0])
    header = wire.decode_update(built.update).header
    rows = built.transcript()[updateheader.TRANSCRIPT_TENSOR]
    swapped = rows.clone()
    swapped[[0, 1]] = rows[[1, 0]]
    bad = {
        "reordered": {updateheader.TRANSCRIPT_TENSOR: swapped},
        "one step short": {updateheader.TRANSCRIPT_TENSOR: rows[:-1].clone()},
        "wrong dtype": {updateheader.TRANSCRIPT_TENSOR: rows.to(torch.int16)},
        "an extra tensor": {**built.transcript(), "x": torch.zeros(1)},
    }
    for why, tensors in bad.items():
        with pytest.raises(updateerrors.TranscriptMismatch):
            updateheader.with_transcript(header, tensors)
        assert why


def test_bit_identical_replays_and_residuals_are_not_fetched(rnd: Round) -> None:
    v, calls, kept, built = _run(rnd, MINERS[0])
    assert v.accepted, v.reason
    root = "0x" + updateheader.transcript_root(built.transcript_parts)
    assert calls.count(root) == 1, "the transcript is fetched once"
    assert len(calls) == len(set(calls)), "each part is fetched at most once"
    replayed = [built.transcript_steps.index(s) for s in v.evidence["segments"]]
    assert replayed, "the default policy replays segments"
    last = len(built.transcript_steps) - 1
    step0_params = "0x" + built.transcript_parts[0][0].hex()
    # a start that the previous replay reached bit for bit, and the final state when the last segment was
    # replayed, come from the replay, not the wire (issue 26)
    fresh = [i for i in replayed if i - 1 not in replayed]
    starts = set().union(*(built.state_parts(i) for i in fresh)) - {step0_params}
    final_params = set() if last - 1 in replayed else {"0x" + built.transcript_parts[last][0].hex()}
    assert set(calls) == {root} | final_params | starts, "the transcript, the final parameters, the starts"
    assert step0_params not in calls, "theta_r stands for step 0's parameters"
    assert "0x" + built.ef_after.hex() not in calls
    assert list(kept) == ["0x" + built.ef_after.hex()]
    got = kept["0x" + built.ef_after.hex()]
    assert tensors_digest(got) == "0x" + built.ef_after.hex()
    assert v.metrics["ef_after_rel_err"] == 0.0


def test_a_replay_that_differs_in_rounding_fetches_the_end_state_and_passes(
    rnd: Round, monkeypatch: pytest.MonkeyPatch
) -> None:
    import validator.recompute as replay

    real = replay.replay_segment

    def other_platform(*args: Any, **kwargs: Any) -> dict[str, Tensor]:
        got = real(*args, **kwargs)  # one ulp on every parameter: another platform's rounding
        return {k: torch.nextafter(v, v + 1) if k.startswith("param/") else v for k, v in got.items()}

    monkeypatch.setattr(replay, "replay_segment", other_platform)
    v, calls, _, built = _run(rnd, MINERS[1])
    assert v.accepted, v.reason
    for s in v.evidence["segments"]:
        assert set(built.state_parts(built.transcript_steps.index(s) + 1)) <= set(calls)
    assert v.metrics["replay_param_rel_diff"] > 0
