"""Issue 10: a miner that has just (re)started answers a transcript request it cannot serve yet with 503 and
``Retry-After`` (retry), not 404 (final), and validators' fetches read that as "unreachable"."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from miner.state import MinerRoundRecord
from protocol.p2p.blobs import BlobNotFoundError, PeerUnavailableError
from protocol.p2p.transfer import FetchPolicy, fetch_blob
from tests.support.bare_miner import start_bare_miner
from validator.context import unreachable

KEY = "0x" + f"{51:064x}"
DIGEST = "0x" + "5a" * 32  # a transcript state this miner does not have


def test_a_miner_answers_503_until_its_first_step_then_404(tmp_path: Path) -> None:
    m = start_bare_miner(tmp_path, KEY)
    policy = FetchPolicy(timeout=5, attempts=1)
    try:
        resp = httpx.get(f"{m.url}/blobs/{DIGEST}", timeout=5)
        assert resp.status_code == 503, resp.text
        assert resp.headers["retry-after"] == "1"
        with pytest.raises(PeerUnavailableError) as exc:
            fetch_blob(m.url, DIGEST, policy=policy)
        assert unreachable(exc.value), "a starting miner is waited for within the grace"

        # a round this process already served (so the step has no training to do), then one look at the chain
        m.state.prepare(1, MinerRoundRecord(assign_seed="00" * 32, registry=[m.address]), {})
        m.state.set_status(1, "served")
        m.step()  # the node has looked at the chain: what it does not serve now, it does not have
        assert httpx.get(f"{m.url}/blobs/{DIGEST}", timeout=5).status_code == 404
        with pytest.raises(BlobNotFoundError) as nf:
            fetch_blob(m.url, DIGEST, policy=policy)
        assert not unreachable(nf.value), "a running miner's 404 is final"
    finally:
        m.stop()
