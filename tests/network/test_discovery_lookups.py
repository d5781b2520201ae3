"""Issue 26: a node reads the DHT for its own earlier record only where a previous process of it can have
left one (a DHT lookup moves 23-34 kB on the devnet's 7 peers, ``benchmarks.dht_ops``), and a restarted
node still announces a record that expires after the one it left (its new URL wins the merge)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from protocol.p2p.dht import LookupResult
from protocol.p2p.discovery import Discovery
from protocol.wire.records import NodeRecord, Served

CHAIN = 31337
KEY = "0x" + "4c" * 32
SERVES = [Served("checkpoint", "ab" * 32)]


@dataclass
class _Dht:
    """Stands in for the DHT beside the discovery under test: keeps what is announced, counts lookups."""

    running: bool = True
    stored: dict[int, list[NodeRecord]] = field(default_factory=dict)
    lookups: list[int] = field(default_factory=list)

    def announce(self, record: NodeRecord) -> None:
        self.stored.setdefault(record.round, []).append(record)

    def lookup(self, chain_id: int, round: int) -> LookupResult:
        self.lookups.append(round)
        return LookupResult(records=list(self.stored.get(round, [])))


def test_a_running_node_reads_the_dht_for_its_own_record_only_in_its_first_two_rounds() -> None:
    dht = _Dht()
    d = Discovery(CHAIN, KEY, dht=dht)  # type: ignore[arg-type]
    for r in (5, 6, 6, 7, 8):  # a validator announces round r + 1's checkpoint before round r + 1 starts
        d.announce(r, "validator", "http://127.0.0.1:1", SERVES)
    assert dht.lookups == [5, 6]


def test_a_restarted_node_outlives_the_record_its_previous_process_left() -> None:
    dht = _Dht()
    before = Discovery(CHAIN, KEY, dht=dht)  # type: ignore[arg-type]
    for r in (5, 6, 7, 8):
        before.announce(r, "validator", "http://127.0.0.1:1", SERVES, ttl=100_000)
    after = Discovery(CHAIN, KEY, dht=dht)  # type: ignore[arg-type]  # the restart: a new process, no book
    old = dht.stored[8][0]
    new = after.announce(8, "validator", "http://127.0.0.1:2", SERVES, ttl=60)
    assert dht.lookups[-1] == 8 and new.expires > old.expires


def test_a_rounds_dht_records_are_read_again_only_when_due_or_asked_fresh() -> None:
    dht = _Dht()
    Discovery(CHAIN, "0x" + "4d" * 32, dht=dht).announce(5, "miner", "http://127.0.0.1:3", SERVES)  # type: ignore[arg-type]
    d = Discovery(CHAIN, KEY, dht=dht, cache_seconds=0.0, dht_every_s=0.2)  # type: ignore[arg-type]
    dht.lookups.clear()  # the writer's own (its first round: a restart's record?)
    assert len(d.find(5)) == 1 and len(d.find(5)) == 1
    assert dht.lookups == [5]  # the second find took the DHT's answer of the first
    late = Discovery(CHAIN, "0x" + "4e" * 32, dht=dht)  # type: ignore[arg-type]
    late.announce(5, "miner", "http://127.0.0.1:4", SERVES)  # announced after the read, in the DHT only
    dht.lookups.clear()
    assert len(d.find(5)) == 1 and dht.lookups == [], "not due yet"
    assert len(d.find(5, fresh=True)) == 2 and dht.lookups == [5]  # a caller missing a record asks
    time.sleep(0.25)
    d.find(5)
    assert dht.lookups == [5, 5]  # due again
