"""How a codec cuts a tensor into chunks: the :class:`Layout` of a tensor (its chunks and what each keeps),
the :class:`ChunkGroup` runs of chunks in wire order, the flat chunking of the flattened tensor
(:func:`flat_layout`) and the grid of tiles that follow a tensor's rows and columns (:func:`tile_grid`,
:func:`shaped_tiles`), and the DCT matrix of a tile's side. The transforms (``training.codectransforms``)
are built from these.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from torch import Tensor

from training.exact import dct_basis

TILE = 64
"""Side of a DCT tile (``chunk`` must be ``TILE * TILE`` with the dct transform)."""

Keep = Callable[[int, int, int], int]
"""A codec's ``keep(width, chunk, topk)`` (``training.codecregistry.Codec.keep``)."""


@dataclass(frozen=True)
class Layout:
    """How a tensor of ``numel`` values is chunked and how many values each chunk keeps."""

    numel: int
    full_chunks: int
    tail: int
    k_full: int
    k_tail: int

    @property
    def n_chunks(self) -> int:
        """Chunks including a partial tail."""
        return self.full_chunks + (1 if self.tail else 0)

    @property
    def kept(self) -> int:
        """Values sent."""
        return self.full_chunks * self.k_full + (self.k_tail if self.tail else 0)


class ChunkGroup(NamedTuple):
    """A run of ``chunks`` chunks of one tensor, starting at chunk ``first``, each ``width`` values keeping
    ``keep``; a tile of ``rows x cols`` values where the basis needs the tile's sides."""

    first: int
    chunks: int
    width: int
    keep: int
    rows: int = TILE
    cols: int = TILE


def flat_layout(numel: int, chunk: int, topk: int, keep: Keep) -> Layout:
    """The layout of ``numel`` values cut into chunks of ``chunk`` (the last one partial)."""
    full, tail = divmod(numel, chunk)
    return Layout(numel, full, tail, keep(chunk, chunk, topk), keep(tail, chunk, topk))


def position_bits(width: int) -> int:
    """Bits of one position below ``width`` written plainly: ``ceil(log2(width))``, at least 1."""
    return max(1, math.ceil(math.log2(width)))


def _side(n: int) -> int:
    """The largest divisor of ``n`` that is at most :data:`TILE` (1 for an empty side)."""
    for d in range(min(n, TILE), 0, -1):
        if n % d == 0:
            return d
    return 1


def tile_grid(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """``_tile_grid`` of ``shape`` (cached: a validator asks for it about 100 times per update)."""
    return _tile_grid(tuple(shape))


@lru_cache(maxsize=4096)
def _tile_grid(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """``(R, C, tr, tc)`` of the ``shaped`` transform: the tensor seen as ``R x C`` (its first dimension by
    the rest; a vector or scalar is one row) cut into ``tr x tc`` tiles, each side the largest divisor up to
    :data:`TILE` of the tensor's, so no tile is padded."""
    if len(shape) >= 2:
        rows, cols = shape[0], math.prod(shape[1:])
    else:
        rows, cols = 1, math.prod(shape)
    return rows, cols, _side(rows), _side(cols)


def dct_matrix(n: int = TILE) -> Tensor:
    """Orthonormal DCT-II matrix ``D`` (``D @ D.T = I``) in fp32, the same bits on every machine
    (:func:`training.exact.dct_basis`)."""
    return dct_basis(n)


def shaped_tiles(x: Tensor) -> Tensor:
    """The ``shaped`` tiles of ``x`` in spatial order, ``[m, tr, tc]`` (row-major over the tile grid)."""
    rows, cols, tr, tc = tile_grid(tuple(x.shape))
    t = x.reshape(rows // tr, tr, cols // tc, tc).permute(0, 2, 1, 3)
    return t.reshape(-1, tr, tc)


def untile(tiles: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Inverse of :func:`shaped_tiles`: ``[m, tr * tc]`` back to ``shape``."""
    rows, cols, tr, tc = tile_grid(shape)
    t = tiles.reshape(rows // tr, cols // tc, tr, tc).permute(0, 2, 1, 3)
    return t.reshape(shape)
