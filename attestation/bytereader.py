"""A bounds-checked cursor over untrusted bytes: every read names the field it reads."""

from __future__ import annotations

from attestation.errors import MalformedEvidenceError


class ByteReader:
    """Reads little-endian fields from ``data``; a read past the end raises ``MalformedEvidenceError``."""

    __slots__ = ("_data", "_pos", "_what")

    def __init__(self, data: bytes, what: str = "evidence", pos: int = 0) -> None:
        self._data = data
        self._pos = pos
        self._what = what

    @property
    def pos(self) -> int:
        """The offset of the next byte to read."""
        return self._pos

    @property
    def remaining(self) -> int:
        """The number of bytes left after the cursor."""
        return len(self._data) - self._pos

    def take(self, n: int, field: str) -> bytes:
        """Read ``n`` bytes for ``field``."""
        if n < 0 or self._pos + n > len(self._data):
            raise MalformedEvidenceError(
                f"{self._what} is truncated: {field} needs {n} bytes at offset {self._pos}, "
                f"{max(0, len(self._data) - self._pos)} left; send the complete {self._what}"
            )
        out = self._data[self._pos : self._pos + n]
        self._pos += n
        return out

    def u8(self, field: str) -> int:
        """Read one unsigned byte."""
        return self.take(1, field)[0]

    def u16(self, field: str) -> int:
        """Read a little-endian u16."""
        return int.from_bytes(self.take(2, field), "little")

    def u24(self, field: str) -> int:
        """Read a little-endian u24."""
        return int.from_bytes(self.take(3, field), "little")

    def u32(self, field: str) -> int:
        """Read a little-endian u32."""
        return int.from_bytes(self.take(4, field), "little")

    def u64(self, field: str) -> int:
        """Read a little-endian u64."""
        return int.from_bytes(self.take(8, field), "little")

    def rest(self) -> bytes:
        """Read everything left (may be empty)."""
        out = self._data[self._pos :]
        self._pos = len(self._data)
        return out
