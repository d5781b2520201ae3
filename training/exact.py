"""Kernel-independent arithmetic: results defined by IEEE-754 alone, the same bits on every machine.

Why this exists: torch picks kernels by instruction set (``ATEN_CPU_CAPABILITY``), MKL and oneDNN by
theirs, and CUDA has its own. Reductions (``sum``, ``mean``, ``norm``), matrix products, fused operations
(``addcmul``, ``lerp``, ``add`` with ``alpha``) and transcendental functions (``cos``, ``log``, and so
``normal_``) give different bits across them (measured: the merge gave three checkpoint digests under
``default``, ``avx2`` and ``avx512``). What every conforming implementation computes identically is one
correctly rounded elementwise operation: ``+ - * /`` and ``sqrt`` of same-dtype operands, conversions
between dtypes (round to nearest, ties to even), comparisons, sorting, gathers and scatters, and integer
arithmetic. A computation made only of those, in an order fixed by the code and not by a kernel, has one
result; that is what the merge, the codec decoder and the model's initial weights use.

Rules kept by every function here (and by callers that build on them):

- compute in float64, round to fp32 once at the end (fp32 x fp32 products are exact in float64);
- no library reductions: :func:`pairwise_sum` adds along a canonical binary tree of elementwise adds;
- a Python float scalar multiplies a float64 tensor (exact conversion), never an fp32 one;
- no transcendental functions at run time: the DCT basis comes from exact decimal arithmetic;
- subnormals are kept (:func:`ieee_mode` turns flush-to-zero off while it runs).
"""

from __future__ import annotations

import contextlib
import decimal
from collections.abc import Iterator, Sequence
from functools import cache

import torch
from torch import Tensor

F64 = torch.float64


@contextlib.contextmanager
def ieee_mode() -> Iterator[None]:
    """Run with subnormals honoured (a process may have set flush-to-zero).

    torch offers no getter for the flag, so it is set off on entry and left off (torch's default).
    """
    torch.set_flush_denormal(False)
    yield


def pairwise_sum(x: Tensor) -> Tensor:
    """Sum over dim 0 along a fixed binary tree: pad to a power of two with zeros, add neighbours.

    Every step is one elementwise add, so the result does not depend on vector width or thread count.
    """
    n = x.shape[0]
    if n == 0:
        return torch.zeros(x.shape[1:], dtype=x.dtype)
    size = 1 << (n - 1).bit_length()
    if size != n:
        x = torch.cat([x, torch.zeros((size - n, *x.shape[1:]), dtype=x.dtype)])
    while x.shape[0] > 1:
        x = x[0::2] + x[1::2]
    return x[0]


def sequential_sum(terms: Sequence[Tensor]) -> Tensor:
    """``((t0 + t1) + t2) + ...`` in float64, elementwise, in the order given."""
    if not terms:
        raise ValueError("sequential_sum of no terms")
    acc = terms[0].to(F64)
    for t in terms[1:]:
        acc = acc + t.to(F64)
    return acc


def l2_norm(x: Tensor) -> float:
    """The L2 norm of all of ``x``: squares in float64 (exact for fp32 input), :func:`pairwise_sum`, sqrt."""
    flat = x.detach().reshape(-1).to("cpu", F64)
    return float(torch.sqrt(pairwise_sum(flat * flat)))


# -- the DCT-II basis from exact decimal arithmetic ----------------------------------------------------

_PREC = 50


def _pi(ctx: decimal.Context) -> decimal.Decimal:
    """pi to the context's precision (the recipe in Python's decimal documentation)."""
    with decimal.localcontext(ctx) as c:
        c.prec += 2
        three = decimal.Decimal(3)
        lasts, t, s, n, na, d, da = decimal.Decimal(0), three, three, 1, 0, 0, 24
        while s != lasts:
            lasts = s
            n, na = n + na, na + 8
            d, da = d + da, da + 32
            t = (t * n) / d
            s += t
    return +s


def _cos(x: decimal.Decimal, ctx: decimal.Context) -> decimal.Decimal:
    """cos(x) by its Taylor series at the context's precision (0 <= x < 2 pi: callers reduce first)."""
    with decimal.localcontext(ctx) as c:
        c.prec += 2
        i, lasts, s, fact, num, sign = 0, decimal.Decimal(0), decimal.Decimal(1), 1, decimal.Decimal(1), 1
        while s != lasts:
            lasts = s
            i += 2
            fact *= i * (i - 1)
            num *= x * x
            sign *= -1
            s += num / fact * sign
    return +s


@cache
def _dct_decimal(n: int) -> tuple[tuple[decimal.Decimal, ...], ...]:
    """``D[k, i] = c_k cos(pi (2i + 1) k / 2n)`` (``c_0 = sqrt(1/n)``, ``c_k = sqrt(2/n)``) to 50 digits."""
    ctx = decimal.Context(prec=_PREC)
    pi = _pi(ctx)
    c0 = (decimal.Decimal(1) / n).sqrt(ctx)
    ck = (decimal.Decimal(2) / n).sqrt(ctx)
    rows = []
    for k in range(n):
        scale = c0 if k == 0 else ck
        # reduce the angle pi * a / 2n modulo 2 pi in exact integers before the series
        angles = [((2 * i + 1) * k) % (4 * n) for i in range(n)]
        rows.append(tuple(ctx.multiply(scale, _cos(pi * a / (2 * n), ctx)) for a in angles))
    return tuple(rows)


@cache
def dct_basis(n: int) -> Tensor:
    """Orthonormal DCT-II matrix ``D`` (``D @ D.T = I`` to fp32 rounding) as fp32, identical everywhere.

    Computed with 50-digit decimal arithmetic and rounded once to float64 (``float(Decimal)`` is
    correctly rounded), then to fp32: no platform's libm or vector ``cos`` is involved.
    """
    rows = [[float(v) for v in row] for row in _dct_decimal(n)]
    return torch.tensor(rows, dtype=F64).to(torch.float32)


@cache
def dct_basis_fixed(n: int, shift: int) -> Tensor:
    """``round(D * 2^shift)`` as exact integers held in float64 (round half to even, from the decimals)."""
    q = decimal.Decimal(2) ** shift
    rows = [[int((v * q).to_integral_value(decimal.ROUND_HALF_EVEN)) for v in row] for row in _dct_decimal(n)]
    return torch.tensor(rows, dtype=torch.int64).to(F64)


def fixed_shift(n: int, k: int, bits: int) -> int:
    """The largest basis scaling ``2^shift`` for which :func:`quantised_idct_tiles` stays exact.

    Every partial sum of the inverse transform is an integer of magnitude at most
    ``k * (2^bits - 1) * max|D_fixed|^2 <= k * 2^bits * 2^(2 shift) * 2/n``; float64 holds integers exactly
    below 2^53, so ``shift = floor((53 - ceil(log2 k) - bits + log2(n/2)) / 2)`` (capped at 30).
    """
    log_k = max(0, (k - 1).bit_length())
    log_half_n = (n // 2).bit_length() - 1
    return min(30, (53 - log_k - bits + log_half_n) // 2)


def quantised_idct_tiles(
    rows: Tensor,
    cols: Tensor,
    numerators: Tensor,
    factor: Tensor,
    n: int,
    bits: int,
    n_cols: int | None = None,
) -> Tensor:
    """Inverse 2-D DCT of ``m`` sparse ``n x n_cols`` tiles (square when ``n_cols`` is None) whose
    coefficients are ``numerators[t, s] * factor[t]``, as fp32 ``[m, n * n_cols]``.

    The quantised codecs send integer numerators (``2q - (2^bits - 1)``) and one scale per tile. With the
    bases fixed to integers (:func:`dct_basis_fixed`), ``sum_s N_s * outer(D_n[r_s], D_c[c_s])`` is a sum
    of integers that stays below 2^53 (:func:`fixed_shift` of the shorter side, the larger basis values),
    so the batched matrix product computes it *exactly* whatever order or kernel (BLAS, AVX-512, a GPU)
    adds it in. Then, elementwise: times the tile's ``factor * 2^(-2 shift)`` (one rounding), to fp32.
    """
    nc = n if n_cols is None else n_cols
    m, k = numerators.shape
    shift = fixed_shift(min(n, nc), k, bits)
    basis_r, basis_c = dct_basis_fixed(n, shift), dct_basis_fixed(nc, shift)
    peak = float(basis_r.abs().max()) * float(basis_c.abs().max())
    if k * ((1 << bits) - 1) * peak >= 2.0**53:
        raise ValueError(f"inverse DCT of {k} coefficients at {bits} bits would not be exact")
    left = basis_r[rows] * numerators.to(F64).unsqueeze(2)  # [m, k, n]: |N| * |D| < 2^53, exact
    right = basis_c[cols]  # [m, k, nc]
    exact = torch.bmm(left.transpose(1, 2), right)  # integers, exact in any summation order
    spatial = exact * (factor.to(F64) * 2.0 ** (-2 * shift)).view(m, 1, 1)
    return spatial.reshape(m, n * nc).to(torch.float32)


def sparse_idct_tiles(rows: Tensor, cols: Tensor, coef: Tensor, n: int, n_cols: int | None = None) -> Tensor:
    """Inverse 2-D DCT of ``m`` sparse ``n x n_cols`` tiles with arbitrary float coefficients, as fp32
    ``[m, n * n_cols]``.

    The fallback for raw fp32 values (no quantisation, so no integer form): tile t's values are
    ``sum_s coef[t, s] * outer(D[rows[t, s]], D[cols[t, s]])`` accumulated over the slots in order in
    float64 elementwise operations (``D[i, a] * D[j, b]`` exact, times the coefficient one rounding, plus
    the accumulator another): defined by IEEE-754 alone, about 15x slower than a matrix product.
    """
    nc = n if n_cols is None else n_cols
    basis_r, basis_c = dct_basis(n).to(F64), dct_basis(nc).to(F64)
    m, k = coef.shape
    acc = torch.zeros(m, n, nc, dtype=F64)
    c64 = coef.to(F64)
    for s in range(k):
        outer = basis_r[rows[:, s]].unsqueeze(2) * basis_c[cols[:, s]].unsqueeze(1)
        acc = acc + outer * c64[:, s].view(m, 1, 1)
    return acc.reshape(m, n * nc).to(torch.float32)


def canonical_normal(shape: Sequence[int], generator: torch.Generator, std: float) -> Tensor:
    """fp32 samples of an approximately normal law N(0, std^2), identical on every machine.

    torch's ``normal_`` uses vectorised log and cos whose bits depend on the instruction set. This takes
    12 uniform integers of 24 bits from the generator (``randint`` is serial integer code on every
    platform), sums them exactly (Irwin-Hall: mean 6 * (2^24 - 1), variance 12 * (2^48 - 1) / 12),
    centres and scales in float64 and rounds once (Irwin-Hall with 12 terms: the classic stand-in for a
    normal, bounded at 6 standard deviations, which a weight init does not miss).
    """
    count = 1
    for s in shape:
        count *= int(s)
    ints = torch.randint(0, 1 << 24, (12, count), generator=generator, dtype=torch.int64)
    total = ints[0]
    for i in range(1, 12):
        total = total + ints[i]  # exact: at most 12 * 2^24 < 2^28
    centred = (total * 2 - 12 * ((1 << 24) - 1)).to(F64)  # 2 * (sum - mean), an exact integer
    # sd of 2 * (sum - mean) is 2 * sqrt(2^48 - 1) ~= 2^25; scaling by 2^-25 is exact.
    unit = centred * (2.0**-25)
    return (unit * float(std)).to(torch.float32).reshape(tuple(shape))
