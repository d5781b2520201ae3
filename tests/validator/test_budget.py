"""Issue 10: one slow, restarted or withholding miner must not make a validator miss a phase deadline.

The node passes ``out_of_time`` (has the chain reached the phase's margin?) to the pipeline (``Incoming.out_of_time``), which
asks it before each stage and each replayed segment. Issue 11: an error no stage anticipated stays with
the miner whose input raised it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from protocol.p2p.blobs import BlobNotFoundError, FetchTimeoutError, PeerUnavailableError
from protocol.wire import update as wire
from protocol.wire import updateheader
from protocol.wire.commitments import update_commitment
from tests.support.rounds import CHAIN_ID, CONTRACT, MINERS, Round, make_round
from validator.context import Incoming, Verdict
from validator.errors import NotAnnouncedError
from validator.pipeline import VerificationPipeline
from validator.policy import VerifyPolicy
from validator.stages import Stage


@pytest.fixture(scope="module")
def rnd() -> Round:
    return make_round()


def _verify(
    rnd: Round, miner: str, out_of_time: Callable[[], bool] | None = None, calls: list[str] | None = None
) -> Verdict:
    """Verify ``miner``'s honest update, recording the transcript states fetched in ``calls``."""
    built = rnd.build(miner)
    commitment = update_commitment(CHAIN_ID, CONTRACT, rnd.round, miner, built.digest)
    states: dict[str, Any] = {
        "0x" + d.hex(): built.states[s]
        for s, d in zip(built.transcript_steps, built.transcript_digests, strict=True)
    }
    states.update(rnd.published)

    def fetch_state(digest: str) -> Any:
        if calls is not None:
            calls.append(digest)
        return states[digest]

    incoming = Incoming(
        miner,
        commitment,
        lambda: built.update,
        fetch_state,
        fetch_source=rnd.fetch_source,
        out_of_time=out_of_time,
    )
    return VerificationPipeline(VerifyPolicy()).verify(incoming, rnd.ctx())


def test_a_passed_budget_stops_verification_with_an_unprovable_zero(rnd: Round) -> None:
    calls: list[str] = []
    v = _verify(rnd, MINERS[0], lambda: True, calls)
    assert (v.stage, v.accepted, v.score, v.provable) == ("budget", False, 0, False)
    assert not calls, "no transcript state is fetched once the budget is gone"
    v = _verify(rnd, MINERS[0], lambda: False)  # with time left, the same update is accepted
    assert v.accepted, v.reason


def test_the_budget_is_asked_between_stages_and_segments(rnd: Round) -> None:
    asked = 0

    def out_of_time() -> bool:
        nonlocal asked
        asked += 1
        return asked > 4  # fetch, format, bounds, attestation pass; the budget ends before the replays

    v = _verify(rnd, MINERS[1], out_of_time)
    assert (v.stage, v.score, v.provable) == ("budget", 0, False)
    assert "replayed_steps" not in v.metrics


def test_an_unanticipated_error_scores_that_miner_zero(rnd: Round, monkeypatch: pytest.MonkeyPatch) -> None:
    import validator.pipeline as pipeline

    def boom(*_: object, **__: object) -> None:
        raise KeyError("something no stage anticipated")

    monkeypatch.setattr(pipeline, "score_usefulness", boom)
    v = _verify(rnd, MINERS[0])
    assert (v.stage, v.accepted, v.score, v.provable) == ("error", False, 0, False)
    assert "KeyError" in v.reason


@pytest.mark.parametrize(
    ("error", "unreachable"),
    [
        (BlobNotFoundError("404: not served here"), False),  # a running miner that withholds: final
        (PeerUnavailableError("connection refused"), True),  # down or restarting: waited for
        (PeerUnavailableError("HTTP 503: restoring the round after a start"), True),
        (FetchTimeoutError("no complete answer"), True),
        (NotAnnouncedError("no record for the round yet"), True),
    ],
)
def test_only_an_unreachable_miner_is_marked_for_a_retry(
    rnd: Round, error: Exception, unreachable: bool
) -> None:
    """The node retries a failed fetch within the withholding grace only when the verdict says the miner
    could not be reached; a miner that answers without the bytes is scored 0 at once (issue 10)."""
    built = rnd.build(MINERS[1])
    commitment = update_commitment(CHAIN_ID, CONTRACT, rnd.round, MINERS[1], built.digest)

    withheld = {"0x" + d.hex() for pair in built.transcript_parts for d in pair}  # the states' parts

    def fetch_state(digest: str) -> Any:
        if digest in rnd.published and digest not in withheld:
            return rnd.published[digest]
        raise error

    def fetch_update() -> bytes:
        raise error

    pipeline = VerificationPipeline(VerifyPolicy())
    v = pipeline.verify(
        Incoming(MINERS[1], commitment, lambda: built.update, fetch_state, fetch_source=rnd.fetch_source),
        rnd.ctx(),
    )
    assert (v.stage, v.accepted, v.provable) == ("recompute", False, False), v.reason
    assert v.evidence.get("unreachable") is unreachable
    v = pipeline.verify(
        Incoming(MINERS[1], commitment, fetch_update, fetch_state, fetch_source=rnd.fetch_source), rnd.ctx()
    )
    assert (v.stage, v.accepted, v.provable) == ("fetch", False, False), v.reason
    assert v.evidence.get("unreachable") is unreachable
    assert Stage(v.stage).retryable(v.provable)


def test_the_anchor_costs_no_fetch_and_the_final_state_only_its_parameters(rnd: Round) -> None:
    """Issue 13: a transcript step commits to its parameters and the rest apart; theta_r's parameters hash
    to step 0's parameter digest (nothing fetched), and the final check fetches the final parameters
    alone. A step-0 parameter digest other than theta_r's is refused provably, with nothing fetched."""
    built = rnd.build(MINERS[0])
    commitment = update_commitment(CHAIN_ID, CONTRACT, rnd.round, MINERS[0], built.digest)
    policy = VerifyPolicy(segments_per_miner=0)  # the anchor and final checks only
    calls: list[str] = []

    def fetch_state(digest: str) -> Any:
        calls.append(digest)
        return rnd.published[digest]

    v = VerificationPipeline(policy).verify(
        Incoming(MINERS[0], commitment, lambda: built.update, fetch_state, fetch_source=rnd.fetch_source),
        rnd.ctx(),
    )
    assert v.accepted, v.reason
    ph = built.transcript_parts[-1][0]
    root = "0x" + updateheader.transcript_root(built.transcript_parts)
    assert calls == [root, "0x" + ph.hex()], "the transcript, then the final parameters: nothing else"

    other = rnd.build(MINERS[1])  # a transcript that starts elsewhere: MINERS[1]'s, under MINERS[0]'s name
    forged = wire.decode_update(built.update)
    pairs = list(other.transcript_parts)
    pairs[0] = (b"\x01" * 32, pairs[0][1])
    header = replace(forged.header, transcript_root=updateheader.transcript_root(pairs))
    data = wire.encode_update(wire.Update(header, forged.tensors))
    rnd.published["0x" + header.transcript_root] = updateheader.transcript_tensors(pairs)
    calls.clear()
    forged_commitment = update_commitment(CHAIN_ID, CONTRACT, rnd.round, MINERS[0], wire.update_digest(data))
    v = VerificationPipeline(policy).verify(
        Incoming(MINERS[0], forged_commitment, lambda: data, fetch_state, fetch_source=rnd.fetch_source),
        rnd.ctx(),
    )
    assert (v.accepted, v.provable) == (False, True)
    assert "does not start at the checkpoint" in v.reason
    assert calls == ["0x" + header.transcript_root]
