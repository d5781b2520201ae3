"""Loading a node's typed config: defaults < TOML file < environment < command-line flags.

A role's config is a frozen dataclass of plain fields (str, int, float, bool, Path, tuple of str and
``X | None`` of those). :func:`load_settings` fills it from, in increasing priority, the dataclass
defaults, a TOML table, ``{PREFIX}{FIELD}`` environment variables (upper case), and explicit overrides
(the CLI flags that were given). Unknown TOML keys and unparsable values are :class:`SettingsError`.
Secrets are never read from the TOML file: fields named in ``secret_fields`` come from the environment
only.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from protocol.errors import ProtocolError

T = TypeVar("T")


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
            from training.errors import DeviceError

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


def load_settings(
    cls: type[T],
    *,
    toml_path: str | Path | None = None,
    table: str | None = None,
    env: Mapping[str, str] | None = None,
    env_prefix: str = "",
    overrides: Mapping[str, Any] | None = None,
    secret_fields: tuple[str, ...] = (),
) -> T:
    """Build ``cls`` from defaults, a TOML file (optionally one ``[table]`` of it), env and overrides."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    if toml_path is not None:
        try:
            doc = tomllib.loads(Path(toml_path).read_text())
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
        unknown = set(doc) - set(fields)
        if unknown:
            raise SettingsError(f"unknown keys in {toml_path}: {sorted(unknown)}")
        secret = set(doc) & set(secret_fields)
        if secret:
            raise SettingsError(f"{sorted(secret)} must come from the environment, not a file")
        values.update(doc)
    environ = os.environ if env is None else env
    for name in fields:
        key = f"{env_prefix}{name.upper()}"
        if key in environ:
            values[name] = environ[key]
    if env_prefix:
        _refuse_unknown_env(cls, environ, env_prefix, {**values, **(overrides or {})})
    for name, value in (overrides or {}).items():
        if name not in fields:
            raise SettingsError(f"unknown setting {name!r}")
        if value is not None:
            values[name] = value
    out = {name: _coerce(name, hints[name], v) for name, v in values.items()}
    try:
        return cls(**out)
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"invalid {cls.__name__}: {exc}") from exc


def _refuse_unknown_env(cls: type, environ: Mapping[str, str], prefix: str, given: Mapping[str, Any]) -> None:
    """A ``{prefix}*`` variable that names no setting is a typo that would be silently ignored: refuse it,
    naming the closest setting. Variables that a ``*_env`` setting points at (the key, a password) are not
    settings and are allowed."""
    import difflib

    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    pointed = {str(given.get(f, getattr(cls, f, ""))) for f in fields if f.endswith("_env")}
    unknown = sorted(
        k
        for k in environ
        if k.startswith(prefix) and k[len(prefix) :].lower() not in fields and k not in pointed
    )
    if unknown:
        hints = []
        for k in unknown:
            close = difflib.get_close_matches(k[len(prefix) :].lower(), sorted(fields), n=1)
            hints.append(f"{k}" + (f" (did you mean {prefix}{close[0].upper()}?)" if close else ""))
        raise SettingsError(f"unknown environment settings: {', '.join(hints)}")


def field_docs(cls: type) -> dict[str, str]:
    """Each dataclass field's docstring (the string literal under it), a subclass's over its base's; for
    ``--help``. Empty where the source is unavailable."""
    import ast
    import inspect

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
        from eth_account import Account

        password = environ.get(password_env) if password_env else None
        if password is None:
            raise SettingsError(f"keystore {keystore} needs its password in ${password_env}")
        try:
            key = Account.decrypt(Path(keystore).read_text(), password)
        except (OSError, ValueError) as exc:
            raise SettingsError(f"cannot decrypt keystore {keystore}: {exc}") from exc
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
