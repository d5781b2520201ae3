"""A plain hivemind client (no key, no stake) cannot poison Tessera's DHT (issue 11's reproducers).

Two Tessera DHT nodes and a stranger's bare ``hivemind.DHT`` (no validator: it stores anything) on
127.0.0.1. Before the record validator, (a) the stranger's non-dictionary value with a one-year expiry
over a round key hid every record of that round and made every announce fail, and (b) a forged value with a
later expiry under an honest subkey replaced the honest record and made the honest re-announce fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgpack
import pytest

from protocol.p2p.dht import DHTConfig, DHTError, DHTNode, record_key
from protocol.p2p.dhtvalidator import (
    DHTPlacementError,
    RecordValidator,
    UnregisteredSignerError,
    check_dht_record,
    round_key_id,
)
from protocol.wire.records import BadSignatureError, MalformedRecordError, NodeRecord, make_record

CHAIN = 31337
KEY_A = "0x" + "31" * 32
KEY_B = "0x" + "32" * 32
YEAR = 365 * 24 * 3600.0


@pytest.fixture(scope="module")
def net() -> Iterator[tuple[DHTNode, DHTNode, Any]]:
    import hivemind

    a = DHTNode(DHTConfig(start_timeout=30, chain_id=CHAIN)).start()
    b = DHTNode(DHTConfig(initial_peers=tuple(a.visible_maddrs()), start_timeout=30, chain_id=CHAIN)).start()
    stranger = hivemind.DHT(
        initial_peers=a.visible_maddrs(), host_maddrs=["/ip4/127.0.0.1/tcp/0"], start=True
    )
    yield a, b, stranger
    stranger.shutdown()
    b.shutdown()
    a.shutdown()


def _record(key: str, round: int, url: str = "http://127.0.0.1:9000", ttl: int = 600) -> NodeRecord:
    return make_record(key, chain_id=CHAIN, role="miner", round=round, url=url, ttl=ttl)


def test_a_stranger_cannot_hide_a_round_with_a_regular_value(net: tuple[DHTNode, DHTNode, Any]) -> None:
    a, b, stranger = net
    from hivemind.utils import get_dht_time

    stranger.store(record_key(CHAIN, 40), b"not a dictionary", get_dht_time() + YEAR)
    rec = _record(KEY_A, 40)
    a.announce(rec)  # raised DHTError before: the year-long regular value outranked the subkey
    for reader in (a, b):
        res = reader.lookup(CHAIN, 40)
        assert res.records == [rec], res.refused
    assert b.validator_stats().get(DHTPlacementError.__name__, 0) >= 1


def test_forged_and_replayed_values_do_not_displace_an_honest_record(
    net: tuple[DHTNode, DHTNode, Any],
) -> None:
    a, b, stranger = net
    from hivemind.utils import get_dht_time

    key = record_key(CHAIN, 41)
    honest = _record(KEY_B, 41)
    b.announce(honest)
    forged = NodeRecord(**{**honest.__dict__, "url": "http://127.0.0.1:6666"})
    stranger.store(key, forged.encode(), get_dht_time() + YEAR, subkey=honest.address)
    stranger.store(key, honest.encode(), get_dht_time() + YEAR, subkey=honest.address)  # replay, outliving it
    for reader in (a, b):
        assert reader.lookup(CHAIN, 41).records == [honest]
    again = _record(KEY_B, 41, url="http://127.0.0.1:9100", ttl=900)
    b.announce(again)  # raised DHTError before: the forged value's later expiry won
    for reader in (a, b):
        assert reader.lookup(CHAIN, 41).records == [again]


def test_registered_set_bounds_what_a_node_stores() -> None:
    node = DHTNode(DHTConfig(start_timeout=30, chain_id=CHAIN)).start()
    try:
        mine = _record(KEY_A, 42)
        theirs = _record(KEY_B, 42)
        node.set_registered([mine.address])
        node.announce(mine)
        with pytest.raises(DHTError):
            node.announce(theirs)
        assert node.lookup(CHAIN, 42).records == [mine]
        assert node.validator_stats()[UnregisteredSignerError.__name__] >= 1
        node.set_registered(None)
        node.announce(theirs)
        assert {r.address for r in node.lookup(CHAIN, 42).records} == {mine.address, theirs.address}
    finally:
        node.shutdown()


# -- the validator's rules, without a network ---------------------------------------------------------------
_OWN = object()


def _dht_record(
    rec: NodeRecord, *, subkey: Any = _OWN, expiration: float | None = None, key: bytes | None = None
) -> Any:
    from hivemind.dht.validation import DHTRecord

    return DHTRecord(
        key=round_key_id(rec.chain_id, rec.round) if key is None else key,
        subkey=msgpack.packb(rec.address if subkey is _OWN else subkey, use_bin_type=True),
        value=msgpack.packb(rec.encode(), use_bin_type=True),
        expiration_time=float(rec.expires) if expiration is None else expiration,
    )


def test_rules() -> None:
    rec = _record(KEY_A, 43)
    assert check_dht_record(_dht_record(rec), chain_id=CHAIN) == rec
    bad: list[tuple[Any, type[Exception]]] = [
        (_dht_record(rec, key=round_key_id(CHAIN, 44)), DHTPlacementError),
        (_dht_record(rec, subkey=_record(KEY_B, 43).address), DHTPlacementError),
        (_dht_record(rec, subkey=None), DHTPlacementError),  # a regular (non-dictionary) value
        (_dht_record(rec, expiration=rec.expires + YEAR), DHTPlacementError),
    ]
    for record, err in bad:
        with pytest.raises(err):
            check_dht_record(record, chain_id=CHAIN)
    with pytest.raises(MalformedRecordError):
        check_dht_record(_dht_record(rec), chain_id=CHAIN + 1)
    with pytest.raises(UnregisteredSignerError):
        check_dht_record(_dht_record(rec), registered=frozenset())
    forged = NodeRecord(**{**rec.__dict__, "url": "http://127.0.0.1:6666"})
    with pytest.raises(BadSignatureError):
        check_dht_record(_dht_record(forged))
    ext = _dht_record(rec)
    v = RecordValidator(CHAIN)
    for value in (msgpack.packb(msgpack.ExtType(1, b"x")), b"\xc1", msgpack.packb("str"), b"\x00" * 9000):
        assert not v.validate(type(ext)(ext.key, ext.subkey, value, ext.expiration_time))
    assert v.validate(ext) and v.accepted == 1 and sum(v.refused.values()) == 4
