"""Canonical JSON: one byte string per value, so digests over headers are well defined.

Rules: UTF-8 of ``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
allow_nan=False)``; values are objects with string keys, lists, strings, integers, booleans and null;
floats are refused (their text form is not unique across implementations). ``loads_canonical`` accepts
only bytes that re-encode to themselves.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from protocol.errors import ProtocolError

#: Deepest nesting of arrays/objects accepted in any JSON the protocol parses (canonical or not).
MAX_JSON_DEPTH = 32

# A JSON string (the unrolled-loop form: linear, no catastrophic backtracking) and a non-bracket run.
_STR_BYTES = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_STR_TEXT = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET_BYTES = re.compile(rb"[^\[\]{}]+")
_NOT_BRACKET_TEXT = re.compile(r"[^\[\]{}]+")


class CanonicalJSONError(ProtocolError):
    """A value cannot be canonical JSON, or bytes are not in canonical form."""


class JSONNestingError(CanonicalJSONError):
    """JSON text nests arrays/objects deeper than :data:`MAX_JSON_DEPTH` (refused before parsing)."""


def json_depth(data: bytes | bytearray | memoryview | str) -> int:
    """The deepest array/object nesting of JSON text, by one linear scan (brackets inside strings skipped).

    Meant to run *before* ``json.loads`` on untrusted bytes: CPython's C decoder recurses once per level
    and, once the recursion limit has been raised (``py_ecc`` raises it at import), overflows the C stack
    (SIGSEGV) instead of raising ``RecursionError``. On malformed text (an unterminated string) the scan
    may over-count; it never under-counts what ``json.loads`` would descend into.
    """
    if isinstance(data, str):
        brackets = _NOT_BRACKET_TEXT.sub("", _STR_TEXT.sub("", data)).encode("ascii")
    else:
        brackets = _NOT_BRACKET_BYTES.sub(b"", _STR_BYTES.sub(b"", bytes(data)))
    depth = deepest = 0
    for c in brackets:
        if c in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > deepest:
                deepest = depth
        else:
            depth -= 1
    return deepest


def check_json_depth(data: bytes | bytearray | memoryview | str, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise :class:`JSONNestingError` if ``data`` nests deeper than ``limit``; call before ``json.loads``."""
    depth = json_depth(data)
    if depth > limit:
        raise JSONNestingError(f"JSON nests {depth} levels deep (limit {limit})")


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
    check_json_depth(data)
    try:
        value = json.loads(data.decode("ascii"), parse_float=_reject_float, parse_constant=_reject_float)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CanonicalJSONError(f"not canonical JSON: {exc}") from exc
    if dumps_canonical(value) != data:
        raise CanonicalJSONError("JSON bytes are not in canonical form")
    return value


def _reject_float(text: str) -> Any:
    raise CanonicalJSONError(f"float {text!r} in canonical JSON")


class JSONFileError(CanonicalJSONError):
    """A JSON file could not be read or parsed; ``missing``: it does not exist."""

    def __init__(self, message: str, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


def read_json_file(path: str | Path) -> Any:
    """The JSON value of a local file (state, run, deployment, keystore), its nesting checked before it is
    parsed (:func:`check_json_depth`); :class:`JSONFileError` with the reason otherwise."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError as exc:
        raise JSONFileError(f"{p} not found", missing=True) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise JSONFileError(str(exc)) from exc
    try:
        check_json_depth(text)
        return json.loads(text)
    except (ValueError, RecursionError, CanonicalJSONError) as exc:
        raise JSONFileError(str(exc)) from exc
