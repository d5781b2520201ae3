"""The Python bindings of ``protocol.chain`` declare exactly the compiled contract's errors and events.

The interface contracts/src/ITesseraNetwork.sol, which TesseraNetwork implements, is the one place errors
and events are declared (as OpenZeppelin's IERC20 declares the ERC-20 events); these tests fail when a
Solidity change is not mirrored in ``protocol/chain/errors.py`` or ``events.py`` (a new error would otherwise surface as an untyped name, a renamed event field as a ``TypeError`` at decode).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
from eth_utils import keccak

from protocol.chain import EVENT_TYPES, REVERT_TYPES, TOKEN_REVERT_TYPES, ChainEvent, InsufficientBalance
from protocol.chain.abi import abi_type, artifacts, decode_revert
from protocol.chain.events import _snake

CONTRACTS = Path(__file__).resolve().parents[2] / "contracts"
SOURCES = CONTRACTS / "src"
ABI = artifacts()["TesseraNetwork"]["abi"]
TOKEN_ABI = artifacts()["TesseraToken"]["abi"]


def _items(kind: str, abi: list = ABI) -> dict[str, dict]:  # type: ignore[type-arg]
    return {i["name"]: i for i in abi if i["type"] == kind}


def test_every_contract_error_has_a_declared_class_and_no_more() -> None:
    assert set(REVERT_TYPES) == set(_items("error"))
    for name, cls in REVERT_TYPES.items():
        assert cls.name == name and cls.__name__ == name
        assert cls.__doc__, f"{name} has no docstring"


def test_the_token_errors_are_typed_too() -> None:
    """Staking without tokens reverts inside the token; it used to read ``Unknown(data=0xf4d678b8)``."""
    assert set(TOKEN_REVERT_TYPES) == set(_items("error", TOKEN_ABI))
    exc = decode_revert("registerMiner", "0xf4d678b8")
    assert type(exc) is InsufficientBalance
    assert "fewer TSR tokens" in str(exc) and "tessera account status" in str(exc)


def test_every_contract_event_has_a_dataclass_with_its_fields_in_order() -> None:
    events = _items("event")
    assert set(EVENT_TYPES) == set(events)
    base = [f.name for f in dataclasses.fields(ChainEvent)]
    for name, cls in EVENT_TYPES.items():
        fields = [f.name for f in dataclasses.fields(cls)]
        assert fields[: len(base)] == base
        assert fields[len(base) :] == [_snake(i["name"]) for i in events[name]["inputs"]], name


def test_each_error_selector_decodes_to_its_own_class() -> None:
    for name, item in [*_items("error").items(), *_items("error", TOKEN_ABI).items()]:
        sig = f"{name}({','.join(abi_type(i) for i in item['inputs'])})"
        # all-zero arguments are valid for every static type here (enums decode 0 too)
        statics = all(not abi_type(i).endswith("[]") for i in item["inputs"])
        assert statics, sig
        data = keccak(text=sig)[:4] + b"\x00" * 32 * len(item["inputs"])
        exc = decode_revert("f", "0x" + data.hex())
        assert type(exc) is (REVERT_TYPES.get(name) or TOKEN_REVERT_TYPES[name]), sig
        assert list(exc.args_dict) == [i["name"] for i in item["inputs"]]


def _declared(source: str, kind: str) -> set[str]:
    return set(re.findall(rf"^\s*{kind}\s+(\w+)\s*\(", source, re.MULTILINE))


def test_errors_and_events_are_declared_once_in_the_interface() -> None:
    interface = (SOURCES / "ITesseraNetwork.sol").read_text()
    network = (SOURCES / "TesseraNetwork.sol").read_text()
    assert re.search(r"^contract TesseraNetwork is ITesseraNetwork\b", network, re.MULTILINE)
    for kind in ("error", "event"):
        assert _declared(network, kind) == set(), f"TesseraNetwork.sol declares its own {kind}s"
        assert _declared(interface, kind) == set(_items(kind)), kind


def _signature(item: dict[str, Any]) -> tuple[object, ...]:
    """An ABI error or event as the chain sees it: name, argument names and types, indexing."""
    inputs = tuple((i["name"], abi_type(i), i.get("indexed", False)) for i in item["inputs"])
    return item["type"], item["name"], inputs, item.get("anonymous", False)


def test_the_compiled_errors_and_events_are_those_bound() -> None:
    """The ABI forge builds from the sources carries the same errors and events as protocol/contracts.json.

    (``internalType`` is left out: it names the declaring contract, ``enum ITesseraNetwork.Phase``.)
    """
    out = CONTRACTS / "out" / "TesseraNetwork.sol" / "TesseraNetwork.json"
    if not out.exists():
        pytest.skip("contracts/out missing (run `cd contracts && npm run build`)")
    built = json.loads(out.read_text())["abi"]
    kinds = ("error", "event")
    assert [_signature(i) for i in built if i["type"] in kinds] == [
        _signature(i) for i in ABI if i["type"] in kinds
    ]
