"""Loading a node's typed config: defaults < TOML file < environment < command-line flags.

A role's config is a frozen dataclass of plain fields (str, int, float, bool, Path, tuple of str and
``X | None`` of those) and of *sections*: a field whose type is itself such a dataclass (torchtitan's
sectioned ``JobConfig``), e.g. ``ValidatorConfig.verify``. Each setting has one name, ``field`` or
``section.field`` (:func:`setting_types`); a section's field that the config also has at the top level
(``device``) is set there only. :func:`load_settings` fills the config from, in increasing priority, the
dataclass defaults, a TOML table (a section is its sub-table: ``[validator.verify]``),
``{PREFIX}{SETTING}`` environment variables (upper case, the dot an underscore:
``TESSERA_VALIDATOR_VERIFY_SEGMENTS_PER_MINER``), and explicit overrides (the CLI flags that were given,
``--verify.segments-per-miner``). Unknown TOML keys and unparsable values are :class:`SettingsError`.
Secrets are never read from the TOML file: fields named in ``secret_fields`` come from the environment
only.

A config class may name settings that moved or went away, so that an old config is never silently
ignored: ``renamed_settings`` (a class attribute, old name -> new name) are still read, with a warning
naming the new spelling; ``retired_settings`` (old name -> why) are refused with a one-line
:class:`SettingsError`, unless the loader is given ``on_retired`` to judge them itself.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import logging
import os
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from eth_account import Account

from protocol.errors import ProtocolError
from training.errors import DeviceError

T = TypeVar("T")

log = logging.getLogger(__name__)


class SettingsError(ProtocolError):
    """A config file, environment variable or flag is invalid."""


@dataclasses.dataclass(frozen=True)
class NodeConfig:
    """The fields every node role shares; ``miner.config.MinerConfig`` and
    ``validator.config.ValidatorConfig`` extend it and set their own defaults where a role differs."""

    run_file: Path = Path("run.json")
    """The run specification (``protocol.runspec``) shared by every node of the run."""
    deployment: Path | None = None
    """Deployment file written by ``tessera contracts deploy`` (chain id, contract address, RPC)."""
    rpc_url: str = ""
    """JSON-RPC endpoint (empty: the deployment file's)."""
    key_env: str = "TESSERA_NODE_KEY"
    """Environment variable holding the node's private key (if no keystore)."""
    keystore: Path | None = None
    """Encrypted JSON keystore (its password in ``keystore_password_env``)."""
    keystore_password_env: str = "TESSERA_KEYSTORE_PASSWORD"
    """Environment variable holding the keystore password."""
    data_dir: Path = Path("~/.tessera/node")
    """State directory."""
    host: str = "127.0.0.1"
    """HTTP listen address; the DHT listens there too when it is an IP address (``0.0.0.0``: every
    interface), else on 127.0.0.1."""
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
    stake: int = 0
    """Stake to bond when registering (token base units)."""
    poll_interval: float = 0.5
    """Seconds between looks at the chain."""
    fetch_timeout: float = 20.0
    """Seconds per HTTP fetch."""
    fetch_attempts: int = 3
    """Fetch attempts over all peers, with exponential backoff."""
    threads: int = 1
    """torch CPU threads."""
    device: str = "cpu"
    """Where training, replay and loss evaluation compute: ``cpu``, ``cuda`` or ``cuda:N`` (torch's
    deterministic settings are applied either way, ``training.device``). Updates, transcript states and
    digests stay CPU fp32 whatever the device; a GPU's results differ from a CPU's in the last bits, which
    validators accept within the replay tolerances (docs/operator-miner.md, "Running on a GPU")."""

    def __post_init__(self) -> None:
        # cpu needs no torch; cuda is checked against the machine here so a bad setting fails at load
        if self.device != "cpu":
            from training.device import resolve_device

            try:
                resolve_device(self.device)
            except DeviceError as exc:
                raise ValueError(str(exc)) from exc

    def private_key(self, env: Mapping[str, str] | None = None) -> str:
        """The node's private key, from its keystore or ``key_env`` (:class:`SettingsError` if neither)."""
        return resolve_private_key(
            key_env=self.key_env, keystore=self.keystore, password_env=self.keystore_password_env, env=env
        )


def _coerce(name: str, tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None or value == "":
            return None
        return _coerce(name, args[0], value)
    if origin is tuple:
        (inner, *_rest) = typing.get_args(tp) or (str,)
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list | tuple):
            raise SettingsError(f"{name}: expected a list, got {value!r}")
        return tuple(_coerce(name, inner, v) for v in value)
    try:
        if tp is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("1", "true", "yes", "on"):
                return True
            if str(value).lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if tp is int:
            if isinstance(value, bool):
                raise ValueError(value)
            return int(value)
        if tp is float:
            return float(value)
        if tp is Path:
            return Path(str(value)).expanduser()
        if tp is str:
            if not isinstance(value, str | int | float):
                raise ValueError(value)
            return str(value)
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"{name}: cannot read {value!r} as {getattr(tp, '__name__', tp)}") from exc
    return value


def sections(cls: type) -> dict[str, type]:
    """``cls``'s section fields (a field typed by a dataclass) -> their dataclass."""
    hints = typing.get_type_hints(cls)
    return {
        f.name: hints[f.name]
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if isinstance(hints[f.name], type) and dataclasses.is_dataclass(hints[f.name])
    }


def setting_types(cls: type) -> dict[str, Any]:
    """Every setting of ``cls``, named ``field`` or ``section.field``, -> its type. A section's field that
    ``cls`` also has at the top level is not a setting of the section (the config passes it down)."""
    hints = typing.get_type_hints(cls)
    secs = sections(cls)
    out: dict[str, Any] = {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.name not in secs}  # type: ignore[arg-type]
    for sec, scls in secs.items():
        shints = typing.get_type_hints(scls)
        for f in dataclasses.fields(scls):  # type: ignore[arg-type]
            if f.name not in out:
                out[f"{sec}.{f.name}"] = shints[f.name]
    return out


def setting_defaults(cls: type) -> dict[str, Any]:
    """Every setting of ``cls`` (as :func:`setting_types` names it) -> its default."""
    inst_defaults: dict[str, Any] = {}
    for name in setting_types(cls):
        owner, _, field_name = name.rpartition(".")
        klass = sections(cls)[owner] if owner else cls
        f = {f.name: f for f in dataclasses.fields(klass)}[field_name]  # type: ignore[arg-type]
        if f.default is not dataclasses.MISSING:
            inst_defaults[name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            inst_defaults[name] = f.default_factory()
        else:
            inst_defaults[name] = None
    return inst_defaults


def env_name(prefix: str, setting: str) -> str:
    """The environment variable of ``setting``: ``TESSERA_VALIDATOR_`` + ``verify.min_own_gain`` -> ``..._VERIFY_MIN_OWN_GAIN``."""
    return f"{prefix}{setting.replace('.', '_').upper()}"


def load_settings(
    cls: type[T],
    *,
    toml_path: str | Path | None = None,
    table: str | None = None,
    env: Mapping[str, str] | None = None,
    env_prefix: str = "",
    overrides: Mapping[str, Any] | None = None,
    secret_fields: tuple[str, ...] = (),
    on_retired: Callable[[str, Any], None] | None = None,
) -> T:
    """Build ``cls`` from defaults, a TOML file (optionally one ``[table]`` of it), env and overrides.
    A retired setting that is given goes to ``on_retired(name, value)`` (without it: :class:`SettingsError`)."""
    types_ = setting_types(cls)
    renamed: Mapping[str, str] = getattr(cls, "renamed_settings", {})
    retired: Mapping[str, str] = getattr(cls, "retired_settings", {})
    values: dict[str, Any] = {}

    def take(layer: Mapping[str, Any], source: str) -> None:
        for name, value in layer.items():
            if name in retired:
                if on_retired is None:
                    raise SettingsError(f"{name} ({source}) is no longer a setting: {retired[name]}")
                on_retired(name, value)
                continue
            if name in renamed:
                log.warning("setting %s (%s) is deprecated: it is %s now", name, source, renamed[name])
                if renamed[name] in layer:
                    continue  # the new spelling, given beside it, wins
                name = renamed[name]
            values[name] = value

    if toml_path is not None:
        doc = _read_table(cls, Path(toml_path), table)
        unknown = set(doc) - set(types_) - set(renamed) - set(retired)
        if unknown:
            raise SettingsError(f"unknown keys in {toml_path}: {sorted(unknown)}")
        secret = set(doc) & set(secret_fields)
        if secret:
            raise SettingsError(f"{sorted(secret)} must come from the environment, not a file")
        take(doc, str(toml_path))
    environ = os.environ if env is None else env
    take(
        {
            name: environ[env_name(env_prefix, name)]
            for name in (*types_, *renamed, *retired)
            if env_name(env_prefix, name) in environ
        },
        "environment",
    )
    if env_prefix:
        _refuse_unknown_env(cls, environ, env_prefix, {**values, **(overrides or {})})
    given = {name: value for name, value in (overrides or {}).items() if value is not None}
    for name in given:
        if name not in types_ and name not in renamed and name not in retired:
            raise SettingsError(f"unknown setting {name!r}")
    take(given, "flag")
    return _build(cls, {name: _coerce(name, types_[name], v) for name, v in values.items()})


def _build(cls: type[T], values: dict[str, Any]) -> T:
    """``cls`` from coerced settings, each section's (``section.field``) gathered into its dataclass."""
    try:
        for sec, scls in sections(cls).items():
            inner = {k.partition(".")[2]: values.pop(k) for k in list(values) if k.startswith(sec + ".")}
            if inner:
                values[sec] = scls(**inner)
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"invalid {cls.__name__}: {exc}") from exc


def _read_table(cls: type, toml_path: Path, table: str | None) -> dict[str, Any]:
    """The settings in ``toml_path`` (its ``[table]`` if named), a section's sub-table flattened to
    ``section.field`` keys."""
    try:
        doc = tomllib.loads(toml_path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"cannot read config file {toml_path}: {exc}") from exc
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise SettingsError(f"config file {toml_path} is not valid TOML: {exc}") from exc
    if table is not None:
        if table not in doc and any(isinstance(v, dict) for v in doc.values()):
            # e.g. a validator's config given to a miner: its settings would all be silently ignored
            others = sorted(k for k, v in doc.items() if isinstance(v, dict))
            raise SettingsError(
                f"{toml_path} has no [{table}] table (it has {', '.join(f'[{k}]' for k in others)})"
            )
        doc = doc.get(table, {})
        if not isinstance(doc, dict):
            raise SettingsError(f"[{table}] in {toml_path} must be a table")
    flat: dict[str, Any] = {}
    for key, value in doc.items():
        if key in sections(cls):
            if not isinstance(value, dict):
                raise SettingsError(f"{key} in {toml_path} must be a table ([{table}.{key}])")
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return flat


def _refuse_unknown_env(cls: type, environ: Mapping[str, str], prefix: str, given: Mapping[str, Any]) -> None:
    """A ``{prefix}*`` variable that names no setting is a typo that would be silently ignored: refuse it,
    naming the closest setting. Variables that a ``*_env`` setting points at (the key, a password) are not
    settings and are allowed."""
    names = [
        *setting_types(cls),
        *getattr(cls, "renamed_settings", {}),
        *getattr(cls, "retired_settings", {}),
    ]
    known = {env_name(prefix, n)[len(prefix) :] for n in names}
    pointed = {str(given.get(f, getattr(cls, f, ""))) for f in names if f.endswith("_env")}
    unknown = sorted(
        k for k in environ if k.startswith(prefix) and k[len(prefix) :] not in known and k not in pointed
    )
    if unknown:
        hints = []
        for k in unknown:
            close = difflib.get_close_matches(k[len(prefix) :], sorted(known), n=1)
            hints.append(f"{k}" + (f" (did you mean {prefix}{close[0]}?)" if close else ""))
        raise SettingsError(f"unknown environment settings: {', '.join(hints)}")


def field_docs(cls: type) -> dict[str, str]:
    """Each dataclass field's docstring (the string literal under it), a subclass's over its base's; for
    ``--help``. Empty where the source is unavailable."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(inspect.getsource(klass))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for stmt, nxt in zip(body, body[1:], strict=False):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[stmt.target.id] = " ".join(nxt.value.value.split())
    return docs


def setting_docs(cls: type) -> dict[str, str]:
    """Each setting's docstring (:func:`field_docs`), named as :func:`setting_types` names it."""
    docs = field_docs(cls)
    for sec, scls in sections(cls).items():
        docs.update({f"{sec}.{k}": v for k, v in field_docs(scls).items()})
    return {name: docs.get(name, "") for name in setting_types(cls)}


def resolve_private_key(
    *,
    key_env: str,
    keystore: Path | None = None,
    password_env: str = "",
    env: Mapping[str, str] | None = None,
) -> str:
    """A private key from an encrypted keystore (password from ``password_env``) or from ``key_env``.

    Keys are never read from the config file. Raises :class:`SettingsError` with what to set.
    """
    environ = os.environ if env is None else env
    if keystore is not None:
        password = environ.get(password_env) if password_env else None
        if password is None:
            raise SettingsError(f"keystore {keystore} needs its password in ${password_env}")
        try:
            data = Path(keystore).read_text()
        except OSError as exc:
            raise SettingsError(f"cannot read keystore {keystore}: {exc}") from exc
        try:
            key = Account.decrypt(data, password)
        except ValueError as exc:  # eth-account says "MAC mismatch" for a wrong password
            why = "wrong password?" if "MAC mismatch" in str(exc) else str(exc)
            raise SettingsError(f"cannot decrypt keystore {keystore}: {why}") from exc
        return "0x" + bytes(key).hex()
    value = environ.get(key_env)
    if not value:
        raise SettingsError(f"no key: set ${key_env} or pass --keystore (with its password in an env var)")
    value = value.strip()
    if not value.startswith("0x"):
        value = "0x" + value
    if len(value) != 66:
        raise SettingsError(f"${key_env} is not a 32-byte hex private key")
    return value
