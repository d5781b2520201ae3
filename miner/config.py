"""The miner's one typed config: defaults < TOML file (``[miner]`` table) < ``TESSERA_MINER_*`` env < flags.

Loaded once by ``tessera miner run``; the key comes from an encrypted keystore or a named environment
variable, never from the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from miner.errors import MinerConfigError
from protocol.errors import ProtocolError
from protocol.settings import load_settings, resolve_private_key

ENV_PREFIX = "TESSERA_MINER_"


@dataclass(frozen=True)
class MinerConfig:
    """Everything a miner node needs to know."""

    run_file: Path = Path("run.json")
    """The run specification (``protocol.runspec``) shared by every node of the run."""
    deployment: Path | None = None
    """Deployment file written by ``tessera contracts deploy`` (chain id, contract address, RPC)."""
    rpc_url: str = ""
    """JSON-RPC endpoint (empty: the deployment file's)."""
    key_env: str = "TESSERA_MINER_KEY"
    """Environment variable holding the miner's private key (if no keystore)."""
    keystore: Path | None = None
    """Encrypted JSON keystore (its password in ``keystore_password_env``)."""
    keystore_password_env: str = "TESSERA_KEYSTORE_PASSWORD"
    """Environment variable holding the keystore password."""
    data_dir: Path = Path("~/.tessera/miner")
    """State directory: round records, error feedback, served blobs."""
    host: str = "127.0.0.1"
    """HTTP listen address."""
    port: int = 0
    """HTTP port (0: any free port)."""
    public_url: str = ""
    """URL peers reach this node at (empty: http://host:port)."""
    dht: bool = True
    """Announce and discover through the hivemind DHT."""
    dht_peers: tuple[str, ...] = ()
    """Bootstrap multiaddrs of the DHT."""
    dht_port: int = 0
    """DHT listen port (0: any)."""
    checkpoint_urls: tuple[str, ...] = ()
    """Fallback peers (validator URLs) to fetch checkpoints from if the DHT has none."""
    stake: int = 100 * 10**18
    """Stake to bond when registering (token base units)."""
    behaviour: str = "honest"
    """Miner behaviour (``honest``; adversarial modes register more)."""
    poll_interval: float = 0.5
    """Seconds between looks at the chain."""
    max_rounds: int = 0
    """Stop after this many rounds served (0: run forever)."""
    fetch_timeout: float = 20.0
    """Seconds per HTTP fetch."""
    fetch_attempts: int = 4
    """Fetch attempts over all peers, with exponential backoff."""
    snapshot_every: int = 10
    """Keep every n-th transcript state; others are replayed from the nearest when asked for."""
    threads: int = 1
    """torch CPU threads."""
    tee: str = "none"
    """``none`` or ``simulated`` (serve evidence from the development enclave)."""


def load_miner_config(
    toml_path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> MinerConfig:
    """Load the config; :class:`MinerConfigError` on anything invalid."""
    try:
        cfg = load_settings(
            MinerConfig,
            toml_path=toml_path,
            table="miner",
            env=env,
            env_prefix=ENV_PREFIX,
            overrides=overrides,
        )
    except ProtocolError as exc:
        raise MinerConfigError(str(exc)) from exc
    if cfg.tee not in ("none", "simulated"):
        raise MinerConfigError(f"tee must be none or simulated, not {cfg.tee!r}")
    return cfg


def load_miner_key(cfg: MinerConfig, env: Mapping[str, str] | None = None) -> str:
    """The miner's private key."""
    try:
        return resolve_private_key(
            key_env=cfg.key_env, keystore=cfg.keystore, password_env=cfg.keystore_password_env, env=env
        )
    except ProtocolError as exc:
        raise MinerConfigError(str(exc)) from exc
