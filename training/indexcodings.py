"""The index codings: how an indexed codec writes the sorted positions of each chunk's kept values (its
``idx`` field), one declaration per coding, by wire name (``CodecConfig.index``, the last entry of an
update header's ``c``).

An :class:`IndexCoding` says everything that differs between codings: the field's size (``bits``), how
the positions are written (``pack``) and read back (``unpack``), and what reading them costs a decoder
(``cost``, in the units of ``training.codeccost``). The shared path (``training.codecs``) hands every
coding the same things: the chunk groups ``(chunks, width, k)`` of a tensor in wire order (empty ones left
out) and ``width``, the bits of one plainly written position (``Transform.index_width``).

Adding an index coding is a declaration here, its name in a codec's ``indexes``
(``training.codecregistry``), and its tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from training.bitpack import elias_fano_bits, elias_fano_decode, elias_fano_encode, pack_bits, unpack_bits
from training.codeccost import NS_INDEX, NS_INDEX_BIT
from training.errors import CodecError

Group = tuple[int, int, int]
"""``(chunks, width, k)``: a run of chunks of a tensor that share a width and a number of kept values."""

FAST_WIDTHS = (1, 2, 4, 8, 12)
"""Widths :func:`training.bitpack.unpack_bits` reads on a vectorised path (others go bit by bit)."""


class IndexCoding(Protocol):
    """One index coding's declaration (see the module doc)."""

    @property
    def name(self) -> str:
        """Wire name."""
        ...

    def bits(self, groups: Sequence[Group], width: int) -> int:
        """Bits of the ``idx`` field of a tensor whose chunks are ``groups`` (the field is whole bytes)."""
        ...

    def pack(self, positions: Sequence[tuple[Tensor, int]], width: int) -> Tensor:
        """The ``idx`` field (uint8) of sorted positions ``[(idx [m, k], chunk width)]`` in wire order."""
        ...

    def unpack(self, data: Tensor, groups: Sequence[Group], width: int) -> Tensor:
        """The flat positions (int64) of an ``idx`` field; :class:`CodecError` if it is not canonical."""
        ...

    def cost(self, kept: int, width: int, nbytes: int) -> tuple[int, int]:
        """(transient bytes, nanoseconds) of unpacking ``kept`` positions from an ``idx`` field of
        ``nbytes`` bytes (``width``: the bits of one plainly written position)."""
        ...


@dataclass(frozen=True)
class Packed:
    """Every position at ``width`` bits (``ceil(log2(chunk width))``), little-endian bit order."""

    name: str = "packed"

    def bits(self, groups: Sequence[Group], width: int) -> int:
        """``width`` bits per kept value."""
        return sum(m * k for m, _, k in groups) * width

    def pack(self, positions: Sequence[tuple[Tensor, int]], width: int) -> Tensor:
        """The positions concatenated, then :func:`training.bitpack.pack_bits`."""
        flat = (
            torch.cat([i.reshape(-1) for i, _ in positions])
            if positions
            else torch.zeros(0, dtype=torch.int64)
        )
        return pack_bits(flat, width)

    def unpack(self, data: Tensor, groups: Sequence[Group], width: int) -> Tensor:
        """:func:`training.bitpack.unpack_bits` of every kept value's position."""
        return unpack_bits(data, width, sum(m * k for m, _, k in groups))

    def cost(self, kept: int, width: int, nbytes: int) -> tuple[int, int]:
        """Vectorised widths: the int64 positions and a temporary; others: the bits as uint8, then int64."""
        if width in FAST_WIDTHS:
            return 24 * kept, NS_INDEX * kept
        return 17 * width * kept, NS_INDEX_BIT * width * kept + NS_INDEX * kept


@dataclass(frozen=True)
class EliasFano:
    """The Elias-Fano code of each chunk's sorted positions (:func:`training.bitpack.elias_fano_encode`):
    about ``2 + log2(width / k)`` bits each instead of ``log2(width)``."""

    name: str = "elias-fano"

    def bits(self, groups: Sequence[Group], width: int) -> int:
        """:func:`training.bitpack.elias_fano_bits` per chunk."""
        return sum(m * elias_fano_bits(w, k) for m, w, k in groups)

    def pack(self, positions: Sequence[tuple[Tensor, int]], width: int) -> Tensor:
        """:func:`training.bitpack.elias_fano_encode`."""
        return elias_fano_encode(list(positions))

    def unpack(self, data: Tensor, groups: Sequence[Group], width: int) -> Tensor:
        """:func:`training.bitpack.elias_fano_decode` (refuses a field that is not canonical)."""
        return elias_fano_decode(data, list(groups))

    def cost(self, kept: int, width: int, nbytes: int) -> tuple[int, int]:
        """Every bit of the field unpacked as int64, the low parts and the bitmap's positions."""
        return 64 * nbytes + 8 * (width + 2) * kept, NS_INDEX * kept + NS_INDEX_BIT * 8 * nbytes


PACKED = Packed()
"""Positions at a fixed width."""
ELIAS_FANO = EliasFano()
"""Positions in the Elias-Fano code."""

INDEX_CODINGS: dict[str, IndexCoding] = {c.name: c for c in (PACKED, ELIAS_FANO)}
"""Every index coding by wire name."""


def index_coding_named(name: str) -> IndexCoding:
    """The declaration of the index coding called ``name``; :class:`CodecError` if there is none."""
    try:
        return INDEX_CODINGS[name]
    except KeyError:
        raise CodecError(f"unknown index coding {name!r} (known: {', '.join(INDEX_CODINGS)})") from None


def field_bytes(coding: IndexCoding, groups: Sequence[Group], width: int) -> int:
    """Bytes of the ``idx`` field: :meth:`IndexCoding.bits`, rounded up."""
    return math.ceil(coding.bits(groups, width) / 8)
