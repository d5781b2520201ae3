"""state_digest: canonical over names, dtypes, shapes and bytes."""

from __future__ import annotations

import torch

from training.digest import state_digest


def test_order_independent_and_sensitive() -> None:
    a = {"x": torch.arange(6, dtype=torch.float32).view(2, 3), "y": torch.ones(2)}
    assert state_digest(a) == state_digest(dict(reversed(list(a.items()))))
    assert len(state_digest(a)) == 32
    variants = [
        {"x": a["x"].view(3, 2), "y": a["y"]},
        {"x": a["x"].double(), "y": a["y"]},
        {"x": a["x"], "z": a["y"]},
        {"x": a["x"], "y": torch.tensor([1.0, 1.0 + 2**-23])},
        {"x": a["x"]},
    ]
    assert len({state_digest(v) for v in variants} | {state_digest(a)}) == len(variants) + 1


def test_strides_do_not_matter() -> None:
    x = torch.arange(12, dtype=torch.float32).view(3, 4)
    assert state_digest({"x": x.t().contiguous().t()}) == state_digest({"x": x})
    assert state_digest({"x": x.t()}) == state_digest({"x": x.t().contiguous()})


def test_hashes_the_bytes_tensor_bytes_returns() -> None:
    """``state_digest`` hashes a view of each tensor's memory, not a copy: the same bytes as
    ``tensor_bytes`` for every layout (non-contiguous, bool, empty, 0-d, half precision)."""
    import hashlib
    import struct

    from training.digest import DOMAIN, tensor_bytes

    x = torch.arange(12, dtype=torch.float32).view(3, 4)
    cases = {
        "t": x.t(),
        "b": torch.tensor([True, False, True]),
        "e": torch.zeros(0, 3),
        "s": torch.tensor(7, dtype=torch.int64),
        "h": torch.linspace(-1, 1, 5, dtype=torch.bfloat16),
    }
    for name, t in cases.items():
        h = hashlib.sha256(DOMAIN)
        dt = str(t.dtype).removeprefix("torch.").encode()
        h.update(struct.pack("<I", len(name)) + name.encode() + struct.pack("<B", len(dt)) + dt)
        h.update(struct.pack("<B", t.dim()) + b"".join(struct.pack("<Q", d) for d in t.shape))
        data = tensor_bytes(t)
        h.update(struct.pack("<Q", len(data)) + data)
        assert state_digest({name: t}) == h.digest(), name
