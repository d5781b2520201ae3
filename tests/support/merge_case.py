"""A fixed merge case whose inputs are the same bytes on every machine; run as a script it prints the
digests of its decoded updates and of the checkpoints each merge method makes (one JSON line).

``tests/validator/test_merge_reproducible.py`` runs it in subprocesses under different instruction-set settings: the
digests must be identical there and equal to the pinned ones (which any other machine, ARM or GPU box,
checks too). Inputs are built from integers only (``torch.randint`` and exact scalings), not from a
kernel, so they are identical wherever they are built.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from training.bitpack import pack_bits
from training.codecs import Encoded, decode, field_specs, index_bits, layout
from training.config import CodecConfig, OuterConfig
from training.digest import state_digest
from training.exact import canonical_normal
from training.merge import MergePolicy, next_checkpoint

SHAPE = (257, 129)
NAMES = ("a.weight", "b.weight", "c.weight", "d.weight")
CODECS = {
    "dct2": CodecConfig(chunk=4096, topk=32, bits=2, transform="dct"),
    "topk4": CodecConfig(chunk=256, topk=16, bits=4),
}
MINERS = [f"0x{i:040x}" for i in (7, 3, 11, 5, 2)]


def fixed_encoding(shape: tuple[int, ...], cfg: CodecConfig, gen: torch.Generator, scale: float) -> Encoded:
    """A valid encoding with integer-built fields: sorted distinct indices, random codes, exact scales."""
    lay = layout(math.prod(shape), cfg)
    width_tail = cfg.chunk if cfg.transform == "dct" else lay.tail
    idx = []
    for m, width, k in (
        (lay.full_chunks, cfg.chunk, lay.k_full),
        (1 if lay.tail else 0, width_tail, lay.k_tail),
    ):
        for _ in range(m):
            idx.append(torch.randperm(width, generator=gen)[:k].sort().values)
    codes = torch.randint(0, 1 << cfg.bits, (lay.kept,), generator=gen)
    scales = torch.randint(1, 1 << 12, (lay.n_chunks,), generator=gen).to(torch.float32) * (scale / 4096)
    fields = {
        "idx": pack_bits(torch.cat(idx), index_bits(cfg)),
        "val": pack_bits(codes, cfg.bits),
        "scale": scales,
    }
    assert set(fields) == set(field_specs(shape, cfg))
    return Encoded(shape, fields)


Inputs = tuple[
    dict[str, torch.Tensor],
    list[tuple[float, str, dict[str, tuple[Encoded, CodecConfig]]]],
    dict[str, torch.Tensor],
]


def inputs() -> Inputs:
    """theta, the (weight, miner, encoded update) contributions, and the outer momentum."""
    gen = torch.Generator().manual_seed(12)
    params = {n: canonical_normal(SHAPE, gen, 0.02) for n in NAMES}
    contributions = []
    for j, miner in enumerate(MINERS):
        cfg = CODECS["dct2"] if j % 2 == 0 else CODECS["topk4"]
        big = 50.0 if j == 3 else 1.0  # this one is clipped to clip_factor x the median norm
        encs = {n: (fixed_encoding(SHAPE, cfg, gen, 1e-3 * big), cfg) for n in NAMES if (j + len(n)) % 5}
        contributions.append((float(j + 1), miner, encs))
    momentum = {n: canonical_normal(SHAPE, gen, 1e-3) for n in NAMES}
    return params, contributions, momentum


RUNS = {
    "mean": (OuterConfig.plain_average(), MergePolicy()),
    "nesterov": (OuterConfig(), MergePolicy()),
    "trimmed": (OuterConfig(), MergePolicy(method="trimmed_mean")),
}


def case() -> dict[str, str]:
    """Digests of the decoded updates and of the merges (mean, Nesterov, trimmed mean)."""
    params, encoded, momentum = inputs()
    contributions = [(w, m, {n: decode(e, c) for n, (e, c) in encs.items()}) for w, m, encs in encoded]
    out = {f"decoded/{m}": state_digest(d).hex() for _, m, d in contributions}
    for label, (outer, policy) in RUNS.items():
        new, mom = next_checkpoint(params, momentum if outer.momentum else {}, contributions, outer, policy)
        out[f"checkpoint/{label}"] = state_digest(new).hex()
        out[f"momentum/{label}"] = state_digest(mom).hex()
    return out


if __name__ == "__main__":
    if len(sys.argv) > 1:
        torch.set_num_threads(int(sys.argv[1]))
    print(json.dumps(case(), sort_keys=True))
