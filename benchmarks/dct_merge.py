"""The merge averaged per DCT coefficient over the miners that sent it (screening).

Tessera's codec keeps the top-k coefficients of each ``shaped`` DCT tile, so its decoded update is dense in
parameter space: ``OuterConfig.merge='sender_mean'`` (a value divided by the miners that are non-zero
there) is then the plain mean, and a coefficient that one of n miners sent reaches the model divided by n
while its sender's error feedback already forgot it. SparseLoCo averages each kept position over its
senders; :func:`coefficient_merge` does the same in the DCT basis: each contribution (clipped as the
validators clip, ``training.merge``) is taken back to its tiles' coefficients, the coefficients it did not
send (magnitude below :data:`SENT_TOL` of its tile's largest) are dropped, each coefficient is divided by
the weight of its senders, and the sum goes back through the inverse DCT.

A research merger for :func:`benchmarks.training_runs.run_variant` (float64, not the validators' exact
merge: the coefficients are recovered with rounding error, hence the tolerance).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from training.codeclayout import dct_matrix, shaped_tiles, tile_grid
from training.merge import clip_contributions

SENT_TOL = 1e-4
"""A recovered coefficient counts as sent when its magnitude exceeds this share of its tile's largest
(2-bit values are at least a third of their tile's scale; rounding leaves about 1e-7)."""


def coefficients(x: Tensor) -> Tensor:
    """``x``'s ``shaped`` tiles in the DCT basis, ``[m, tr, tc]`` in float64."""
    tiles = shaped_tiles(x.detach().to("cpu", torch.float64))
    dr, dc = dct_matrix(tiles.shape[1]).double(), dct_matrix(tiles.shape[2]).double()
    return dr @ tiles @ dc.T


def from_coefficients(coef: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Inverse of :func:`coefficients` (fp32 out)."""
    rows, cols, tr, tc = tile_grid(shape)
    dr, dc = dct_matrix(tr).double(), dct_matrix(tc).double()
    tiles = dr.T @ coef @ dc
    return tiles.reshape(rows // tr, cols // tc, tr, tc).permute(0, 2, 1, 3).reshape(shape).float()


def coefficient_merge(
    contributions: Sequence[tuple[float, str, Mapping[str, Tensor]]], clip_factor: float = 2.0
) -> dict[str, Tensor]:
    """Per tensor and DCT coefficient, the weighted mean over the contributions that sent it."""
    ordered = sorted(((float(w), m, d) for w, m, d in contributions if w > 0), key=lambda t: int(t[1], 16))
    clipped = clip_contributions(ordered, clip_factor)
    sums: dict[str, Tensor] = {}
    senders: dict[str, Tensor] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for w, delta in clipped:
        for name, t in delta.items():
            shapes[name] = tuple(t.shape)
            coef = coefficients(t)
            if coef.shape[0] == 0:
                continue
            peak = coef.abs().amax(dim=(1, 2), keepdim=True)
            sent = (coef.abs() > SENT_TOL * peak).to(torch.float64)
            term, mask = coef * sent * w, sent * w
            sums[name] = sums[name] + term if name in sums else term
            senders[name] = senders[name] + mask if name in senders else mask
    out: dict[str, Tensor] = {}
    for name, shape in shapes.items():
        if name not in sums:
            out[name] = torch.zeros(shape)
            continue
        n = senders[name]
        out[name] = from_coefficients(sums[name] / torch.where(n > 0, n, torch.ones_like(n)), shape)
    return out
