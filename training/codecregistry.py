"""The codecs a pseudo-gradient may be sent with: one :class:`Codec` declaration per codec, by wire name.

A declaration says everything that differs between codecs; the shared path (chunking, quantisation, the
fields) is ``training.codecs``'s and reads it from here, beside the transforms' declarations
(``training.codectransforms``) and the index codings' (``training.indexcodings``):

- ``name``: the wire name (``CodecConfig.name``, the first entry of an update header's ``c``);
- ``keep``: how many values a chunk of a given width keeps (:func:`training.codecs.layout_of`);
- ``select``: the encoder's choice of those values (:func:`training.codecs.encode`);
- ``indexed``: whether their sorted positions are sent (an ``idx`` field, :func:`training.codecs.field_specs`),
  so the decoder scatters them back, or in a transform's basis rebuilds the tile
  (:func:`training.codecs.decode`) and the decode cost counts the index unpacking and the scatter or
  inverse DCT (``protocol.wire.updatecost``);
- ``bound``: the per-chunk error bound without a change of basis (:func:`training.codecbounds.error_bound`);
- ``transforms``, ``indexes``: the names of the transforms and index codings it may be combined with
  (``CodecConfig`` refuses the rest; a name no codec lists is unknown).

Adding a codec is a declaration here (and its tests); the header's known names
(``protocol.wire.updateheader``) are this registry's keys. A configuration is resolved into its codec,
transform and index coding once (``training.codecs.resolve``). This module loads no torch: the run file's
configuration (``training.config``) is checked against it on the ``tessera --help`` path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from training.errors import CodecError

if TYPE_CHECKING:  # the declarations only call tensor methods: importing the registry loads no torch
    from torch import Tensor


@dataclass(frozen=True)
class Codec:
    """One codec's declaration (see the module doc for what each part drives)."""

    name: str
    """Wire name."""
    indexed: bool
    """Sends the sorted positions of the kept values of each chunk (an ``idx`` field)."""
    keep: Callable[[int, int, int], int]
    """``keep(width, chunk, topk)``: values kept of a chunk of ``width`` values (``chunk``, ``topk``: the
    codec's parameters)."""
    select: Callable[[Tensor, int], tuple[Tensor | None, Tensor]]
    """``select(chunks, k)``: for chunks ``[m, width]``, the kept values' positions ``[m, k]`` (sorted
    ascending; None when not ``indexed``) and the kept values ``[m, k]``."""
    bound: Callable[[Tensor, int, Tensor], Tensor]
    """``bound(magnitudes, k, q)``: per-chunk L-inf bound of the round trip without a transform, given the
    chunks' absolute values ``[m, width]`` and the quantisation step ``q`` per chunk."""
    transforms: tuple[str, ...]
    """Transforms it may be combined with (``CodecConfig.transform``)."""
    indexes: tuple[str, ...]
    """Index codings it may be combined with (``CodecConfig.index``)."""


# -- dense: every value, quantised ----------------------------------------------------------------------
def _dense_keep(width: int, chunk: int, topk: int) -> int:
    return width


def _dense_select(chunks: Tensor, k: int) -> tuple[Tensor | None, Tensor]:
    return None, chunks


def _dense_bound(magnitudes: Tensor, k: int, q: Tensor) -> Tensor:
    return q  # nothing is dropped: only the quantisation step


DENSE = Codec(
    name="dense",
    indexed=False,
    keep=_dense_keep,
    select=_dense_select,
    bound=_dense_bound,
    transforms=("none",),
    indexes=("packed",),
)
"""Every value of every chunk, quantised to ``bits``; no indices."""


# -- topk: the k largest magnitudes of each chunk ----------------------------------------------------------
def _topk_keep(width: int, chunk: int, topk: int) -> int:
    # a whole chunk keeps topk; a partial one (or a shaped tile) its share, rounded up, so small tensors
    # are not over-sent
    return min(width, math.ceil(topk * width / chunk))


def _topk_select(chunks: Tensor, k: int) -> tuple[Tensor | None, Tensor]:
    idx = chunks.abs().topk(k, dim=1, sorted=False).indices.sort(dim=1).values
    return idx, chunks.gather(1, idx)


def _topk_bound(magnitudes: Tensor, k: int, q: Tensor) -> Tensor:
    tau = magnitudes.topk(k, dim=1).values[:, -1]
    return tau.maximum(q)  # a dropped value is no larger than the smallest kept one


TOPK = Codec(
    name="topk",
    indexed=True,
    keep=_topk_keep,
    select=_topk_select,
    bound=_topk_bound,
    transforms=("none", "dct", "shaped", "tiles"),
    indexes=("packed", "elias-fano"),
)
"""The ``topk`` largest-magnitude values of each chunk and their positions."""


CODECS: dict[str, Codec] = {c.name: c for c in (DENSE, TOPK)}
"""Every codec by wire name."""


def codecs_allowing(part: str, value: object) -> list[str]:
    """The codecs whose declaration's ``part`` (``transforms`` or ``indexes``) lists ``value``: none for a
    name that is declared nowhere."""
    return [c.name for c in CODECS.values() if value in getattr(c, part)]


def codec_named(name: str) -> Codec:
    """The declaration of the codec called ``name``; :class:`CodecError` if there is none."""
    try:
        return CODECS[name]
    except KeyError:
        raise CodecError(f"unknown codec {name!r} (known: {', '.join(CODECS)})") from None
