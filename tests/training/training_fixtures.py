"""Small configs shared by the training tests (fast on 2 CPU cores)."""

from __future__ import annotations

from training.config import InnerConfig, ModelConfig


def tiny_model(mode: str = "moe") -> ModelConfig:
    """A model small enough for unit tests."""
    return ModelConfig(
        mode=mode, seq_len=16, d_model=32, n_heads=2, n_layers=2, d_ff=48, n_experts=4, top_k=2
    )  # type: ignore[arg-type]


def tiny_inner(steps: int = 6, k: int = 2) -> InnerConfig:
    """A short inner loop."""
    return InnerConfig(steps=steps, batch_size=2, warmup_steps=2, total_steps=60, transcript_interval=k)
