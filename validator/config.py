"""The validator's one typed config: defaults < TOML (``[validator]`` table) < ``TESSERA_VALIDATOR_*`` env <
flags. Loaded once by ``tessera validator run``; the key comes from a keystore or a named env variable.

Sections, as torchtitan's ``JobConfig`` has them: the verification thresholds are ``verify``
(``validator.policy.VerifyPolicy``): the ``[validator.verify]`` table, ``TESSERA_VALIDATOR_VERIFY_*``
variables and ``--verify.*`` flags. The merge policy is not a validator setting: it is the run file's
``merge`` section (``protocol.runspec.RunSpec.merge``), math that miners compute too when they rebuild
theta_{r+1}. Settings of older configs: a threshold given at the top level (``segments_per_miner``) is
read with a warning naming its new place; ``merge_method``, ``clip_factor`` and ``trim`` are accepted,
with a warning, only where they say what the run file says, else the config does not load
(docs/operator-validator.md, "Settings that moved").
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from protocol.errors import ProtocolError
from protocol.node.settings import NodeConfig, load_settings
from protocol.wire.canonical import JSONFileError, read_json_file
from validator.errors import ValidatorConfigError
from validator.policy import VerifyPolicy

log = logging.getLogger(__name__)

ENV_PREFIX = "TESSERA_VALIDATOR_"

#: The settings that were the run file's merge section before it was the only one, -> its field.
RETIRED_MERGE_SETTINGS = {"merge_method": "method", "clip_factor": "clip_factor", "trim": "trim"}
#: Settings that no longer do anything, -> why (accepted with a warning, so an older config still loads).
IGNORED_SETTINGS = {
    "withhold_grace_seconds": "an unreachable miner is retried while its verification budget lasts "
    "(validator.schedule), not for a fixed grace",
}

__all__ = ["ValidatorConfig", "load_validator_config"]


@dataclass(frozen=True)
class ValidatorConfig(NodeConfig):
    """Everything a validator node needs to know: the shared node fields (``protocol.node.settings.NodeConfig``),
    the verification section ``verify`` and the settings below."""

    renamed_settings: ClassVar[Mapping[str, str]] = {
        f.name: f"verify.{f.name}" for f in dataclasses.fields(VerifyPolicy) if f.name != "device"
    }
    """Thresholds an older config gives at the top level (read, with a warning)."""
    retired_settings: ClassVar[Mapping[str, str]] = {
        **{
            k: f"the merge policy is the run file's merge.{v} (protocol.runspec)"
            for k, v in RETIRED_MERGE_SETTINGS.items()
        },
        **IGNORED_SETTINGS,
    }
    """Settings that are the run file's now, or do nothing (see :func:`load_validator_config`)."""

    key_env: str = "TESSERA_VALIDATOR_KEY"
    """Environment variable holding the validator's private key (if no keystore)."""
    data_dir: Path = Path("~/.tessera/validator")
    """State directory: verdicts, score salts, checkpoints."""
    stake: int = 1000 * 10**18
    """Stake to bond when registering."""
    peer_urls: tuple[str, ...] = ()
    """Fallback URLs of other validators (checkpoints, certificate signatures)."""
    slash: bool = True
    """Propose/vote slashing on provable failures."""
    dangerous_dev_tee: bool = False
    """Trust evidence from the *development* enclave whose seed is in ``$TESSERA_DEV_TEE_SEED`` (devnet
    only; never in production). The seed comes from the environment, never a flag or file: anyone who can
    read it can make quotes this validator accepts."""
    verify: VerifyPolicy = field(default_factory=VerifyPolicy)
    """Verification thresholds and budgets (``validator.policy.VerifyPolicy`` documents each); its
    ``device`` is this config's ``device``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.verify.device != self.device:
            if self.verify.device != VerifyPolicy.device:
                raise ValueError(
                    f"verify.device {self.verify.device!r} is the node's device: set device instead"
                )
            object.__setattr__(self, "verify", dataclasses.replace(self.verify, device=self.device))


def load_validator_config(
    toml_path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> ValidatorConfig:
    """Load the config; :class:`ValidatorConfigError` on anything invalid, and on a retired merge
    setting that differs from the run file's (or given where the run file cannot be read)."""
    retired: dict[str, Any] = {}
    try:
        cfg = load_settings(
            ValidatorConfig,
            toml_path=toml_path,
            table="validator",
            env=env,
            env_prefix=ENV_PREFIX,
            overrides=overrides,
            on_retired=retired.__setitem__,
        )
    except ProtocolError as exc:
        raise ValidatorConfigError(str(exc)) from exc
    for name in sorted(set(retired) & set(IGNORED_SETTINGS)):
        log.warning("%s: deprecated and ignored (%s); remove it", name, IGNORED_SETTINGS[name])
        del retired[name]
    if retired:
        _check_retired_merge(cfg, retired)
    return cfg


def _check_retired_merge(cfg: ValidatorConfig, given: Mapping[str, Any]) -> None:
    """An older config's merge settings: a warning where they say what the run file says, else
    :class:`ValidatorConfigError` (one validator merging its own way would co-sign nothing)."""
    from protocol.runspec import RunSpec

    names = ", ".join(sorted(given))
    them = "it" if len(given) == 1 else "them"
    try:
        merge = RunSpec.from_json(read_json_file(cfg.run_file)).merge
    except (JSONFileError, ProtocolError) as exc:
        raise ValidatorConfigError(
            f"{names}: not a validator setting any more (the merge policy is the run file's merge section), "
            f"and the run file cannot be read to compare ({exc}); remove {them}"
        ) from exc
    for key, value in sorted(given.items()):
        run_field = RETIRED_MERGE_SETTINGS[key]
        theirs = getattr(merge, run_field)
        try:
            same = (str(value) if key == "merge_method" else float(value)) == theirs
        except (TypeError, ValueError):
            same = False
        if not same:
            raise ValidatorConfigError(
                f"{key} = {value!r} differs from the run file's merge.{run_field} = {theirs!r}: the merge "
                f"policy is the run file's ({cfg.run_file}); remove {key} from the validator config"
            )
    log.warning(
        "%s: deprecated and ignored (the run file's merge section says the same); remove %s", names, them
    )


def load_validator_key(cfg: ValidatorConfig, env: Mapping[str, str] | None = None) -> str:
    """The validator's private key."""
    try:
        return cfg.private_key(env)
    except ProtocolError as exc:
        raise ValidatorConfigError(str(exc)) from exc
