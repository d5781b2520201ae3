"""Regenerate tests/training/golden/golden.json.

Run from the repository root: ``.venv/bin/python -m tests.training.make_golden``.

The golden values pin what miners and validators must agree on, and they hold on every machine:

- bit for bit, what is defined independently of the kernels (integer math, selection, IEEE elementwise
  arithmetic in a fixed order, see ``training.exact``): state digests, codec fields and decoding, the
  DCT decoding of a fixed encoding, assignments, batch offsets, the bundled corpus split, a model's initial
  weights, the merge and the outer step of fixed updates, the batches of an inner loop;
- within a measured tolerance, what runs through torch's kernels (an inner loop's pseudo-gradient: their
  norms within ``TRAINED_RTOL``; ATen's instruction-set kernels, MKL and oneDNN give different bits).

Regenerate only for an intended change of that math, and say so.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import torch

from tests.support import merge_case
from tests.training.training_fixtures import tiny_inner, tiny_model
from training.assignment import assign
from training.bitpack import elias_fano_encode, pack_bits
from training.codeclayout import tile_grid
from training.codecs import Encoded, decode, encode, index_bits, layout, layout_of
from training.config import CodecConfig, InnerConfig, OuterConfig, to_dict
from training.corpus import load_bundled_corpus
from training.data import miner_batches, prepare, window_offsets
from training.digest import state_digest
from training.diloco import OuterOptimizer, merge, pseudo_gradient
from training.inner import train_inner
from training.model import build_model, param_state

OUT = Path(__file__).resolve().parent / "golden" / "golden.json"

CODECS = {
    "topk2": CodecConfig(chunk=256, topk=8, bits=2),
    "topk4": CodecConfig(chunk=256, topk=16, bits=4),
    "topk8": CodecConfig(chunk=256, topk=8, bits=8),
    "topk32": CodecConfig(chunk=256, topk=8, bits=32),
    "dense8": CodecConfig(name="dense", chunk=256, bits=8),
    "dct2": CodecConfig(chunk=4096, topk=32, bits=2, transform="dct"),
}
MINERS = [f"0x{i:040x}" for i in range(1, 6)]
TRAINED_RTOL = 1e-5
"""Relative tolerance of the trained pseudo-gradient's per-tensor norms. Measured largest difference
between ATEN_CPU_CAPABILITY=default and avx2 (AMD EPYC, torch 2.13.0): 2.2e-7 (a 45x margin)."""


def exact_input(n: int = 5000) -> torch.Tensor:
    """A tensor whose values are exact in fp32 (no platform-dependent math)."""
    return ((torch.arange(n, dtype=torch.int64) * 7919 % 2001) - 1000).float() / 512


def fixed_dct_encoding() -> tuple[Encoded, CodecConfig]:
    """A valid ``dct2`` encoding of a 3 x 2000 tensor built from integers only (so the same bytes
    everywhere, unlike an encoding, whose forward DCT is a matmul)."""
    cfg = CODECS["dct2"]
    shape = (3, 2000)
    lay = layout(6000, cfg)
    gen = torch.Generator().manual_seed(5)
    idx = [torch.randperm(cfg.chunk, generator=gen)[: lay.k_full].sort().values]
    idx.append(torch.randperm(cfg.chunk, generator=gen)[: lay.k_tail].sort().values)
    codes = torch.randint(0, 4, (lay.kept,), generator=gen)
    fields = {
        "idx": pack_bits(torch.cat(idx), index_bits(cfg)),
        "val": pack_bits(codes, cfg.bits),
        "scale": torch.tensor([0.75, 0.046875]),
    }
    return Encoded(shape, fields), cfg


SHAPED_DCT = CodecConfig(topk=54, bits=2, transform="shaped", ef_beta=0.95, index="elias-fano")
"""The network's codec before issue 28 (top-54 shaped DCT): still a codec a run file may name."""


def fixed_shaped_encoding(cfg: CodecConfig = SHAPED_DCT) -> tuple[Encoded, CodecConfig]:
    """A valid encoding of a 96 x 32 tensor with a shaped codec (``shaped``, the DCT, or ``tiles``, the
    recipe's; here two 48 x 32 tiles), built from integers only so the bytes are the same everywhere."""
    shape = (96, 32)
    lay = layout_of(shape, cfg)
    _, _, tr, tc = tile_grid(shape)
    gen = torch.Generator().manual_seed(7)
    idx = [torch.randperm(tr * tc, generator=gen)[: lay.k_full].sort().values for _ in range(lay.full_chunks)]
    codes = torch.randint(0, 1 << cfg.bits, (lay.kept,), generator=gen)
    fields = {
        "idx": elias_fano_encode([(torch.stack(idx), tr * tc)])
        if cfg.index == "elias-fano"
        else pack_bits(torch.cat(idx), index_bits(cfg, shape)),
        "val": pack_bits(codes, cfg.bits),
        "scale": torch.tensor([0.75, 0.046875]),
    }
    return Encoded(shape, fields), cfg


def recipe() -> dict[str, Any]:
    """The network's recipe (docs/decisions/training-recipe.md): changing it is deliberate."""
    return {
        "inner": to_dict(InnerConfig()),
        "outer": to_dict(OuterConfig.recipe()),
        "codec": to_dict(CodecConfig.recipe()),
    }


def fixed_updates(theta: dict[str, torch.Tensor]) -> list[tuple[float, dict[str, torch.Tensor]]]:
    """Two exact pseudo-gradients shaped like ``theta`` (integers scaled by powers of two)."""
    gen = torch.Generator().manual_seed(6)
    out = []
    for w in (1.0, 2.0):
        d = {k: torch.randint(-512, 513, v.shape, generator=gen).float() * 2.0**-16 for k, v in theta.items()}
        out.append((w, d))
    return out


def digest_inputs() -> dict[str, torch.Tensor]:
    return {
        "a": torch.arange(6, dtype=torch.float32).view(2, 3),
        "b": torch.tensor([1, -2, 3], dtype=torch.int64),
        "c": torch.tensor([0.5, -0.25], dtype=torch.bfloat16),
        "empty": torch.zeros(0, 4),
    }


def pseudo_gradient_case() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, Any]]:
    cfg, inner = tiny_model("moe"), tiny_inner(steps=4, k=2)
    ds = prepare(load_bundled_corpus(), cfg)
    a = assign(b"golden", MINERS[:2], cfg)[MINERS[0]]
    batches = miner_batches(ds, b"golden", a, inner.steps, inner.batch_size, cfg.seq_len)
    theta = param_state(build_model(cfg, 0))
    res = train_inner(cfg, inner, theta, a, batches, round=0)
    delta = pseudo_gradient(theta, res.params)
    info = {
        "batches_sha256": hashlib.sha256(batches.numpy().tobytes()).hexdigest(),
        "transcript": [p.hex() + r.hex() for p, r in res.transcript.parts],
    }
    return theta, delta, info


def main() -> int:
    torch.set_num_threads(1)
    x = exact_input()
    golden: dict[str, Any] = {"state_digest": state_digest(digest_inputs()).hex(), "codecs": {}}
    for name, cfg in CODECS.items():
        enc = encode(x, cfg)
        dec = decode(enc, cfg)
        golden["codecs"][name] = {
            "fields": {k: hashlib.sha256(v.numpy().tobytes()).hexdigest() for k, v in enc.fields.items()},
            "decoded_digest": state_digest({"x": dec}).hex(),
            "decoded_l2": float(dec.norm()),
        }
    golden["model_init"] = {
        m: state_digest(param_state(build_model(tiny_model(m), 0))).hex() for m in ("dense", "moe", "dipaco")
    }
    golden["assignment"] = {
        m: {k: [list(v.module_ids), v.shard] for k, v in assign(b"golden", MINERS, tiny_model(m)).items()}
        for m in ("moe", "dipaco")
    }
    golden["window_offsets"] = window_offsets(b"golden", 9, 100_000)
    ds = prepare(load_bundled_corpus(), tiny_model("dipaco"))
    assert ds.router is not None
    golden["corpus_split"] = {
        "train_sha256": hashlib.sha256(ds.train.numpy().tobytes()).hexdigest(),
        "heldout_sha256": hashlib.sha256(ds.heldout.numpy().tobytes()).hexdigest(),
        "router_cuts": list(ds.router.cuts),
    }
    enc, cfg = fixed_dct_encoding()
    golden["dct_decode"] = state_digest({"x": decode(enc, cfg)}).hex()
    enc, cfg = fixed_shaped_encoding()
    golden["shaped_decode"] = state_digest({"x": decode(enc, cfg)}).hex()
    enc, cfg = fixed_shaped_encoding(CodecConfig.recipe())
    golden["recipe_decode"] = state_digest({"x": decode(enc, cfg)}).hex()
    golden["recipe"] = recipe()
    theta, delta, info = pseudo_gradient_case()
    golden["pseudo_gradient"] = {
        "batches_sha256": info["batches_sha256"],
        "transcript_len": len(info["transcript"]),
        "norms": {k: float(v.norm()) for k, v in sorted(delta.items())},
    }
    opt = OuterOptimizer(OuterConfig())
    new = opt.step(theta, merge(fixed_updates(theta)))
    golden["outer_step"] = state_digest(new).hex()
    golden["merge_case"] = merge_case.case()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
