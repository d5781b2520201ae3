"""Small configs shared by the training tests (fast on 2 CPU cores)."""

from __future__ import annotations

import math

import torch
from hypothesis import strategies as st

from training.config import InnerConfig, ModelConfig


@st.composite
def shaped_tensors(draw: st.DrawFn) -> torch.Tensor:
    """Tensors of 1 to 3 dimensions (sides 1-150, at most 20,000 values) at scales 1e-6, 1 and 1e3."""
    dims = draw(st.lists(st.integers(1, 150), min_size=1, max_size=3))
    if math.prod(dims) > 20000:
        dims = dims[:1]
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    scale = draw(st.sampled_from([1e-6, 1.0, 1e3]))
    return torch.randn(*dims, generator=g) * scale


def tiny_model(mode: str = "moe") -> ModelConfig:
    """A model small enough for unit tests."""
    return ModelConfig(
        mode=mode, seq_len=16, d_model=32, n_heads=2, n_layers=2, d_ff=48, n_experts=4, top_k=2
    )  # type: ignore[arg-type]


def tiny_inner(steps: int = 6, k: int = 2) -> InnerConfig:
    """A short inner loop."""
    return InnerConfig(steps=steps, batch_size=2, warmup_steps=2, total_steps=60, transcript_interval=k)
