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

ENV_PREFIX = "TESSERA_VALIDATOR_"

# The replay tolerances (relative L2 per tensor), defined once here for ``ValidatorConfig`` and
# ``validator.verify.VerifyPolicy`` (this module stays free of torch). Calibrated across CPU instruction
# sets and thread counts with ``tessera bench crossplatform`` (docs/benchmarks.md, "Cross-platform replay
# tolerances"): the largest honest differences measured were 2.9e-6 (parameters), 1.4e-5 (AdamW moments,
# 10-step segments) and 0 (the recompressed update and residual).
PARAM_REL_TOL = 1e-4
"""Replayed parameters (35x the largest honest difference measured)."""
REPLAY_REL_TOL = 1e-3
"""Replayed AdamW moments and step counters: 1e-4 left a 7x margin over honest 10-step replays across
instruction sets, so it is 1e-3 (73x); a 10-step segment with one batch swapped is off by 0.5-0.7."""
EF_REL_TOL = 1e-4
"""The recompressed update and the committed residual (honest differences measured 0 across instruction
sets: the codec is elementwise and selection arithmetic)."""


@dataclass(frozen=True)
class ValidatorConfig(NodeConfig):
    """Everything a validator node needs to know (verification thresholds are named here too; the shared
    node fields are ``protocol.settings.NodeConfig``'s)."""

    key_env: str = "TESSERA_VALIDATOR_KEY"
    """Environment variable holding the validator's private key (if no keystore)."""
    data_dir: Path = Path("~/.tessera/validator")
    """State directory: verdicts, score salts, checkpoints."""
    stake: int = 1000 * 10**18
    """Stake to bond when registering."""
    peer_urls: tuple[str, ...] = ()
    """Fallback URLs of other validators (checkpoints, certificate signatures)."""
    max_update_bytes: int = 16 * 1024 * 1024
    """Largest update accepted."""
    max_rel_norm: float = 1.0
    """Per-module pseudo-gradient norm bound relative to the module's weights."""
    segments_per_miner: int = 2
    """Transcript segments replayed per miner per round."""
    replay_rel_tol: float = REPLAY_REL_TOL
    """Relative L2 tolerance of replayed AdamW moments and counters (0: bit-exact; see
    validator.verify.VerifyPolicy and the calibration above)."""
    param_rel_tol: float = PARAM_REL_TOL
    """Relative L2 tolerance of replayed parameters (see validator.verify.VerifyPolicy)."""
    ef_rel_tol: float = EF_REL_TOL
    """Relative L2 tolerance of the recomputed compressed update and residual (see
    validator.verify.VerifyPolicy; F12)."""
    min_final_cosine: float = -1.0
    """Least cosine between an update and its transcript's final state (-1: off; see
    validator.verify.VerifyPolicy)."""
    attested_check_probability: float = 0.1
    """Share of rounds an attested miner is recomputed."""
    min_own_gain: float = 0.0
    """Relative own-data loss drop an update must beat to score."""
    usefulness_rel_norm: float = 0.01
    """Usefulness is scored on the update rescaled to this norm relative to its modules' weights, so a
    scaled update never scores higher (see validator.verify.VerifyPolicy)."""
    merge_method: str = "mean"
    """``mean`` (score-weighted, clipped) or ``trimmed_mean`` (coordinate-wise, Byzantine-robust)."""
    clip_factor: float = 2.0
    """Clip each contribution to this multiple of the median contribution norm."""
    trim: float = 0.2
    """Fraction trimmed at each end by ``trimmed_mean``."""
    slash: bool = True
    """Propose/vote slashing on provable failures."""
    withhold_grace_seconds: float = 30.0
    """How long after its first failure to arrive a miner's update (or transcript states) is retried before
    its verdict becomes final (scored 0). Long enough for a restart (issue 10 measured 18 s), short
    enough that a miner that commits and withholds does not hold the round: the scores of everyone else
    are committed once the grace has passed, not at the phase deadline."""
    dangerous_dev_tee: bool = False
    """Trust evidence from the *development* enclave whose seed is in ``$TESSERA_DEV_TEE_SEED`` (devnet
    only; never in production). The seed comes from the environment, never a flag or file: anyone who can
    read it can make quotes this validator accepts."""


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
