"""The Python bindings of ``protocol.chain`` declare exactly the compiled contract's errors and events.

The contract (contracts/src/TesseraNetwork.sol) is the one place errors and events are declared; these
tests fail when a Solidity change is not mirrored in ``protocol/chain/errors.py`` or ``events.py`` (a new
error would otherwise surface as an untyped name, a renamed event field as a ``TypeError`` at decode).
"""

from __future__ import annotations

import dataclasses

from eth_utils import keccak

from protocol.chain import (
    EVENT_TYPES,
    REVERT_TYPES,
    TOKEN_REVERT_TYPES,
    ChainEvent,
    InsufficientBalance,
    artifacts,
    decode_revert,
)
from protocol.chain.abi import _abi_type
from protocol.chain.events import _snake

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
        sig = f"{name}({','.join(_abi_type(i) for i in item['inputs'])})"
        # all-zero arguments are valid for every static type here (enums decode 0 too)
        statics = all(not _abi_type(i).endswith("[]") for i in item["inputs"])
        assert statics, sig
        data = keccak(text=sig)[:4] + b"\x00" * 32 * len(item["inputs"])
        exc = decode_revert("f", "0x" + data.hex())
        assert type(exc) is (REVERT_TYPES.get(name) or TOKEN_REVERT_TYPES[name]), sig
        assert list(exc.args_dict) == [i["name"] for i in item["inputs"]]
