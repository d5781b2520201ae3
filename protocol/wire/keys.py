"""Where signing keys come from: an encrypted keystore file or a named environment variable.

Never from a plain file: a private key is either encrypted at rest (an eth-account / geth keystore JSON,
its password from an environment variable or a prompt) or passed through the environment of the
process. The anvil development keys are for the local devnet only.
"""

from __future__ import annotations

import getpass
import json
import os
import sys
from pathlib import Path

from eth_account import Account
from eth_account.signers.local import LocalAccount

from protocol.errors import ProtocolError
from protocol.wire.canonical import JSONFileError, read_json_file

DEFAULT_PASSWORD_ENV = "TESSERA_KEYSTORE_PASSWORD"


class KeySourceError(ProtocolError):
    """No usable key: missing variable, unreadable keystore, wrong password."""


def account_from_env(name: str) -> LocalAccount:
    """The account whose 0x-hex private key is in environment variable ``name``."""
    value = os.environ.get(name)
    if not value:
        raise KeySourceError(f"environment variable {name} is not set (it should hold a 0x private key)")
    try:
        return Account.from_key(value.strip())
    except (ValueError, TypeError) as exc:
        raise KeySourceError(f"environment variable {name} does not hold a valid private key") from exc


def account_from_keystore(
    path: Path | str,
    password: str | None = None,
    password_env: str = DEFAULT_PASSWORD_ENV,
    prompt: bool = True,
) -> LocalAccount:
    """Decrypts an encrypted keystore JSON. The password comes from ``password``, else the environment
    variable ``password_env``, else an interactive prompt (if ``prompt``)."""
    p = Path(path)
    try:
        data = read_json_file(p)
    except JSONFileError as exc:
        if exc.missing:
            raise KeySourceError(f"keystore {p} not found") from exc
        raise KeySourceError(f"keystore {p} is not readable JSON: {exc}") from exc
    if not isinstance(data, dict) or "crypto" not in data and "Crypto" not in data:
        raise KeySourceError(f"{p} is not an encrypted keystore (plain key files are refused)")
    if password is None:
        password = os.environ.get(password_env)
    if password is None:
        if not prompt:
            raise KeySourceError(f"no keystore password: set {password_env}")
        if not sys.stdin.isatty():  # getpass would read a pipe, or end in EOFError with no input at all
            raise KeySourceError(
                f"no keystore password for {p}: set {password_env} (there is no terminal to ask)"
            )
        try:
            password = getpass.getpass(f"password for {p}: ")
        except EOFError as exc:
            raise KeySourceError(f"no keystore password for {p}: set {password_env}") from exc
    try:
        key = Account.decrypt(data, password)
    except ValueError as exc:
        raise KeySourceError(f"cannot decrypt keystore {p}: wrong password?") from exc
    return Account.from_key(key)


def write_keystore(account: LocalAccount, path: Path | str, password: str) -> Path:
    """Encrypts ``account`` into a keystore JSON at ``path`` (mode 0600)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    blob = Account.encrypt(account.key, password)
    p.write_text(json.dumps(blob))
    p.chmod(0o600)
    return p


def load_account(
    keystore: Path | str | None = None,
    key_env: str | None = None,
    password_env: str = DEFAULT_PASSWORD_ENV,
    prompt: bool = True,
) -> LocalAccount:
    """One entry point for the CLI: exactly one of ``keystore`` and ``key_env``."""
    if (keystore is None) == (key_env is None):
        raise KeySourceError("give exactly one key source: --keystore FILE or --key-env NAME")
    if keystore is not None:
        return account_from_keystore(keystore, password_env=password_env, prompt=prompt)
    assert key_env is not None
    return account_from_env(key_env)
