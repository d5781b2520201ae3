"""The ``shaped`` transform's tiles of a 2-D tensor, as the benchmarks' codec arms cut them:
shared by :mod:`benchmarks.codec_arms` and :mod:`benchmarks.sparseloco`, which import each other's
nothing else."""

from __future__ import annotations

from torch import Tensor

from training.codeclayout import tile_grid


def tiles_of(x: Tensor) -> tuple[Tensor, tuple[int, int, int, int]]:
    """``x`` cut into the ``shaped`` transform's tiles, ``[m, tr, tc]``, and its :func:`tile_grid`."""
    rows, cols, tr, tc = tile_grid(tuple(x.shape))
    t = x.float().reshape(rows // tr, tr, cols // tc, tc).permute(0, 2, 1, 3).reshape(-1, tr, tc)
    return t, (rows, cols, tr, tc)


def untile(t: Tensor, shape: tuple[int, ...], grid: tuple[int, int, int, int]) -> Tensor:
    """Inverse of :func:`tiles_of`."""
    rows, cols, tr, tc = grid
    return t.reshape(rows // tr, cols // tc, tr, tc).permute(0, 2, 1, 3).reshape(shape)
