"""Fixtures of the training tests."""

from __future__ import annotations

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(params=["moe", "dipaco", "dense"])
def mode(request: pytest.FixtureRequest) -> str:
    """Each model mode."""
    return str(request.param)
