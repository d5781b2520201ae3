"""The compiled contracts (``protocol/contracts.json``) and revert decoding against their ABI."""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eth_abi import decode as abi_decode
from eth_utils import keccak, to_checksum_address

from protocol.chain.errors import REVERT_TYPES, TOKEN_REVERT_TYPES, ChainError, ContractRevert, UnknownRevert
from protocol.chain.values import Role
from protocol.rounds.phases import Phase

log = logging.getLogger(__name__)

ARTIFACTS = Path(__file__).parent.parent / "contracts.json"


@functools.cache
def artifacts() -> dict[str, Any]:
    """ABIs and bytecode of TesseraNetwork and TesseraToken (protocol/contracts.json)."""
    try:
        return dict(json.loads(ARTIFACTS.read_text()))
    except (OSError, json.JSONDecodeError) as exc:
        raise ChainError(f"cannot read {ARTIFACTS}: {exc} (run `cd contracts && npm run build`)") from exc


def abi_type(inp: Mapping[str, Any]) -> str:
    """The canonical ABI type of one input (tuples spelt out as ``(t1,t2)``), as in a function signature."""
    t = str(inp["type"])
    if t.startswith("tuple"):
        return "(" + ",".join(abi_type(c) for c in inp["components"]) + ")" + t[5:]
    return t


@functools.cache
def _error_table() -> dict[bytes, tuple[str, list[str], list[str]]]:
    table: dict[bytes, tuple[str, list[str], list[str]]] = {
        keccak(text="Error(string)")[:4]: ("Error", ["string"], ["message"]),
        keccak(text="Panic(uint256)")[:4]: ("Panic", ["uint256"], ["code"]),
    }
    # the token's errors first: a network error with the same selector (none today) would win
    abis = artifacts()["TesseraToken"]["abi"] + artifacts()["TesseraNetwork"]["abi"]
    for item in abis:
        if item["type"] != "error":
            continue
        types = [abi_type(i) for i in item["inputs"]]
        sel = keccak(text=f"{item['name']}({','.join(types)})")[:4]
        table[sel] = (item["name"], types, [i["name"] for i in item["inputs"]])
    return table


def decode_revert(function: str, data: Any) -> ContractRevert:
    """Turns raw revert data into the matching :class:`ContractRevert` subclass."""
    if isinstance(data, dict):  # some providers nest the payload
        data = data.get("data")
    if isinstance(data, str):
        m = re.search(r"0x[0-9a-fA-F]*", data)
        raw = bytes.fromhex(m.group(0)[2:]) if m else b""
    else:
        raw = bytes(data or b"")
    table = _error_table()
    entry = table.get(raw[:4])
    if entry is None:
        return UnknownRevert(function, {"data": raw}, raw.hex())
    name, types, names = entry
    try:
        values = abi_decode(types, raw[4:])
    except Exception:  # malformed payload
        return UnknownRevert(function, {"data": raw}, raw.hex())
    out: dict[str, Any] = {}
    for n, t, v in zip(names, types, values, strict=True):
        if t == "address":
            v = to_checksum_address(v)
        elif n in ("expected", "current", "phase") and name in ("WrongPhase", "PhaseClosed", "PhaseNotOver"):
            v = Phase(v)
        elif n in ("role", "expected") and name in ("NotRole", "AlreadyRegistered"):
            v = Role(v)
        out[n] = v
    cls = REVERT_TYPES.get(name) or TOKEN_REVERT_TYPES.get(name)
    if cls is None:  # an error of a newer ABI than this client's classes: still typed, still named
        cls = type(name, (ContractRevert,), {"name": name})
    return cls(function, out, raw.hex())
