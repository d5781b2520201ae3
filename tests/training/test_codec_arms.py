"""The quality benchmark's codec arms (issue 28): the seeded shaped-DCT codec and Templar's SparseLoCo."""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks.codec_arms import ArmFeedback, SeededCodec, quantise
from benchmarks.sparseloco import INDEX_BITS, SparseLoCoCodec, chunk_topk, sparseloco_merge
from benchmarks.sparseloco import quantise as templar_quantise


def test_seeded_positions_are_shared_and_change_every_round() -> None:
    codec = SeededCodec(keep=512, run_seed=3)
    a = codec.positions("w", 5, 4, 64, 64, 512)
    assert torch.equal(a, SeededCodec(keep=512, run_seed=3).positions("w", 5, 4, 64, 64, 512))
    assert not torch.equal(a, codec.positions("w", 6, 4, 64, 64, 512))
    assert not torch.equal(a, codec.positions("v", 5, 4, 64, 64, 512))
    assert all(len(set(row.tolist())) == 512 for row in a)


def test_seeded_payload_has_no_index_bits() -> None:
    x = torch.randn(128, 64)
    sent, bits = SeededCodec(keep=500, bits=2).compress(x, "w", 0)
    assert bits == 2 * (500 * 2 + 32)  # two 64 x 64 tiles: 2-bit values and one fp32 scale each
    assert sent.shape == x.shape and 0 < float(sent.norm()) < 2 * float(x.norm())
    _, vbits = SeededCodec(keep=500, bits=1).compress(torch.randn(64), "b", 0)
    assert vbits == math.ceil(500 * 64 / 4096) + 32


@pytest.mark.parametrize("select", ["random", "lowfreq"])
def test_seeded_keeping_everything_at_high_precision_is_nearly_exact(select: str) -> None:
    x = torch.randn(64, 32)
    sent, _ = SeededCodec(keep=4096, bits=8, select=select).compress(x, "w", 1)
    assert float((sent - x).norm() / x.norm()) < 0.02


def test_quantisers() -> None:
    v = torch.tensor([[1.0, -0.5, 0.2, -1.0]])
    assert torch.allclose(quantise(v, 1), torch.tensor([[0.675, -0.675, 0.675, -0.675]]))
    q2 = quantise(v, 2)
    assert torch.allclose(q2, torch.tensor([[1.0, -1 / 3, 1 / 3, -1.0]]))
    t = templar_quantise(torch.tensor([0.0, 0.1, 5.0, -5.0, 0.05]))
    assert t.shape == (5,) and len(set(t.tolist())) <= 4


def test_error_feedback_delivers_what_it_dropped() -> None:
    ef = ArmFeedback(SeededCodec(keep=1024, bits=8), beta=1.0)
    delta = {"w": torch.randn(64, 64)}
    total = torch.zeros(64, 64)
    for r in range(40):
        sent, _ = ef.compress(delta if r == 0 else {"w": torch.zeros(64, 64)}, r)
        total += sent["w"]
    assert float((total - delta["w"]).norm() / delta["w"].norm()) < 0.05


def test_sparseloco_chunks_and_bits() -> None:
    assert [chunk_topk(4096, 64), chunk_topk(64, 64), chunk_topk(64, 33), chunk_topk(4096, 1)] == [
        64,
        64,
        32,
        2,
    ]
    x = torch.randn(128, 64)
    sent, bits = SparseLoCoCodec(topk=64).compress(x, "w", 0)
    assert bits == 2 * 64 * (INDEX_BITS + 2) + 5 * 32
    assert int((sent != 0).sum()) == 128  # no DCT: 64 values kept in each of the two 64 x 64 chunks


def test_sparseloco_merge_is_a_clipped_mean_over_senders() -> None:
    a = {"w": torch.tensor([1.0, 0.0, 0.0])}
    b = {"w": torch.tensor([0.0, 2.0, 0.0])}
    c = {"w": torch.tensor([0.0, 0.0, 30.0])}
    got = sparseloco_merge([(1.0, "a", a), (1.0, "b", b), (1.0, "c", c)])["w"]
    # median norm 2: a kept, b kept, c scaled to norm 2; each position averaged over its one sender
    assert torch.allclose(got, torch.tensor([1.0, 2.0, 2.0]))


def test_pareto_rows_and_arms() -> None:
    from benchmarks.quality_pareto import TOPK, arm_variant, row

    assert arm_variant(0.01, "tessera", "dipaco")["epoch_rounds"] == 8
    assert "epoch_rounds" not in arm_variant(0.01, "tessera", "moe")
    assert arm_variant(0.01, "sparseloco", "moe") == {
        "arm": "sparseloco",
        "topk": TOPK[0.01][1],
        "outer": {"lr": 1.0, "momentum": 0.0, "nesterov": False, "merge": "mean"},
    }
    runs = {
        s: {"final_loss": 2.0 + s, "payload_bits_per_param_step": 0.009, "wire_bits_per_param_step": 0.01}
        for s in (0, 1)
    }
    r = row("moe", 0.01, "tessera", runs, {0: 1.6, 1: 2.4})
    assert r["gap_diloco_pct"] == pytest.approx((25.0 + 25.0) / 2) and r[
        "gap_diloco_spread"
    ] == pytest.approx(0.0)
    assert [s["seed"] for s in r["seeds"]] == [0, 1]


def test_pareto_markdown_has_a_line_per_row_with_seeds_and_the_comparison() -> None:
    from benchmarks.quality_pareto import against_sparseloco, markdown, row

    def runs(losses: list[float]) -> dict[int, dict[str, float]]:
        bits = {"payload_bits_per_param_step": 0.009, "wire_bits_per_param_step": 0.0095}
        return {s: {"final_loss": x, **bits} for s, x in enumerate(losses)}

    rows = against_sparseloco(
        [
            row("moe", 0.01, "tessera", runs([2.0, 2.2]), {0: 1.6, 1: 2.0}),
            row("moe", 0.01, "sparseloco", runs([2.2, 2.2]), {0: 1.6, 1: 2.0}),
        ]
    )
    lines = markdown(rows).splitlines()
    assert len(lines) == 2 + 2
    assert "| moe | 0.01 | tessera |" in lines[2] and "2.000 / 2.200 (s0,1)" in lines[2]
    assert "**+17.5%**" in lines[2]  # (25% + 10%) / 2
    assert lines[2].endswith("| **-4.5%** |")  # 2.1 against 2.2
    assert lines[3].endswith("|  |")  # SparseLoCo is not compared with itself


def test_arm_tweaks_name_the_outer_step_codec_and_merger() -> None:
    from benchmarks.quality_pareto import arm_variant

    base = arm_variant(0.01, "tessera", "moe")
    got = arm_variant(0.01, "tessera+merger=coefficients+momentum=0+ef_beta=0.9", "moe")
    assert got["merge"] == "coefficients" and got["outer"]["momentum"] == 0.0
    assert got["codec"] == {**base["codec"], "ef_beta": 0.9}
    assert base["merge"] == "validators" and base["outer"]["momentum"] == 0.5  # the recipe is untouched
    assert arm_variant(0.01, "tessera+transform=tiles", "moe")["codec"]["transform"] == "tiles"
    with pytest.raises(ValueError, match="unknown tweak"):
        arm_variant(0.01, "tessera+warmup=3", "moe")


def _dct_update(seed: int, shape: tuple[int, ...]) -> torch.Tensor:
    from training.codecs import decode, encode
    from training.config import CodecConfig

    cfg = CodecConfig(name="topk", chunk=4096, topk=110, bits=2, transform="shaped", index="elias-fano")
    return decode(encode(torch.randn(shape, generator=torch.Generator().manual_seed(seed)), cfg), cfg)


def test_sender_mean_is_the_mean_for_dct_updates() -> None:
    """A decoded DCT update is dense: dividing by the miners non-zero at a value divides by all of them."""
    from training.merge import MergePolicy, robust_merge

    ups = [(1.0, f"0x{i + 1:x}", {"w": _dct_update(i, (128, 64))}) for i in range(3)]
    assert all(bool((d["w"] != 0).all()) for _, _, d in ups)
    mean, senders = robust_merge(ups, MergePolicy()), robust_merge(ups, MergePolicy("sender_mean"))
    assert torch.equal(mean["w"], senders["w"])


def test_sender_mean_keeps_a_sparse_value_one_miner_sent() -> None:
    from training.merge import MergePolicy, robust_merge

    a, b = {"w": torch.tensor([1.0, 0.0])}, {"w": torch.tensor([0.0, 1.0])}
    got = robust_merge([(1.0, "0x1", a), (1.0, "0x2", b)], MergePolicy("sender_mean"))["w"]
    assert torch.equal(got, torch.tensor([1.0, 1.0]))
    assert torch.equal(robust_merge([(1.0, "0x1", a), (1.0, "0x2", b)], MergePolicy())["w"], got / 2)


def test_coefficient_merge_averages_each_coefficient_over_its_senders() -> None:
    from benchmarks.dct_merge import coefficient_merge, coefficients

    one, two = _dct_update(0, (128, 64)), _dct_update(1, (128, 64))
    alone = coefficient_merge([(1.0, "0x1", {"w": one, "b": one[0]})])
    assert torch.allclose(alone["w"], one, atol=1e-6) and torch.allclose(alone["b"], one[0], atol=1e-6)
    both = coefficient_merge([(1.0, "0x1", {"w": one}), (1.0, "0x2", {"w": two})])["w"]
    c1, c2, got = coefficients(one), coefficients(two), coefficients(both)
    s1, s2 = c1.abs() > 1e-4, c2.abs() > 1e-4
    only1, shared = s1 & ~s2, s1 & s2
    assert bool(only1.any()) and bool(shared.any())
    assert torch.allclose(got[only1], c1[only1], atol=1e-5)  # one sender: not halved
    assert torch.allclose(got[shared], (c1[shared] + c2[shared]) / 2, atol=1e-5)
    assert bool((got[~(s1 | s2)].abs() < 1e-5).all())
