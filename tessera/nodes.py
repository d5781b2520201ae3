"""Composition root of one node process (``tessera miner run`` / ``tessera validator run``).

Wires a role's typed config to its collaborators: the run spec, the deployment and chain client, the DHT,
discovery, and the node, then runs it until SIGINT/SIGTERM. Every config field is also a command-line flag
(``--field-name``), so the file, the environment and the flags share one schema.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import ipaddress
import logging
import os
import signal
import threading
import time
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eth_account import Account

from protocol.node.settings import setting_defaults, setting_docs, setting_types
from protocol.pidlock import LockHeldError, hold_pid_lock
from protocol.rounds.deployment import Deployment
from tessera.cli import add_log_level_flag
from tessera.errors import TesseraError

log = logging.getLogger(__name__)


DEV_TEE_SEED_ENV = "TESSERA_DEV_TEE_SEED"
"""Environment variable holding the devnet's development-enclave seed (64 hex digits, fresh per run)."""


def dev_tee_seed(environ: typing.Mapping[str, str] | None = None) -> bytes:
    """The development enclave's seed from ``$TESSERA_DEV_TEE_SEED``; never a flag (``ps`` shows flags)
    and never a public constant (the devnet's fixed seed let anyone make accepted quotes)."""
    raw = (os.environ if environ is None else environ).get(DEV_TEE_SEED_ENV, "")
    try:
        seed = bytes.fromhex(raw)
    except ValueError:
        seed = b""
    if len(seed) < 16:
        raise TesseraError(
            f"the development TEE needs a random seed of at least 16 bytes as hex in ${DEV_TEE_SEED_ENV} "
            "(the devnet sets one per run); got none or a malformed one"
        )
    return seed


def add_config_flags(parser: argparse.ArgumentParser, cls: type) -> None:
    """One flag per setting (string-valued; the loader coerces and validates; a yes/no one alone is yes):
    ``--field-name``, and
    ``--section.field-name`` inside a section (``--verify.segments-per-miner``). Renamed and retired
    settings keep a hidden flag of their old name, so that the loader warns about them or refuses them
    instead of argparse failing on an unknown flag."""
    parser.add_argument("--config", type=Path, help="TOML config file")
    docs = setting_docs(cls)
    defaults = setting_defaults(cls)
    for name, tp in setting_types(cls).items():
        doc = docs.get(name, "").replace("%", "%%")
        doc = doc + " " if doc else ""
        default = defaults[name]
        # a yes/no setting's flag alone says yes (``--skip-link-check``); ``--dht false`` still reads
        extra: dict[str, Any] = {"nargs": "?", "const": "true"} if tp is bool else {}
        parser.add_argument(
            _flag(name),
            dest=f"cfg_{name}",
            default=None,
            **extra,
            metavar=str(getattr(tp, "__name__", "VALUE")).upper(),
            help=f"{doc.replace('``', '')}(default: {str(default) if isinstance(default, Path) else repr(default)})",
        )
    for name in (*getattr(cls, "renamed_settings", {}), *getattr(cls, "retired_settings", {})):
        parser.add_argument(_flag(name), dest=f"cfg_{name}", default=None, help=argparse.SUPPRESS)


def _flag(setting: str) -> str:
    return "--" + setting.replace("_", "-")


def overrides_from_args(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The settings given on the command line."""
    names = (
        *setting_types(cls),
        *getattr(cls, "renamed_settings", {}),
        *getattr(cls, "retired_settings", {}),
    )
    return {
        name: getattr(args, f"cfg_{name}") for name in names if getattr(args, f"cfg_{name}", None) is not None
    }


START_RPC_TRIES = 30
"""Tries of an unreachable RPC at a node's start before it gives up (it gave up after ~4 s)."""
START_RPC_WAIT_S = 10.0
"""Seconds between those tries: 30 tries over about five minutes, for a chain node still starting."""


def wait_for_rpc(url: str, tries: int = START_RPC_TRIES, wait_s: float = START_RPC_WAIT_S) -> None:
    """Return once ``url`` answers a JSON-RPC request; until then one warning line a try, naming the
    try, the wait and the limit; after ``tries`` a :class:`TesseraError`. Only an unreachable node is
    retried here: what it answers is checked by ``Chain.connect``."""
    import requests

    from protocol.chain.transport import check_rpc_url

    check_rpc_url(url)
    limit = (tries - 1) * wait_s
    for attempt in range(1, tries + 1):
        try:
            requests.post(
                url, json={"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []}, timeout=10
            )
            return
        except (requests.ConnectionError, requests.Timeout) as exc:
            if attempt == tries:
                raise TesseraError(
                    f"RPC {url} unreachable after {tries} tries over {limit:.0f} s ({type(exc).__name__}): "
                    "is the chain node running, and is the RPC URL right?"
                ) from None
            log.warning(
                "RPC %s unreachable (%s); try %d of %d, next in %.0f s, giving up after %.0f s",
                url,
                type(exc).__name__,
                attempt,
                tries,
                wait_s,
                limit,
            )
            time.sleep(wait_s)


def connect(deployment_path: Path | None, rpc_url: str, private_key: str, traffic: Any = None) -> Any:
    """A :class:`protocol.chain.coordinator.ChainCoordinator` for the deployment, signing with ``private_key``;
    its JSON-RPC bytes are counted in ``traffic`` (a :class:`protocol.node.traffic.TrafficLedger`) if given.
    An RPC that does not answer yet is waited for (:func:`wait_for_rpc`)."""
    from protocol.chain import Chain
    from protocol.chain.coordinator import ChainCoordinator

    if deployment_path is None:
        raise TesseraError("no deployment file: pass --deployment (written by `tessera contracts deploy`)")
    deployment = Deployment.load(deployment_path)
    wait_for_rpc(rpc_url or deployment.rpc_url)
    chain = Chain.connect(deployment, Account.from_key(private_key), rpc_url=rpc_url or None, traffic=traffic)
    return ChainCoordinator(chain, private_key)


def check_genesis(coord: Any, spec: Any, run_file: Path) -> None:
    """Refuse to start a node whose run file is not the run deployed on chain: its theta_0 digest must be
    the contract's genesis checkpoint (a mismatch used to leave the node waiting for a checkpoint that
    never verifies, with no log line)."""
    on_chain = "0x" + bytes(coord.chain.checkpoint(1)).hex()
    if on_chain == "0x" + "00" * 32:
        raise TesseraError(
            f"the deployment on chain {coord.chain_id} has no genesis checkpoint (0x00): the launcher must "
            "redeploy with `tessera contracts deploy --run-file run.json`"
        )
    ours = spec.genesis_digest()
    if ours != on_chain:
        raise TesseraError(
            f"run file {run_file} does not match the deployment: its theta_0 is {ours}, the genesis "
            f"checkpoint on chain {coord.chain_id} is {on_chain}; use the run file the launcher published"
        )


def lock_data_dir(data_dir: Path) -> Any:
    """Hold ``data_dir/node.lock`` (an advisory lock released when the process ends): a second node on the
    same data dir, e.g. the same miner started twice (with ``--dht false`` too, where the DHT key does not
    catch it), stops at start instead of sharing its round records. Returns the open file to keep. A POSIX
    record lock (``lockf``): a forked child (the DHT's process) does not inherit it, so a node killed alone
    does not leave its data dir locked."""
    d = data_dir.expanduser()
    d.mkdir(parents=True, exist_ok=True)
    try:
        return hold_pid_lock(d / "node.lock")  # held for the life of the process
    except LockHeldError as exc:
        raise TesseraError(
            f"data dir {d} is in use by another node (pid {exc.holder}): run one node per data dir and key"
        ) from None


def dht_listen_maddr(host: str, port: int) -> str:
    """The DHT's listen multiaddr on the node's HTTP ``host`` when that is an IP address (``0.0.0.0``: every
    interface, so the multiaddrs in ``/status`` name addresses other machines reach), else loopback."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return f"/ip4/127.0.0.1/tcp/{port}"
    return f"/ip{ip.version}/{ip}/tcp/{port}"


def start_dht(
    enabled: bool,
    peers: tuple[str, ...],
    port: int,
    *,
    data_dir: Path | None = None,
    chain_id: int | None = None,
    host: str = "127.0.0.1",
) -> Any:
    """A started :class:`protocol.p2p.dht.DHTNode`, or None when disabled. With ``data_dir``, the node's DHT key
    lives in ``data_dir/dht.key``: its peer id (and with a fixed port its multiaddr) survives restarts,
    and a second instance on the same data dir is refused at start (the key is in use). ``chain_id``:
    store only that chain's records. It listens on ``host`` (:func:`dht_listen_maddr`). The multiaddr other
    nodes bootstrap from is printed (and is in the node's ``/status``, ``dht_maddrs``)."""
    if not enabled:
        return None
    from protocol.p2p.dht import DHTConfig, DHTNode

    identity = None
    if data_dir is not None:
        data_dir.expanduser().mkdir(parents=True, exist_ok=True)
        identity = str(data_dir.expanduser() / "dht.key")
    cfg = DHTConfig(
        initial_peers=peers,
        host_maddrs=(dht_listen_maddr(host, port),),
        identity_path=identity,
        chain_id=chain_id,
    )
    node = DHTNode(cfg).start()
    print(f"DHT peer (for --dht-peers): {' '.join(node.visible_maddrs())}", flush=True)
    return node


def run_until_signal(node: Any) -> None:
    """Run ``node.run(stop)`` until SIGINT or SIGTERM, then stop it cleanly."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.warning("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        node.run(stop)
    finally:
        node.stop()


@dataclasses.dataclass
class NodeRuntime:
    """What both node kinds start from: the run, the chain, the traffic ledger and discovery."""

    spec: Any
    coord: Any
    traffic: Any
    discovery: Any
    lock: Any
    """The data-dir lock, held while the runtime is open."""


@contextlib.contextmanager
def node_runtime(cfg: Any, key: str, fallback_urls: tuple[str, ...]) -> typing.Iterator[NodeRuntime]:
    """Open a node's runtime from its config (``MinerConfig`` or ``ValidatorConfig``) and key: the run file,
    the data-dir lock, the chain (its genesis checked against the run file), the DHT and discovery with
    ``fallback_urls``; the DHT is shut down on exit."""
    from protocol.node.dhttraffic import DhtTraffic
    from protocol.node.traffic import TrafficLedger
    from protocol.p2p.clientcount import count_client_http
    from protocol.p2p.discovery import Discovery
    from protocol.runspec import RunSpec

    spec = RunSpec.load(cfg.run_file)  # its tokenizer read and checked against the pinned SHA-256
    spec.load_corpus()  # and its corpus against its digest: before the node registers or bonds
    lock = lock_data_dir(cfg.data_dir)
    traffic = TrafficLedger()  # what this node moves, by round and kind (GET /traffic)
    count_client_http(traffic.count_client)  # and what it fetches and posts (GET /traffic/client, /node)
    coord = connect(cfg.deployment, cfg.rpc_url, key, traffic)
    check_genesis(coord, spec, cfg.run_file)
    dht = start_dht(
        cfg.dht, cfg.dht_peers, cfg.dht_port, data_dir=cfg.data_dir, chain_id=coord.chain_id, host=cfg.host
    )
    # the DHT daemon's bytes, which no HTTP handler sees, from its sockets' kernel counters
    dht_traffic = DhtTraffic(traffic).start() if dht is not None else None
    try:
        yield NodeRuntime(spec, coord, traffic, Discovery(coord.chain_id, key, dht, fallback_urls), lock)
    finally:
        count_client_http(None)
        if dht_traffic is not None:
            dht_traffic.stop()
        if dht is not None:
            dht.shutdown()


def add_run_command(
    subparsers: Any, cls: type, handler: Callable[[argparse.Namespace], int], *, help: str, run_help: str
) -> None:
    """``tessera ROLE run`` for the role whose config is ``cls`` (``MinerConfig``: miner, ``ValidatorConfig``:
    validator): one flag per setting (:func:`add_config_flags`); ``tessera ROLE`` alone prints its help."""
    role = cls.__name__.removesuffix("Config").lower()
    parser = subparsers.add_parser(role, help=help)
    sub = parser.add_subparsers(dest=f"{role}_command", metavar="ACTION")
    run = sub.add_parser(
        "run",
        help=run_help,
        description=f"Every setting is also read from the [{role}] table of --config and from "
        f"TESSERA_{role.upper()}_<SETTING> environment variables; flags win. The key comes from "
        f"${getattr(cls, 'key_env', '')} (or --key-env NAME) or an encrypted --keystore.",
    )
    add_config_flags(run, cls)
    add_log_level_flag(run, default="INFO")  # a node's log has its line per round unless told otherwise
    run.set_defaults(handler=handler)
    parser.set_defaults(handler=lambda args: (parser.print_help(), 1)[1])


def serve_node(
    cfg: Any, key: str, fallback_urls: tuple[str, ...], build: Callable[[NodeRuntime], Any], banner: str
) -> int:
    """Open the node's runtime (:func:`node_runtime`), start the node ``build`` makes from it, print
    ``banner`` (formatted with the node's ``address`` and ``url``) and run it until a signal."""
    with node_runtime(cfg, key, fallback_urls) as rt:
        node = build(rt).start()
        print(banner.format(address=rt.coord.address, url=node.url), flush=True)
        run_until_signal(node)
    return 0
