"""Issue 13: a validator keeps the residuals it fetched, so next round's error-feedback source is not
fetched again; only residuals are kept, and only a bounded number of them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from protocol.p2p.blobs import DigestMismatchError
from protocol.wire.tensorblob import encode_tensors, tensor_blob_digest
from validator.residuals import ResidualCache


def _blob(seed: int, prefix: str = "ef/") -> tuple[str, bytes, dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    tensors = {f"{prefix}w": torch.randn(8, 4, generator=g), f"{prefix}b": torch.randn(4, generator=g)}
    data = encode_tensors(tensors)
    return tensor_blob_digest(data), data, tensors


def test_residuals_are_kept_by_digest_and_bounded(tmp_path: Path) -> None:
    cache = ResidualCache(tmp_path, keep=2)
    digests = []
    for seed in range(3):
        d, data, tensors = _blob(seed)
        assert cache.get(d) is None
        cache.offer(d, data, tensors)
        assert cache.get(d) == data
        digests.append(d)
    assert cache.get(digests[0]) is None, "the oldest residual is dropped beyond keep"
    assert cache.get(digests[2]) is not None
    assert cache.hits == 4


def test_only_residuals_are_kept_and_only_under_their_digest(tmp_path: Path) -> None:
    cache = ResidualCache(tmp_path)
    d, data, tensors = _blob(7, prefix="param/")  # a transcript state or a checkpoint: not kept
    cache.offer(d, data, tensors)
    assert cache.get(d) is None
    d, data, tensors = _blob(8)
    other, _, _ = _blob(9)
    with pytest.raises(DigestMismatchError):
        cache.offer(other, data, tensors)


def test_offers_from_parallel_verifications_never_raise(tmp_path: Path) -> None:
    """A validator verifies miners in parallel threads, each offering residuals to the same cache: one
    thread's pruning removes files another has listed (seen as FileNotFoundError in a 10-round run)."""
    from concurrent.futures import ThreadPoolExecutor

    cache = ResidualCache(tmp_path, keep=1)
    blobs = [_blob(seed) for seed in range(40)]
    with ThreadPoolExecutor(8) as pool:
        for fut in [pool.submit(cache.offer, d, data, tensors) for d, data, tensors in blobs]:
            fut.result()
    kept = [p for p in tmp_path.iterdir() if p.is_file() and not p.name.startswith(".")]
    assert 1 <= len(kept) <= 8, "each offer prunes to keep; at most the racing offers' own files remain"
