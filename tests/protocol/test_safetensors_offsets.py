"""F3 (docs/security.md): unchecked safetensors ``data_offsets`` must raise the update format's typed errors."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
import torch
from safetensors.torch import save as st_save

from protocol import update as wire

CAPS = wire.UpdateCaps()


def _payload(meta: dict[str, Any], data: bytes) -> bytes:
    head = json.dumps(meta).encode()
    return struct.pack("<Q", len(head)) + head + data


def _entry(begin: Any, end: Any) -> dict[str, Any]:
    return {"dtype": "U8", "shape": [1], "data_offsets": [begin, end]}


def test_valid_safetensors_payload_passes() -> None:
    wire._safetensors_header_len(st_save({"a": torch.zeros(3), "b": torch.ones(2, dtype=torch.uint8)}), CAPS)
    wire._safetensors_header_len(_payload({"__metadata__": {"k": "v"}, "a": _entry(0, 1)}, b"\0"), CAPS)
    wire._safetensors_header_len(_payload({}, b""), CAPS)


@pytest.mark.parametrize(
    ("meta", "data"),
    [
        ({"a": []}, b""),  # entry not an object (was TypeError)
        ({"a": "x"}, b""),  # (was TypeError)
        ({"a": {"dtype": "U8"}}, b""),  # no data_offsets (was KeyError)
        ({"a": {"data_offsets": []}}, b""),  # (was IndexError)
        ({"a": {"data_offsets": [0]}}, b""),
        ({"a": {"data_offsets": [0, 1, 2]}}, b"\0\0"),
        ({"a": {"data_offsets": {"1": 1}}}, b"\0"),
        ({"a": {"data_offsets": "01"}}, b"\0"),
        ({"a": _entry(0, "1")}, b"\0"),  # string offset
        ({"a": _entry(0, "x")}, b"\0"),  # (was ValueError)
        ({"a": _entry(0, 1.0)}, b"\0"),
        ({"a": _entry(0, True)}, b"\0"),  # bool is not an int here
        ({"a": _entry(None, 1)}, b"\0"),
        ({"a": _entry(-1, 1)}, b"\0"),
        ({"a": _entry(2, 1)}, b"\0\0"),  # reversed
        ({"a": _entry(0, 2), "b": _entry(1, 3)}, b"\0\0\0"),  # overlap
        ({"a": _entry(0, 1), "b": _entry(2, 3)}, b"\0\0\0"),  # gap
        ({"a": _entry(1, 2)}, b"\0\0"),  # does not start at 0
        ({"a": _entry(0, 1)}, b"\0\0"),  # trailing data not covered
    ],
)
def test_malformed_offsets_are_invalid_payload(meta: dict[str, Any], data: bytes) -> None:
    with pytest.raises(wire.InvalidPayload):
        wire._safetensors_header_len(_payload(meta, data), CAPS)


def test_offsets_past_the_data_are_truncated() -> None:
    with pytest.raises(wire.TruncatedUpdate):
        wire._safetensors_header_len(_payload({"a": _entry(0, 10)}, b"\0"), CAPS)
    with pytest.raises(wire.TruncatedUpdate):
        wire._safetensors_header_len(_payload({"a": _entry(0, 2**70)}, b"\0"), CAPS)


def test_header_not_json_or_not_object() -> None:
    for head in (b"{", b"[1]", b"\xff"):
        with pytest.raises(wire.InvalidPayload):
            wire._safetensors_header_len(struct.pack("<Q", len(head)) + head, CAPS)
