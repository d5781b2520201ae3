"""Error feedback (kept by the miner): ``e = ef_beta * e + delta``; send ``C(e)``; ``e = e - decode(C(e))``.
Nothing dropped is lost, only delayed (and faded by ``ef_beta``)."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from training.codecs import Encoded, decode, encode, resolve
from training.config import CodecConfig


class ErrorFeedback:
    """The miner's error-feedback memory, one fp32 buffer per parameter name."""

    def __init__(self, cfg: CodecConfig) -> None:
        self.cfg = cfg
        self.codec = resolve(cfg)
        """``cfg`` resolved once (``training.codecs.resolve``), for every tensor of every update."""
        self.buffers: dict[str, Tensor] = {}

    def compress(
        self, delta: Mapping[str, Tensor], known: Mapping[str, tuple[Encoded, Tensor]] | None = None
    ) -> tuple[dict[str, Encoded], dict[str, Tensor]]:
        """Encode ``ef_beta * e + delta`` per tensor; returns the encodings and what they decode to.

        ``known``: encodings already decoded (a validator's copy of the update it checks), by name; an
        encoding equal to the known one, field for field, takes its decoded tensor instead of decoding
        again (decoding is a pure function of the encoding)."""
        encs: dict[str, Encoded] = {}
        sent: dict[str, Tensor] = {}
        for name in sorted(delta):
            d = delta[name].detach().float()
            prev = self.buffers.get(name)
            acc = d.clone() if prev is None else prev * self.cfg.ef_beta + d
            enc = encode(acc, self.codec)
            hit = known.get(name) if known is not None else None
            dec = hit[1] if hit is not None and same_encoding(enc, hit[0]) else decode(enc, self.codec)
            self.buffers[name] = acc - dec
            encs[name], sent[name] = enc, dec
        return encs, sent

    def settle(self, sent: Mapping[str, Tensor], applied: Mapping[str, Tensor]) -> None:
        """With ``feedback='applied'``: move what was sent but not applied back into memory.

        ``applied[name]`` is theta_r - theta_{r+1} for the parameters this miner sent.
        """
        for name, s in sent.items():
            self.buffers[name] = self.buffers[name] + s - applied[name].float()

    def state_dict(self) -> dict[str, Tensor]:
        """Buffers as ``ef/<name>`` (a miner persists them to resume)."""
        return {f"ef/{k}": v.clone() for k, v in self.buffers.items()}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        """Restore buffers saved by :meth:`state_dict`."""
        self.buffers = {k.removeprefix("ef/"): v.clone() for k, v in state.items()}


def same_encoding(a: Encoded, b: Encoded) -> bool:
    """Whether two encodings are the same bytes: shape, field names, dtypes and values."""
    return (
        a.shape == b.shape
        and a.fields.keys() == b.fields.keys()
        and all(
            a.fields[k].dtype == b.fields[k].dtype
            and a.fields[k].shape == b.fields[k].shape
            and torch.equal(a.fields[k], b.fields[k])
            for k in a.fields
        )
    )


def decode_all(encs: Mapping[str, Encoded], cfg: CodecConfig) -> dict[str, Tensor]:
    """Decode every tensor of an update (``cfg`` resolved once)."""
    codec = resolve(cfg)
    return {name: decode(e, codec) for name, e in encs.items()}
