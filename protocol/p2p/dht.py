"""The DHT client: a thin wrapper over a hivemind DHT for discovery of signed node records.

What it adds over hivemind: typed errors with an actionable message when the p2pd daemon does not start
or no bootstrap peer answers, a timeout on every operation, a retry path with backoff on start, a peer
count for health checks and a ``rejoin`` for a node that finds itself alone (a DHT split), and strict
validation of every record read (see :mod:`protocol.wire.records`): bad records are refused one by one and
returned as typed errors beside the good ones, never raised, so a node keeps running. Every node also runs
:class:`protocol.p2p.dhtvalidator.RecordValidator`, so it neither stores for others nor accepts from others
anything but valid signed records under their own round key and signer's subkey (a stranger's
store over a round key hid the round).

Records live under the key ``tessera/{chain_id}/round/{round}`` with the announcing address as subkey.
Values are bytes (canonical JSON); hivemind serialises them with msgpack; nothing is unpickled.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import hivemind
from hivemind.utils import get_dht_time

from protocol.errors import ProtocolError
from protocol.p2p.dhtvalidator import RecordValidator
from protocol.pidlock import LockHeldError, hold_pid_lock
from protocol.wire.records import NodeRecord, RecordError, decode_record

log = logging.getLogger(__name__)


class DHTError(ProtocolError):
    """Root of DHT failures."""


class DHTStartError(DHTError):
    """The DHT (its p2pd daemon, or the bootstrap to the configured peers) failed to start."""


class DHTTimeoutError(DHTError):
    """A DHT operation did not finish in time."""


class DHTNotRunningError(DHTError):
    """An operation was attempted on a DHT that is not running."""


@dataclass(frozen=True)
class DHTConfig:
    """How to start a DHT node."""

    #: Multiaddrs of peers to join (``/ip4/1.2.3.4/tcp/31337/p2p/12D3...``); empty starts a new network.
    initial_peers: tuple[str, ...] = ()
    #: Addresses to listen on; port 0 picks a free port.
    host_maddrs: tuple[str, ...] = ("/ip4/127.0.0.1/tcp/0",)
    #: Seconds to wait for the daemon and the bootstrap.
    start_timeout: float = 30.0
    #: Start attempts before giving up (p2pd sometimes fails on a busy machine).
    start_attempts: int = 3
    #: First backoff between attempts, doubled each time.
    backoff: float = 1.0
    #: Seconds per store/get.
    op_timeout: float = 10.0
    #: Kademlia RPC timeout.
    wait_timeout: float = 3.0
    #: Run Tessera's record validator (off only in tests that need a node storing anything, like a stranger's).
    validate_records: bool = True
    #: The chain whose records this node stores (None: any chain's valid records).
    chain_id: int | None = None
    #: File holding this node's DHT key (created on first start): its peer id, so its multiaddr and every
    #: other node's ``--dht-peers`` pointing at it, survive restarts. None: a fresh peer id per start.
    identity_path: str | None = None
    #: Peers asked to store each record (hivemind's default is 5). Every record also travels over HTTP
    #: (pushed to the node's peers and relayed from their books), so the DHT need not hold many copies;
    #: each replica costs a store RPC and answers every lookup with the whole round (
    #: ``benchmarks.dht_ops`` on 7 peers, a store 22.6 -> 17.6 kB and a lookup 30.0 -> 24.0 kB).
    num_replicas: int = 3
    #: Peers a lookup copies a found value to (hivemind's Kademlia caching; its default 1 is a store per
    #: lookup; the records' owners store them, so none).
    cache_nearest: int = 0


def record_key(chain_id: int, round: int) -> str:
    """The DHT key under which round ``round``'s records are stored."""
    return f"tessera/{chain_id}/round/{round}"


async def _peer_count(_dht: Any, node: Any) -> int:
    """Run inside the DHT process: the number of peers in the routing table."""
    return len(node.protocol.routing_table.uid_to_peer_id)


def _tessera_validators(node: Any) -> list[RecordValidator]:
    # hivemind keeps the validators in a CompositeValidator with no public accessor
    composite = node.protocol.record_validator
    return [v for v in getattr(composite, "_validators", []) if isinstance(v, RecordValidator)]


async def _set_registered(_dht: Any, node: Any, addresses: frozenset[str] | None) -> int:
    """Run inside the DHT process: give the record validator the registered set."""
    found = _tessera_validators(node)
    for v in found:
        v.set_registered(addresses)
    return len(found)


async def _validator_stats(_dht: Any, node: Any) -> dict[str, int]:
    """Run inside the DHT process: records accepted and refused (by error class) by the validator."""
    out: dict[str, int] = {}
    for v in _tessera_validators(node):
        out["accepted"] = out.get("accepted", 0) + v.accepted
        for name, n in v.refused.items():
            out[name] = out.get(name, 0) + n
    return out


class _IdentityLock:
    """Hold ``<identity_path>.lock`` while a node runs with that key, so a second node with the same key on
    this machine is refused at once. hivemind's own check (asking the network whether the peer id answers)
    stays on for a key copied to another machine, but it races the bootstrap of a node that has just
    started and misses it now and then. :func:`protocol.pidlock.hold_pid_lock` is per process (a killed
    node leaves no stale lock); ``_held`` covers a second node in the same process, which it does not see."""

    _held: set[str] = set()
    _guard = threading.Lock()

    def __init__(self, identity_path: str) -> None:
        self.path = os.path.abspath(identity_path) + ".lock"
        self._fh: Any = None

    def acquire(self) -> None:
        """Take the lock or raise :class:`DHTStartError` naming the holder."""
        taken = f"DHT identity {self.path[:-5]} is already taken by a running node on this machine"
        with self._guard:
            if self.path in self._held:
                raise DHTStartError(f"{taken} (this process); run one node per key")
            try:
                fh = hold_pid_lock(Path(self.path))
            except LockHeldError as exc:
                raise DHTStartError(f"{taken} (pid {exc.holder}); run one node per key") from None
            except OSError as exc:
                raise DHTStartError(f"cannot open the DHT key's lock {self.path}: {exc}") from exc
            self._fh = fh
            self._held.add(self.path)

    def release(self) -> None:
        """Give the lock back (idempotent)."""
        with self._guard:
            if self._fh is not None:
                self._fh.close()  # closing drops the record lock
                self._fh = None
                self._held.discard(self.path)


@dataclass
class LookupResult:
    """The outcome of reading one round's records: valid ones and refused ones (subkey, error)."""

    records: list[NodeRecord] = field(default_factory=list)
    refused: list[tuple[str, RecordError]] = field(default_factory=list)


class DHTNode:
    """A running hivemind DHT node with Tessera's record semantics."""

    def __init__(self, config: DHTConfig) -> None:
        self.config = config
        self._dht: Any = None
        self._lock = _IdentityLock(config.identity_path) if config.identity_path else None

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> DHTNode:
        """Start the node, retrying with backoff; raise :class:`DHTStartError` with the cause on failure."""
        cfg = self.config
        if self._lock is not None:
            self._lock.acquire()  # a key in use on this machine: refused at once, not retried
        last: BaseException | None = None
        delay = cfg.backoff
        for attempt in range(1, max(1, cfg.start_attempts) + 1):
            dht = None
            try:
                dht = hivemind.DHT(
                    initial_peers=list(cfg.initial_peers) or None,
                    host_maddrs=list(cfg.host_maddrs),
                    start=False,
                    wait_timeout=cfg.wait_timeout,
                    ensure_bootstrap_success=bool(cfg.initial_peers),
                    record_validators=[RecordValidator(cfg.chain_id)] if cfg.validate_records else [],
                    num_replicas=cfg.num_replicas,
                    cache_nearest=cfg.cache_nearest,
                    **({"identity_path": cfg.identity_path} if cfg.identity_path else {}),
                )
                dht.run_in_background(await_ready=True, timeout=cfg.start_timeout)
                self._dht = dht
                log.info("DHT started at %s", self.visible_maddrs())
                return self
            except Exception as exc:  # hivemind raises P2PDaemonError, RuntimeError, TimeoutError, ...
                last = exc
                log.warning("DHT start attempt %d/%d failed: %s", attempt, cfg.start_attempts, exc)
                if dht is not None:
                    try:
                        dht.shutdown()
                    except Exception:
                        pass
                if attempt < cfg.start_attempts:
                    time.sleep(delay)
                    delay *= 2
        if self._lock is not None:
            self._lock.release()
        hint = (
            "check that the bootstrap peers are reachable and running"
            if cfg.initial_peers
            else "check that the p2pd daemon can start (ports free, /tmp writable)"
        )
        raise DHTStartError(
            f"DHT failed to start after {cfg.start_attempts} attempts "
            f"(peers={list(cfg.initial_peers)}): {type(last).__name__}: {last}; {hint}"
        ) from last

    def shutdown(self) -> None:
        """Stop the node (idempotent)."""
        try:
            if self._dht is not None:
                self._dht.shutdown()
        finally:
            self._dht = None
            if self._lock is not None:
                self._lock.release()

    def rejoin(self) -> None:
        """Restart and re-bootstrap: the retry path for a node that finds itself alone (a DHT split)."""
        self.shutdown()
        self.start()

    @property
    def running(self) -> bool:
        """Whether the node is started."""
        return self._dht is not None

    def _require(self) -> Any:
        if self._dht is None:
            raise DHTNotRunningError("DHT is not running; call start() first")
        return self._dht

    def visible_maddrs(self) -> list[str]:
        """Multiaddrs other nodes can bootstrap from."""
        return [str(a) for a in self._require().get_visible_maddrs()]

    def peer_count(self) -> int:
        """Peers in the routing table (0 with bootstrap peers configured means a split)."""
        fut = self._require().run_coroutine(_peer_count, return_future=True)
        return int(self._result(fut, "peer_count"))

    def set_registered(self, addresses: Sequence[str] | None) -> None:
        """Store and accept only records signed by ``addresses`` from now on (None: any valid signer)."""
        arg = None if addresses is None else frozenset(addresses)
        fut = self._require().run_coroutine(partial(_set_registered, addresses=arg), return_future=True)
        self._result(fut, "set_registered")

    def validator_stats(self, timeout: float | None = None) -> dict[str, int]:
        """Records this node's validator accepted and refused (by error class), stores and reads alike;
        ``timeout`` seconds at most (default ``op_timeout``)."""
        fut = self._require().run_coroutine(_validator_stats, return_future=True)
        return dict(self._result(fut, "validator_stats", timeout))

    def _result(self, fut: Any, what: str, timeout: float | None = None) -> Any:
        limit = self.config.op_timeout if timeout is None else timeout
        try:
            return fut.result(timeout=limit)
        except TimeoutError as exc:
            raise DHTTimeoutError(f"DHT {what} did not finish in {limit}s") from exc
        except Exception as exc:
            if type(exc).__name__ == "TimeoutError":
                raise DHTTimeoutError(f"DHT {what} did not finish in {limit}s") from exc
            raise DHTError(f"DHT {what} failed: {type(exc).__name__}: {exc}") from exc

    # -- records ---------------------------------------------------------------------------------------
    def store_raw(self, key: str, subkey: str, value: bytes, expires: float) -> bool:
        """Store raw bytes (no validation: used by :meth:`announce` and by tests injecting junk)."""
        dht = self._require()
        # hivemind measures expiry on its own clock; translate from unix time.
        expiration = get_dht_time() + max(1.0, expires - time.time())
        fut = dht.store(key, value, expiration, subkey=subkey, return_future=True)
        return bool(self._result(fut, "store"))

    def announce(self, record: NodeRecord) -> None:
        """Publish a signed record under its round's key.

        hivemind reports the answer of whichever replica answered last, so a stranger's node that refuses
        (or pretends to) could make a good store look failed: on a refusal the record is read back, and
        only a record that cannot be found raises :class:`DHTError`."""
        ok = self.store_raw(
            record_key(record.chain_id, record.round), record.address, record.encode(), float(record.expires)
        )
        if not ok and record not in self.lookup(record.chain_id, record.round).records:
            raise DHTError(f"DHT refused to store the record for round {record.round}")

    def lookup(self, chain_id: int, round: int, *, now: float | None = None) -> LookupResult:
        """Read and strictly validate every record of a round; bad records land in ``refused``."""
        fut = self._require().get(record_key(chain_id, round), latest=True, return_future=True)
        found = self._result(fut, "get")
        out = LookupResult()
        if found is None:
            return out
        entries = found.value
        if not isinstance(entries, dict):
            out.refused.append(("", RecordError("round key holds a non-dictionary value")))
            return out
        for subkey, item in sorted(entries.items(), key=lambda kv: _text(kv[0])):
            value = getattr(item, "value", item)
            try:
                if not isinstance(value, bytes):
                    raise RecordError(f"record value must be bytes, got {type(value).__name__}")
                rec = decode_record(value, now=now, chain_id=chain_id)
                if rec.round != round:
                    raise RecordError(f"record for round {rec.round} stored under round {round}")
                if str(subkey) != rec.address:
                    raise RecordError(f"record of {rec.address} stored under subkey {subkey}")
                out.records.append(rec)
            except RecordError as exc:
                log.warning("refused DHT record %s/%s: %s", round, _text(subkey)[:80], exc)
                out.refused.append((_text(subkey), exc))
            except Exception as exc:  # anything else one stored value causes: refused like a bad record
                log.warning(
                    "refused DHT record %s/%s: untyped %s: %s",
                    round,
                    _text(subkey)[:80],
                    type(exc).__name__,
                    exc,
                )
                out.refused.append((_text(subkey)[:80], RecordError(f"{type(exc).__name__}: {exc}")))
        return out


def _text(x: Any) -> str:
    """``str(x)``, or a placeholder where a stranger's stored subkey cannot even be printed."""
    try:
        return str(x)
    except Exception:
        return f"<{type(x).__name__}>"


def start_dht(
    initial_peers: Sequence[str] = (), *, host: str = "127.0.0.1", port: int = 0, **kwargs: Any
) -> DHTNode:
    """Convenience: start a node listening on ``host:port`` joined to ``initial_peers``."""
    cfg = DHTConfig(initial_peers=tuple(initial_peers), host_maddrs=(f"/ip4/{host}/tcp/{port}",), **kwargs)
    return DHTNode(cfg).start()
