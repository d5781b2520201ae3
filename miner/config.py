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
from protocol.node.settings import NodeConfig, load_settings

ENV_PREFIX = "TESSERA_MINER_"


@dataclass(frozen=True)
class MinerConfig(NodeConfig):
    """Everything a miner node needs to know (the shared node fields are ``protocol.node.settings.NodeConfig``'s)."""

    key_env: str = "TESSERA_MINER_KEY"
    """Environment variable holding the miner's private key (if no keystore)."""
    data_dir: Path = Path("~/.tessera/miner")
    """State directory: round records, error feedback, served blobs."""
    stake: int = 350_000 * 10**18
    """Stake to bond when registering (token base units): the default network's minimum miner stake
    (``protocol.rounds.deployment.NetworkParams.min_miner_stake``)."""
    fetch_attempts: int = 4
    """Fetch attempts over all peers, with exponential backoff."""
    checkpoint_urls: tuple[str, ...] = ()
    """Fallback peers (validator URLs) to fetch checkpoints from if the DHT has none."""
    behaviour: str = "honest"
    """Miner behaviour (``honest``; adversarial modes register more)."""
    max_rounds: int = 0
    """Stop after this many rounds served (0: run forever)."""
    snapshot_every: int = 10
    """Keep every n-th transcript state; others are replayed from the nearest when asked for."""
    upload_mbit: float = 0.0
    """Your upload rate in Mbit/s, declared: checked at start instead of measuring it against validators
    (0: measure; docs/operator-miner.md, "Your upload link")."""
    skip_link_check: bool = False
    """Stake and run even when the upload link looks too slow to serve an audit in time (logged as a
    warning): an audit left unanswered is slashed like a caught fake."""
    tee: str = "none"
    """``none`` or ``simulated`` (serve evidence from the development enclave whose seed is in
    ``$TESSERA_DEV_TEE_SEED``; devnet only)."""


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
    if cfg.upload_mbit < 0:
        raise MinerConfigError(f"upload_mbit must be 0 (measure) or a rate in Mbit/s, not {cfg.upload_mbit}")
    if cfg.tee not in ("none", "simulated"):
        raise MinerConfigError(f"tee must be none or simulated, not {cfg.tee!r}")
    from miner.behaviour import available

    if cfg.behaviour not in available():  # before any key, chain or DHT is touched
        raise MinerConfigError(f"unknown miner behaviour {cfg.behaviour!r}; choose from {available()}")
    return cfg


def load_miner_key(cfg: MinerConfig, env: Mapping[str, str] | None = None) -> str:
    """The miner's private key."""
    try:
        return cfg.private_key(env)
    except ProtocolError as exc:
        raise MinerConfigError(str(exc)) from exc
