"""A stranger poisoning a devnet's discovery (the ``poison-dht`` fault scenario).

The stranger has no key the chain knows and no stake: it runs a plain ``hivemind.DHT`` (no record
validator, so its own node stores anything) joined to the devnet's bootstrap peer, and a fresh Ethereum
key. Against each round key it stores, with a one-year expiry:

- a non-dictionary value over the round key (before fix this hid the whole round and made
  every announce fail);
- under every honest node's subkey, a forged record (the node's last record with another URL, so the
  signature no longer holds) and a replay of the node's real record (so it would outlive it);
- under its own subkey, a record it signed with a bad URL (``http://127.0.0.1:abc``, which crashed a
  miner's fetch before) and one with a well-formed but dead URL, both announcing the checkpoint digests
  the honest validators serve; the bad-URL record is also pushed to every node's ``POST /records``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import hivemind
import httpx
from eth_account import Account
from hivemind.utils import get_dht_time

from protocol.p2p.dht import record_key
from protocol.wire.records import NodeRecord, Served, sign_record

YEAR_S = 365 * 24 * 3600.0
#: The stranger's key: not registered, no stake (devnet only).
STRANGER_KEY = "0x" + "5e" * 32
BAD_URL = "http://127.0.0.1:abc"
DEAD_URL = "http://127.0.0.1:9"


def start_stranger(initial_peers: Sequence[str]) -> Any:
    """A plain hivemind DHT node joined to ``initial_peers``: no validator, stores anything."""
    return hivemind.DHT(initial_peers=list(initial_peers), host_maddrs=["/ip4/127.0.0.1/tcp/0"], start=True)


def _stranger_record(chain_id: int, round: int, url: str, digests: Iterable[str]) -> NodeRecord:
    """A record the stranger signs; the URL is not checked (``sign_record`` signs what it is given)."""
    addr = Account.from_key(STRANGER_KEY).address
    serves = tuple(Served("checkpoint", d) for d in dict.fromkeys(digests))[:8]
    rec = NodeRecord(chain_id, addr, "validator", round, url, int(time.time() + 3000), serves)
    return sign_record(rec, STRANGER_KEY)


def poison_round(
    stranger: Any,
    chain_id: int,
    round: int,
    addresses: Sequence[str],
    node_urls: Sequence[str],
    honest_records: Iterable[NodeRecord],
) -> Counter[str]:
    """Every store of the module docstring against one round; counts of what the DHT said (``kind/ok``).

    ``honest_records``: the round's records as an honest reader finds them (the stranger's own reads
    return its own junk first), the models for the forgeries and replays."""
    key = record_key(chain_id, round)
    year = get_dht_time() + YEAR_S
    said: Counter[str] = Counter()

    def store(kind: str, value: bytes, subkey: str | None = None) -> None:
        ok = stranger.store(key, value, year, subkey=subkey)
        said[f"{kind}/{'stored' if ok else 'refused'}"] += 1

    store("regular-value", b"round hidden for a year")
    honest = {r.address: r for r in honest_records}
    for addr in addresses:
        model = honest.get(addr) or NodeRecord(chain_id, addr, "miner", round, "http://127.0.0.1:1", 1, ())
        forged = NodeRecord(
            **{**model.__dict__, "url": "http://127.0.0.1:6666", "signature": model.signature}
        )
        store("forged", forged.encode(), addr)
        if addr in honest:
            store("replay", honest[addr].encode(), addr)
    digests = [s.digest for r in honest.values() for s in r.serves if s.kind == "checkpoint"] or [
        "0x" + "00" * 32
    ]
    bad = _stranger_record(chain_id, round, BAD_URL, digests)
    dead = _stranger_record(chain_id, round, DEAD_URL, digests)
    store("bad-url", bad.encode(), bad.address)
    store("dead-url", dead.encode(), dead.address)
    for url in node_urls:
        for kind, rec in (("bad-url", bad), ("dead-url", dead)):
            try:
                r = httpx.post(
                    f"{url}/records",
                    content=rec.encode(),
                    headers={"content-type": "application/json"},
                    timeout=5.0,
                )
                accepted = r.status_code == 200 and bool(r.json().get("accepted"))
            except (httpx.HTTPError, ValueError):
                accepted = False
            said[f"{kind}-push/{'accepted' if accepted else 'refused'}"] += 1
    return said
