"""An independent implementation of the merge's definition (NumPy, not torch) gives the same bits.

The merge, the outer step and the codec decoder are specified as IEEE-754 operations in a fixed order
(docs/decisions/reproducible-merge.md). If that holds, any faithful implementation of the same sequence,
with other libraries and other kernels, must reproduce the pinned digests exactly: this one rebuilds the
fixed case of ``tests/support/merge_case.py`` with NumPy's own loops (its SIMD dispatch is its own, not
ATen's), so it checks the specification, not only this machine's kernels.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch

from tests.support.merge_case import RUNS, inputs
from training.bitpack import unpack_bits
from training.codecs import Encoded, index_bits, layout
from training.config import CodecConfig
from training.digest import state_digest
from training.exact import dct_basis_fixed, fixed_shift

GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "training" / "golden" / "golden.json").read_text())

TILE = 64


def np_decode(enc: Encoded, cfg: CodecConfig) -> np.ndarray:
    """The decoder's definition in NumPy (quantised codecs only, as the merge case uses)."""
    lay = layout(math.prod(enc.shape), cfg)
    levels = (1 << cfg.bits) - 1
    codes = unpack_bits(enc.fields["val"], cfg.bits, lay.kept).numpy()
    idx = unpack_bits(enc.fields["idx"], index_bits(cfg), lay.kept).numpy()
    scales = enc.fields["scale"].numpy().astype(np.float64)
    width_tail = cfg.chunk if cfg.transform == "dct" else lay.tail
    out, pos = [], 0
    for first, m, width, k in (
        (0, lay.full_chunks, cfg.chunk, lay.k_full),
        (lay.full_chunks, 1 if lay.tail else 0, width_tail, lay.k_tail),
    ):
        if m == 0:
            continue
        i = idx[pos : pos + m * k].reshape(m, k)
        q = codes[pos : pos + m * k].reshape(m, k)
        if cfg.transform == "dct":
            shift = fixed_shift(TILE, k, cfg.bits)
            basis = dct_basis_fixed(TILE, shift).numpy().astype(np.int64)
            num = q.astype(np.int64) * 2 - levels
            tiles = np.zeros((m, TILE, TILE), dtype=np.int64)  # exact integers, NumPy's own loops
            for t in range(m):
                left = basis[i[t] // TILE] * num[t][:, None]
                tiles[t] = left.T @ basis[i[t] % TILE]
            factor = scales[first : first + m] / levels * 2.0 ** (-2 * shift)
            vals = (tiles.astype(np.float64) * factor[:, None, None]).astype(np.float32).reshape(m, -1)
        else:
            v = (q.astype(np.float64) * (2.0 / levels) - 1.0) * scales[first : first + m][:, None]
            vals = np.zeros((m, width), dtype=np.float64)
            np.put_along_axis(vals, i, v, axis=1)
            vals = vals.astype(np.float32)
        out.append(vals.reshape(-1))
        pos += m * k
    return np.concatenate(out)[: lay.numel].reshape(enc.shape)


def np_norm(x: np.ndarray) -> float:
    flat = x.reshape(-1).astype(np.float64)
    sq = flat * flat
    size = 1 << (len(sq) - 1).bit_length()
    sq = np.concatenate([sq, np.zeros(size - len(sq))])
    while len(sq) > 1:
        sq = sq[0::2] + sq[1::2]
    return float(np.sqrt(sq[0]))


def np_merge(
    contribs: list[tuple[float, dict[str, np.ndarray]]], method: str, factor: float = 2.0, trim: float = 0.2
) -> dict[str, np.ndarray]:
    names = sorted({n for _, d in contribs for n in d})
    clipped = [(w, dict(d)) for w, d in contribs]
    for name in names:
        idx = [i for i, (_, d) in enumerate(contribs) if name in d]
        norms = [np_norm(contribs[i][1][name]) for i in idx]
        bound = factor * sorted(norms)[(len(norms) - 1) // 2]
        for i, n in zip(idx, norms, strict=True):
            if n > bound > 0:
                clipped[i][1][name] = (contribs[i][1][name].astype(np.float64) * (bound / n)).astype(
                    np.float32
                )
    out: dict[str, np.ndarray] = {}
    for name in names:
        have = [(w, d[name]) for w, d in clipped if name in d]
        if method == "mean":
            acc, total = None, 0.0
            for w, t in have:
                term = t.astype(np.float64) * w
                acc = term if acc is None else acc + term
                total += w
            out[name] = (acc / total).astype(np.float32)
        else:
            stack = np.stack([t for _, t in have]) + np.float32(0.0)
            n = len(have)
            k = int(math.floor(trim * n)) or (1 if n >= 5 else 0)
            srt = np.sort(stack, axis=0)
            if n >= 3 and k > 0 and n - 2 * k >= 1:
                kept = srt[k : n - k].astype(np.float64)
                acc = kept[0]
                for row in kept[1:]:
                    acc = acc + row
                out[name] = (acc / len(kept)).astype(np.float32)
            elif n >= 3:
                out[name] = srt[(n - 1) // 2]  # the lower median, as torch.median
            else:
                out[name] = ((srt[0].astype(np.float64) + srt[1]) / n).astype(np.float32)
    return out


def test_numpy_reimplementation_matches_the_pinned_digests() -> None:
    params, encoded, momentum = inputs()
    order = sorted(encoded, key=lambda c: int(c[1], 16))
    decoded = [(w, m, {n: np_decode(e, c) for n, (e, c) in encs.items()}) for w, m, encs in order]
    for _, m, d in decoded:
        got = state_digest({n: torch.from_numpy(v) for n, v in d.items()}).hex()
        assert got == GOLDEN["merge_case"][f"decoded/{m}"], m
    theta = {n: v.numpy() for n, v in params.items()}
    for label, (outer, policy) in RUNS.items():
        g = np_merge([(w, d) for w, _, d in decoded], policy.method, policy.clip_factor, policy.trim)
        new, mom = {}, {}
        for name in sorted(theta):
            if name not in g:
                new[name] = theta[name]
                continue
            g64 = g[name].astype(np.float64)
            if outer.momentum > 0:
                m32 = (momentum[name].numpy().astype(np.float64) * outer.momentum + g64).astype(np.float32)
                mom[f"momentum/{name}"] = m32
                step = (
                    g64 + m32.astype(np.float64) * outer.momentum
                    if outer.nesterov
                    else m32.astype(np.float64)
                )
            else:
                step = g64
            new[name] = (theta[name].astype(np.float64) - step * outer.lr).astype(np.float32)
        as_t = {n: torch.from_numpy(np.ascontiguousarray(v)) for n, v in new.items()}
        assert state_digest(as_t).hex() == GOLDEN["merge_case"][f"checkpoint/{label}"], label
        mom_t = {n: torch.from_numpy(v) for n, v in mom.items()}
        assert state_digest(mom_t).hex() == GOLDEN["merge_case"][f"momentum/{label}"], label
