"""The miner's memory of its own commitments found on chain (a read saved per step) stays bounded."""

from __future__ import annotations

from types import SimpleNamespace

from miner.connections import MinerConnections
from protocol.wire.commitments import update_commitment

ADDRESS = "0x" + "11" * 20
CONTRACT = "0x" + "22" * 20


def test_a_long_run_keeps_two_rounds_of_commitments_seen() -> None:
    reads: list[int] = []

    def commitments(r: int) -> dict[str, bytes]:
        reads.append(r)
        return {ADDRESS: update_commitment(31337, CONTRACT, r, ADDRESS, bytes([r % 256]) * 32)}

    coord = SimpleNamespace(
        chain_id=31337, contract=CONTRACT, update_commitments=commitments,
        current=lambda max_age=0.0: SimpleNamespace(block=10_000),
    )  # fmt: skip
    conn = SimpleNamespace(coord=coord, address=ADDRESS, commits_seen={})
    for r in range(1, 501):
        assert MinerConnections.chain_has_commit(conn, r, bytes([r % 256]) * 32)  # type: ignore[arg-type]
        assert MinerConnections.chain_has_commit(conn, r, bytes([r % 256]) * 32)  # type: ignore[arg-type]
    assert len(reads) == 500  # the second look of each round cost no read
    assert sorted(k[0] for k in conn.commits_seen) == [499, 500]
