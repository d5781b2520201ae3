"""The validator's one typed config: defaults < TOML (``[validator]`` table) < ``TESSERA_VALIDATOR_*`` env <
flags. Loaded once by ``tessera validator run``; the key comes from a keystore or a named env variable."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol.errors import ProtocolError
from protocol.settings import NodeConfig, load_settings
from validator.errors import ValidatorConfigError
from validator.policy import EF_REL_TOL, PARAM_REL_TOL, REPLAY_REL_TOL, VerifyPolicy, policy_fields

ENV_PREFIX = "TESSERA_VALIDATOR_"

__all__ = ["EF_REL_TOL", "PARAM_REL_TOL", "REPLAY_REL_TOL", "ValidatorConfig", "load_validator_config"]


@dataclass(frozen=True)
class ValidatorConfig(NodeConfig, VerifyPolicy):
    """Everything a validator node needs to know: the shared node fields (``protocol.settings.NodeConfig``),
    every verification threshold (``validator.policy.VerifyPolicy``, documented there) and the settings
    below."""

    key_env: str = "TESSERA_VALIDATOR_KEY"
    """Environment variable holding the validator's private key (if no keystore)."""
    data_dir: Path = Path("~/.tessera/validator")
    """State directory: verdicts, score salts, checkpoints."""
    stake: int = 1000 * 10**18
    """Stake to bond when registering."""
    peer_urls: tuple[str, ...] = ()
    """Fallback URLs of other validators (checkpoints, certificate signatures)."""
    merge_method: str = "mean"
    """``mean`` (score-weighted, clipped) or ``trimmed_mean`` (coordinate-wise, Byzantine-robust)."""
    clip_factor: float = 2.0
    """Clip each contribution to this multiple of the median contribution norm."""
    trim: float = 0.2
    """Fraction trimmed at each end by ``trimmed_mean``."""
    slash: bool = True
    """Propose/vote slashing on provable failures."""
    withhold_grace_seconds: float = 30.0
    """How long after its first failure to arrive (counted from REVEAL, when updates are first fetched) a
    miner's update (or transcript states) is retried before its verdict becomes final (scored 0). Long
    enough for a restart (issue 10 measured 18 s; a restarted miner announces its update again), short
    enough that a miner that commits and withholds does not hold the round: the scores of everyone else
    are committed once the grace has passed, not at the phase deadline. On a chain whose phases last their
    windows the grace runs inside them and costs the others nothing; only a fast-forwarded devnet, which
    skips a phase once every node is done, waits it out (docs/security.md, F19)."""
    dangerous_dev_tee: bool = False
    """Trust evidence from the *development* enclave whose seed is in ``$TESSERA_DEV_TEE_SEED`` (devnet
    only; never in production). The seed comes from the environment, never a flag or file: anyone who can
    read it can make quotes this validator accepts."""

    def verify_policy(self) -> VerifyPolicy:
        """The verification policy these settings make (the ``VerifyPolicy`` fields, and nothing else)."""
        return VerifyPolicy(**policy_fields(self))


def load_validator_config(
    toml_path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> ValidatorConfig:
    """Load the config; :class:`ValidatorConfigError` on anything invalid."""
    try:
        cfg = load_settings(
            ValidatorConfig,
            toml_path=toml_path,
            table="validator",
            env=env,
            env_prefix=ENV_PREFIX,
            overrides=overrides,
        )
    except ProtocolError as exc:
        raise ValidatorConfigError(str(exc)) from exc
    if cfg.merge_method not in ("mean", "trimmed_mean"):
        raise ValidatorConfigError(f"merge_method must be mean or trimmed_mean, not {cfg.merge_method!r}")
    return cfg


def load_validator_key(cfg: ValidatorConfig, env: Mapping[str, str] | None = None) -> str:
    """The validator's private key."""
    try:
        return cfg.private_key(env)
    except ProtocolError as exc:
        raise ValidatorConfigError(str(exc)) from exc
