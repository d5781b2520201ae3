"""The fault suite's DHT stranger (``tessera.devnet.poison``) against a real Tessera DHT node: every
poisoning store is refused and the honest record stays."""

from __future__ import annotations

from protocol.p2p.dht import DHTConfig, DHTNode
from protocol.wire.records import make_record
from tessera.devnet.poison import poison_round, start_stranger

CHAIN = 31337
KEY = "0x" + "71" * 32


def test_stranger_cannot_displace_or_hide_records() -> None:
    node = DHTNode(DHTConfig(start_timeout=30, chain_id=CHAIN)).start()
    stranger = start_stranger(node.visible_maddrs())
    try:
        honest = make_record(KEY, chain_id=CHAIN, role="validator", round=3, url="http://127.0.0.1:9300")
        node.announce(honest)
        said = poison_round(stranger, CHAIN, 3, [honest.address], [], [honest])
        assert (
            said["regular-value/refused"] == 1 and said["forged/refused"] == 1 and said["replay/refused"] == 1
        )
        found = {r.address: r for r in node.lookup(CHAIN, 3).records}
        assert found[honest.address] == honest
        # the stranger's own records stay out too: the bad URL, and the dead URL stored with a one-year expiry
        assert set(found) == {honest.address}
        assert node.validator_stats()["BadURLError"] >= 1
    finally:
        stranger.shutdown()
        node.shutdown()
