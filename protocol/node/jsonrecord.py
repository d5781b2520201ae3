"""Dataclasses as the JSON objects a node persists: one typed attribute per key, checked on load.

The miner's and the validator's per-round records (``miner.state.MinerRoundRecord``,
``validator.state.RoundRecord``) are dataclasses whose every field but a few is ``X | None = None``:
``None`` means "not written yet", and such a field is absent from the file. :func:`record_from_json`
reads an object as any version of the node wrote it and refuses, with :class:`RecordError` naming the
key, a key the class does not declare or a value that is not of the field's type (``str``, ``int``,
``float`` (an integer is accepted), ``bool``, ``list[X]``, ``dict[str, X]``, ``X | Y``, ``Any``, a
dataclass (an object of its keys));
:func:`record_to_json` writes it back with the same keys, so a file read and written again is unchanged.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Collection
from typing import Any, TypeVar

from protocol.errors import ProtocolError

T = TypeVar("T")


class RecordError(ProtocolError):
    """A persisted record has a key its class does not declare, or a value of the wrong type."""


def record_to_json(record: Any, keep_none: Collection[str] = ()) -> dict[str, Any]:
    """``record``'s fields that are set (not None), under their names; a field in ``keep_none`` is
    written as null when None. A dataclass inside (a field's value, or in a list or dict of it) is written
    whole, as ``dataclasses.asdict`` writes it."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if value is not None or f.name in keep_none:
            out[f.name] = _plain(value)
    return out


def record_from_json(cls: type[T], doc: object, where: str) -> T:
    """An instance of the dataclass ``cls`` from the JSON object ``doc``; :class:`RecordError` (its
    message starts with ``where``) for anything but an object of ``cls``'s keys, its fields without a
    default among them, with values of their types (a dataclass-typed value is such an object itself)."""
    if not isinstance(doc, dict):
        raise RecordError(f"{where}: not an object")
    hints = _field_types(cls)
    unknown = sorted(set(doc) - set(hints))
    if unknown:
        raise RecordError(f"{where}: unknown keys {unknown} (written by a newer version?)")
    missing = sorted(_required(cls) - set(doc))
    if missing:
        raise RecordError(f"{where}: missing keys {missing}")
    for key, value in doc.items():
        if not _is_a(value, hints[key]):
            raise RecordError(f"{where}: {key!r} must be {_type_name(hints[key])}, not {value!r:.80}")
    built: T = _build(doc, cls)
    return built


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _required(cls: type) -> set[str]:
    """The fields of the dataclass ``cls`` without a default."""
    missing = dataclasses.MISSING
    return {f.name for f in dataclasses.fields(cls) if f.default is missing and f.default_factory is missing}


def _build(value: Any, tp: Any) -> Any:
    """``value``, already checked against ``tp`` by :func:`_is_a`, with its dataclass objects built."""
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = _field_types(tp)
        return tp(**{k: _build(v, hints[k]) for k, v in value.items()})
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        return next((_build(value, a) for a in args if _is_a(value, a)), value)
    if origin is list:
        return [_build(v, args[0]) for v in value]
    if origin is dict:
        return {k: _build(v, args[1]) for k, v in value.items()}
    return value


_FIELD_TYPES: dict[type, dict[str, Any]] = {}


def _field_types(cls: type) -> dict[str, Any]:
    """Field name -> type hint of the dataclass ``cls`` (read once per class)."""
    if cls not in _FIELD_TYPES:
        hints = typing.get_type_hints(cls)
        _FIELD_TYPES[cls] = {f.name: hints[f.name] for f in dataclasses.fields(cls)}
    return _FIELD_TYPES[cls]


def _is_a(value: object, tp: Any) -> bool:
    """Whether the JSON value ``value`` is of the type hint ``tp``."""
    if tp is Any:
        return True
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = _field_types(tp)
        return (
            isinstance(value, dict)
            and set(value) <= set(hints)
            and _required(tp) <= set(value)
            and all(_is_a(v, hints[k]) for k, v in value.items())
        )
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        return any(_is_a(value, a) for a in args)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if origin is list:
        return isinstance(value, list) and all(_is_a(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(
            isinstance(k, str) and _is_a(v, args[1]) for k, v in value.items()
        )
    raise TypeError(f"record field type {tp!r} is not one a JSON record may have")


def _type_name(tp: Any) -> str:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        return " or ".join(_type_name(a) for a in args)
    return tp.__name__ if isinstance(tp, type) and not args else str(tp).replace("typing.", "")
