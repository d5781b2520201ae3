"""Canonical JSON: one byte string per value, so digests over headers are well defined.

Rules: UTF-8 of ``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
allow_nan=False)``; values are objects with string keys, lists, strings, integers, booleans and null;
floats are refused (their text form is not unique across implementations). ``loads_canonical`` accepts
only bytes that re-encode to themselves.
"""

from __future__ import annotations

import json
from typing import Any

from protocol.errors import ProtocolError


class CanonicalJSONError(ProtocolError):
    """A value cannot be canonical JSON, or bytes are not in canonical form."""


def _check(value: Any, depth: int = 0) -> None:
    if depth > 32:
        raise CanonicalJSONError("nesting deeper than 32")
    if isinstance(value, float):
        raise CanonicalJSONError("floats are not allowed in canonical JSON")
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise CanonicalJSONError("object keys must be strings")
            _check(v, depth + 1)
    elif isinstance(value, list | tuple):
        for v in value:
            _check(v, depth + 1)
    elif not (value is None or isinstance(value, bool | int | str)):
        raise CanonicalJSONError(f"type {type(value).__name__} is not allowed in canonical JSON")


def dumps_canonical(value: Any) -> bytes:
    """The canonical bytes of ``value``."""
    _check(value)
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode()


def loads_canonical(data: bytes) -> Any:
    """Parse canonical JSON bytes; raises :class:`CanonicalJSONError` if they are not canonical."""
    try:
        value = json.loads(data.decode("ascii"), parse_float=_reject_float, parse_constant=_reject_float)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CanonicalJSONError(f"not canonical JSON: {exc}") from exc
    if dumps_canonical(value) != data:
        raise CanonicalJSONError("JSON bytes are not in canonical form")
    return value


def _reject_float(text: str) -> Any:
    raise CanonicalJSONError(f"float {text!r} in canonical JSON")
