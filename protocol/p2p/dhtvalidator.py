"""The record validator every Tessera DHT node runs: what a stranger may store, and what a reader accepts.

hivemind calls a node's record validator on every record another peer asks it to store (``rpc_store``),
on every record a peer returns to its lookups (``call_find``) and on its own stores. A validator that says
no keeps the value out of the node's storage, or out of the lookup's result: so with this validator a
Tessera node stores and returns only what :func:`check_dht_record` accepts, namely under a round key a
dictionary subkey whose value is a signed node record that

- decodes and verifies (:func:`protocol.wire.records.decode_record`: canonical bytes, fields, URL, lifetime,
  signature), for this node's chain when it knows it;
- is stored under its own round's key (hivemind hands validators the key's hash, so the check is that the
  hash of ``record_key(chain_id, round)`` of the decoded record is the key it arrived under);
- sits under the subkey of its signer's address;
- expires in the DHT no later than its signed ``expires`` (so a replay cannot outlive the record and
  nobody can pin a key for a year: the record's own lifetime is at most a day);
- optionally, is signed by an address in a registered set (:meth:`RecordValidator.set_registered`).

Everything else is refused: regular (non-dictionary) values, which is what hid a whole round before,
forged or replayed values, and any key that is not a round key of a valid record (a Tessera DHT holds
nothing else). hivemind replaces a subkey's value only by one with a later expiration, so a stranger who
cannot forge the signer's signature cannot displace an honest record.

Why registration is optional on storing nodes: a storing node may be a bare bootstrap node with no chain
RPC, and the registered set changes between rounds (a miner registers, then announces): a stale set would
refuse an honest newcomer, which is worse than storing a signed record of an unregistered key (at most
one subkey per key pair per round, at most 4 KiB, at most a day). Readers know the chain and use only
records of registered addresses; a node that follows the chain may pass the set with
:meth:`protocol.p2p.dht.DHTNode.set_registered` to also bound what strangers can add to a round's dictionary.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import msgpack
from hivemind.dht.routing import DHTID
from hivemind.dht.validation import DHTRecord, RecordValidatorBase

from protocol.wire.records import (
    MAX_RECORD_BYTES,
    ExpiredRecordError,
    MalformedRecordError,
    NodeRecord,
    RecordError,
    decode_record,
)

log = logging.getLogger(__name__)

#: Seconds a DHT expiration may exceed the record's ``expires`` (rounding of float DHT times).
EXPIRY_SLACK = 1.0
#: Record bytes whose signature a validator remembers as checked.
VERIFIED_CACHE = 4096
#: msgpack's framing around a record's bytes (a ``bin 16`` header is 3 bytes).
_FRAMING = 8


class UnregisteredSignerError(RecordError):
    """The record's signer is not in the registered set this node was given."""


class DHTPlacementError(RecordError):
    """The record is stored under the wrong key or subkey, or with a DHT expiration past its own."""


def round_key_id(chain_id: int, round: int) -> bytes:
    """The hash hivemind stores ``record_key(chain_id, round)`` under (what a validator sees as the key)."""
    from protocol.p2p.dht import record_key  # protocol.p2p.dht imports this module

    return bytes(DHTID.generate(source=record_key(chain_id, round)).to_bytes())


def _unpack(data: bytes, what: str) -> Any:
    """msgpack without extension types (an ext value comes back as ``ExtType`` and is refused by type)."""
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several types for junk
        raise MalformedRecordError(f"{what} is not msgpack: {type(exc).__name__}") from exc


def check_dht_record(
    record: DHTRecord,
    *,
    chain_id: int | None = None,
    registered: frozenset[str] | None = None,
    now: float | None = None,
    verified: OrderedDict[bytes, NodeRecord] | None = None,
) -> NodeRecord:
    """The node record ``record`` carries if a Tessera node may store or return it, else a :class:`RecordError`.

    ``verified`` (bounded, least recently used first) remembers the record bytes whose signature was
    already checked: a signature costs ~11 ms here and a lookup re-validates every record each peer
    returns, in the DHT's event loop."""
    if len(record.value) > MAX_RECORD_BYTES + _FRAMING:
        raise MalformedRecordError(f"value of {len(record.value)} bytes exceeds a record")
    if len(record.subkey) > 64:
        raise DHTPlacementError("subkey longer than an address")
    subkey = _unpack(record.subkey, "subkey")
    if not isinstance(subkey, str):
        raise DHTPlacementError(f"a round key holds only dictionary subkeys (got {type(subkey).__name__})")
    value = _unpack(record.value, "value")
    if not isinstance(value, bytes):
        raise MalformedRecordError(f"record value must be bytes, got {type(value).__name__}")
    rec = verified.get(value) if verified is not None else None
    t = time.time() if now is None else now
    if rec is None or (chain_id is not None and rec.chain_id != chain_id):
        rec = decode_record(value, now=t, chain_id=chain_id)
        if verified is not None:
            verified[value] = rec
            while len(verified) > VERIFIED_CACHE:
                verified.popitem(last=False)
    else:
        verified.move_to_end(value)  # type: ignore[union-attr]  # rec came from it
        if rec.expires <= t:
            raise ExpiredRecordError(f"record expired at {rec.expires} (now {int(t)})")
    if round_key_id(rec.chain_id, rec.round) != record.key:
        raise DHTPlacementError(f"record of round {rec.round} is not under that round's key")
    if subkey != rec.address:
        raise DHTPlacementError(f"record of {rec.address} under subkey {subkey[:44]!r}")
    if not record.expiration_time <= rec.expires + EXPIRY_SLACK:
        raise DHTPlacementError(
            f"DHT expiration {record.expiration_time:.0f} is past the record's expiry {rec.expires}"
        )
    if registered is not None and rec.address not in registered:
        raise UnregisteredSignerError(f"{rec.address} is not registered")
    return rec


class RecordValidator(RecordValidatorBase):
    """hivemind's hook for :func:`check_dht_record`; refusals are counted by class name, never raised."""

    def __init__(self, chain_id: int | None = None, registered: Iterable[str] | None = None) -> None:
        self.chain_id = chain_id
        self.registered: frozenset[str] | None = None if registered is None else frozenset(registered)
        self.refused: dict[str, int] = {}
        self.accepted = 0
        self._verified: OrderedDict[bytes, NodeRecord] = OrderedDict()

    def set_registered(self, addresses: Iterable[str] | None) -> None:
        """Accept only records signed by ``addresses`` from now on (None: any signer)."""
        self.registered = None if addresses is None else frozenset(addresses)

    def validate(self, record: DHTRecord) -> bool:
        """Whether a Tessera node may store or return ``record`` (see the module docstring)."""
        try:
            check_dht_record(
                record,
                chain_id=self.chain_id,
                registered=self.registered,
                now=time.time(),
                verified=self._verified,
            )
        except Exception as exc:  # RecordError, or anything a stranger's bytes cause: refused, not raised
            name = type(exc).__name__
            self.refused[name] = self.refused.get(name, 0) + 1
            log.debug("DHT record refused: %s: %s", name, exc)
            return False
        self.accepted += 1
        return True

    def merge_with(self, other: RecordValidatorBase) -> bool:
        """Never merged: every other validator is applied beside this one."""
        return False
