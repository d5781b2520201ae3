"""Issue 26: a node reads the DHT for its own earlier record only where a previous process of it can have
left one (a DHT lookup moves 23-34 kB on the devnet's 7 peers, ``benchmarks.dht_ops``), and a restarted
node still announces a record that expires after the one it left (its new URL wins the merge)."""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.p2p.dht import DHTError, LookupResult
from protocol.p2p.dhtreads import DhtReadSchedule
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


def test_a_round_is_read_again_at_doubling_waits_sooner_when_fresh() -> None:
    clock = [0.0]
    dht = _Dht()
    Discovery(CHAIN, "0x" + "4d" * 32, dht=dht).announce(5, "miner", "http://127.0.0.1:3", SERVES)  # type: ignore[arg-type]
    d = Discovery(CHAIN, KEY, dht=dht, cache_seconds=0.0, dht_every_s=10.0, clock=lambda: clock[0])  # type: ignore[arg-type]
    dht.lookups.clear()  # the writer's own (its first round: a restart's record?)
    assert len(d.find(5)) == 1 and len(d.find(5)) == 1
    assert dht.lookups == [5]  # the second find took the DHT's answer of the first
    late = Discovery(CHAIN, "0x" + "4e" * 32, dht=dht)  # type: ignore[arg-type]
    late.announce(5, "miner", "http://127.0.0.1:4", SERVES)  # announced after the read, in the DHT only
    dht.lookups.clear()
    clock[0] = 0.5
    assert len(d.find(5)) == 1 and len(d.find(5, fresh=True)) == 1 and dht.lookups == [], "not due"
    clock[0] = 1.0
    assert len(d.find(5)) == 1 and dht.lookups == [], "a plain ask waits dht_every_s"
    assert len(d.find(5, fresh=True)) == 2 and dht.lookups == [5], "fresh: dht_fresh_s"
    clock[0] = 2.5
    d.find(5, fresh=True)
    assert dht.lookups == [5], "the third read waits 2 s after the second"
    clock[0] = 3.0
    d.find(5, fresh=True)
    clock[0] = 100.0
    d.find(5)
    assert dht.lookups == [5, 5, 5] and d.dht_reads == 4


def test_reads_for_a_missing_record_grow_with_the_log_of_the_rounds_length() -> None:
    """A node that asks every 1/16 s for a record nobody announced reads the DHT 7 times in 64 s (the
    old ``fresh``, a read per ask, was 1,024 reads); a second missing address starts its own doubling."""
    clock = [0.0]
    dht = _Dht()
    d = Discovery(CHAIN, KEY, dht=dht, cache_seconds=0.0, clock=lambda: clock[0])  # type: ignore[arg-type]
    times = []
    while clock[0] < 64.0:
        before = len(dht.lookups)
        d.find(9, fresh=True, want=("0x" + "00" * 20,))
        if len(dht.lookups) > before:
            times.append(clock[0])
        clock[0] += 1 / 16  # exact in binary: the waits are met on the dot
    assert times == [0, 1, 3, 7, 15, 31, 63]
    clock[0] = 70.0  # 7 s after the last read: the first address waits 64 s, a new one 1 s
    d.find(9, fresh=True, want=("0x" + "00" * 20,))
    assert len(dht.lookups) == 7
    d.find(9, fresh=True, want=("0x" + "00" * 20, "0x" + "01" * 20))
    assert len(dht.lookups) == 8 and d.schedule.reads(9) == 8


def test_no_dht_read_while_the_wanted_records_came_over_http() -> None:
    dht = _Dht()
    d = Discovery(CHAIN, KEY, dht=dht, cache_seconds=0.0)  # type: ignore[arg-type]
    other = Discovery(CHAIN, "0x" + "4d" * 32)
    rec = other.announce(7, "miner", "http://127.0.0.1:5", SERVES)
    d.book.add(rec)  # what a push over HTTP or a pull from a peer's /records leaves in the book
    dht.lookups.clear()
    assert d.url_of(7, rec.address) == "http://127.0.0.1:5" and dht.lookups == []
    assert [r.address for r in d.find(7, want=(rec.address.lower(),))] == [rec.address] and dht.lookups == []
    missing = "0x" + "11" * 20
    assert d.url_of(7, missing) is None and dht.lookups == [7]  # someone wanted is missing: the DHT is read


def test_a_failed_or_empty_read_keeps_what_earlier_reads_found() -> None:
    schedule = DhtReadSchedule(clock=lambda: 0.0)
    rec = Discovery(CHAIN, KEY).sign_record(3, "miner", "http://127.0.0.1:6", SERVES, ttl=60)
    schedule.note(3, [rec])
    schedule.note(3, [])  # a lookup that failed (logged by Discovery) answers nothing
    assert schedule.held(3) == [rec] and schedule.reads(3) == 2
    schedule.note(3 + 5, [])
    assert schedule.held(3) == [] and schedule.reads(3) == 0  # forgotten 5 rounds later


def test_announcing_what_was_already_published_stores_nothing_again() -> None:
    dht = _Dht()
    d = Discovery(CHAIN, KEY, dht=dht)  # type: ignore[arg-type]
    merged = d.announce(6, "validator", "http://127.0.0.1:1", [Served("checkpoint", "ab" * 32, 900)])
    opened = d.announce(6, "validator", "http://127.0.0.1:1", [Served("checkpoint", "0x" + "ab" * 32)])
    assert opened is merged and len(dht.stored[6]) == 1  # the round opens on the checkpoint it merged
    d.announce(6, "validator", "http://127.0.0.1:1", [Served("checkpoint", "cd" * 32)])
    d.announce(6, "validator", "http://127.0.0.1:2", [Served("checkpoint", "cd" * 32)])
    assert len(dht.stored[6]) == 3  # another checkpoint, another URL: published


def test_a_record_the_dht_refused_is_stored_again_at_the_next_announcement() -> None:
    @dataclass
    class _Refusing(_Dht):
        refuse: bool = True

        def announce(self, record: NodeRecord) -> None:
            if self.refuse:
                raise DHTError("no peer stored it")
            super().announce(record)

    dht = _Refusing()
    d = Discovery(CHAIN, KEY, dht=dht)  # type: ignore[arg-type]
    d.announce(6, "validator", "http://127.0.0.1:1", SERVES)
    dht.refuse = False
    d.announce(6, "validator", "http://127.0.0.1:1", SERVES)
    assert len(dht.stored[6]) == 1 and d.errors == ["no peer stored it"]


def test_the_peers_are_not_asked_while_the_book_holds_the_wanted_records() -> None:
    d = Discovery(CHAIN, KEY, dht=_Dht(), cache_seconds=0.0, record_urls=("http://127.0.0.1:9",))  # type: ignore[arg-type]
    pulls: list[int] = []
    d.exchange.pull = lambda peers, round: pulls.append(round) or []  # type: ignore[method-assign]
    rec = Discovery(CHAIN, "0x" + "4d" * 32).sign_record(7, "miner", "http://127.0.0.1:5", SERVES, ttl=60)
    d.book.add(rec)
    assert d.url_of(7, rec.address) == rec.url and pulls == []
    d.find(7)  # naming nobody: the peers are asked
    d.find(7, want=(rec.address, "0x" + "11" * 20))  # someone wanted is missing: asked
    assert pulls == [7, 7]
