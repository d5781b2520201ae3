"""Codec arms that are not (yet) wire codec kinds, run in the quality benchmark's simulation.

An arm is a compressor object with ``compress(acc, name, round) -> (sent, payload_bits)``: given a miner's
error-feedback accumulator of one tensor it returns what the receivers decode and the exact payload bits
its encoding would take. :class:`ArmSimulation` runs :class:`training.simulation.Simulation` with it, keeps
each miner's error feedback (``e = beta * e + delta``; send C(e); ``e -= decode(C(e))``), and counts the
wire bytes as the real wire format would: the version-4 header that ``protocol.wire.update`` writes for
the same miner, round and assignment (measured once per module set with the recipe's codec), plus the
frame and the arm's payload bytes.

Arms here:

- :class:`SeededCodec`: the shaped-DCT tiles of the recipe, but the kept coefficients' positions are drawn
  from a seed every miner shares for the round (``random``) or are the tile's lowest frequencies
  (``lowfreq``): no index bits at all, so the same bits carry about 4-5 times as many values as top-k,
  and every miner that trains a tensor sends the same positions (the merge's mean is not diluted by
  miners who sent nothing there).
- Templar's SparseLoCo: :mod:`benchmarks.sparseloco`.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from benchmarks.sparseloco import EF_DECAY, SparseLoCoCodec, sparseloco_merge
from benchmarks.tiles import tiles_of, untile
from benchmarks.training_runs import CHOSEN, MINERS, run_config
from tessera.simwire import wire_transport
from training.codeclayout import dct_matrix
from training.codecs import encode
from training.data import prepare
from training.merge import MergePolicy, robust_merge
from training.model import module_params
from training.simulation import Simulation

FRAME_BYTES = 4 + 4 + 8
"""An encoded update's bytes besides header and payload: magic, header length, payload length."""


def quantise(v: Tensor, bits: int) -> Tensor:
    """``v`` ``[m, k]`` quantised per row and dequantised: 2 bits (or more) as the recipe's codec does
    (``2**bits`` uniform levels up to the row's largest magnitude); 1 bit as the sign times the row's
    mean magnitude (the scale that minimises the squared error of a sign code)."""
    if bits == 1:
        return v.sign() * v.abs().mean(dim=1, keepdim=True)
    levels = (1 << bits) - 1
    scale = v.abs().amax(dim=1, keepdim=True)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    codes = torch.round((v / safe + 1.0) * (levels / 2.0)).clamp_(0, levels)
    return (codes * (2.0 / levels) - 1.0) * scale


class SeededCodec:
    """Coefficients of the shaped-DCT tiles at positions no index pays for.

    ``keep`` is the share of each tile kept (as the recipe's ``topk / 4096``: ``ceil(keep * area)`` per
    tile); ``select`` is ``random`` (positions drawn per tile from the round's shared seed and the tensor's
    name) or ``lowfreq`` (the positions with the smallest ``i + j``, a fixed block); ``bits`` per value
    and one fp32 scale per tile."""

    def __init__(self, keep: int, bits: int = 2, select: str = "random", run_seed: int = 0) -> None:
        if select not in ("random", "lowfreq"):
            raise ValueError(f"unknown selection {select!r}")
        self.keep, self.bits, self.select, self.run_seed = keep, bits, select, run_seed

    def positions(self, name: str, round: int, m: int, tr: int, tc: int, k: int) -> Tensor:
        """The ``[m, k]`` kept positions (row-major in the tile) of a tensor's ``m`` tiles this round."""
        area = tr * tc
        if self.select == "lowfreq":
            i, j = torch.arange(area) // tc, torch.arange(area) % tc
            order = torch.argsort(i * tc + j + (i + j) * area)  # by frequency i + j, then position
            return order[:k].expand(m, k)
        seed = hashlib.sha256(f"tessera.seeded\0{self.run_seed}\0{round}\0{name}".encode()).digest()
        gen = torch.Generator().manual_seed(int.from_bytes(seed[:8], "little") >> 1)
        return torch.rand(m, area, generator=gen).topk(k, dim=1).indices

    def compress(self, acc: Tensor, name: str, round: int) -> tuple[Tensor, int]:
        """What the receivers decode from ``acc`` and the payload bits."""
        tiles, grid = tiles_of(acc)
        m, tr, tc = tiles.shape
        if m == 0:
            return torch.zeros_like(acc), 0
        k = min(tr * tc, math.ceil(self.keep * tr * tc / 4096))
        dr, dc = dct_matrix(tr), dct_matrix(tc)
        coef = (dr @ tiles @ dc.T).reshape(m, -1)
        idx = self.positions(name, round, m, tr, tc, k)
        vals = quantise(coef.gather(1, idx), self.bits)
        sparse = torch.zeros_like(coef).scatter_(1, idx, vals).reshape(m, tr, tc)
        sent = untile(dr.T @ sparse @ dc, tuple(acc.shape), grid)
        return sent, m * (k * self.bits + 32)


class ArmFeedback:
    """One miner's error-feedback memory for an arm (``e = beta * e + delta``, send C(e), subtract it)."""

    def __init__(self, arm: Any, beta: float, scale: float = 1.0) -> None:
        self.arm, self.beta, self.scale = arm, beta, scale
        self.buffers: dict[str, Tensor] = {}

    def compress(self, delta: dict[str, Tensor], round: int) -> tuple[dict[str, Tensor], int]:
        """Decoded update and payload bits of ``delta`` (only the tensors in it keep their memory)."""
        self.buffers = {n: b for n, b in self.buffers.items() if n in delta}
        sent: dict[str, Tensor] = {}
        bits = 0
        for name in sorted(delta):
            d = delta[name].detach().float() * self.scale
            prev = self.buffers.get(name)
            acc = d.clone() if prev is None else prev * self.beta + d
            s, b = self.arm.compress(acc, name, round)
            self.buffers[name] = acc - s
            sent[name], bits = s, bits + b
        return sent, bits


def header_bytes(sim: Any, round: int, a: Any, res: Any) -> int:
    """Bytes of the header ``protocol.wire.update`` writes for this miner's update, measured by sending
    the recipe codec's encoding of the same tensors through the simulation's real wire transport
    (``tessera.simwire``; the header names modules, model dimensions, digests and the codec)."""

    codec = sim.run.codec
    encs = {n: encode(torch.zeros_like(t), codec) for n, t in res.params.items()}
    zeros = {n: torch.zeros_like(t) for n, t in res.params.items()}
    _, nbytes = wire_transport(codec, sim.run.model)(round, a, encs, zeros, res, b"\0" * 32)
    return int(nbytes) - FRAME_BYTES - sum(e.nbytes for e in encs.values())


def arm_simulation(
    run: Any,
    ds: Any,
    miners: list[str],
    seed: int,
    arm: Any,
    beta: float,
    merger: Callable[..., Any] | None,
    eval_windows: int,
    device: str = "cpu",
    epoch_rounds: int = 1,
) -> Any:
    """A :class:`training.simulation.Simulation` whose miners send with ``arm`` and error feedback
    ``beta``; ``bytes_sent`` counts the real header plus the arm's payload."""

    class ArmSimulation(Simulation):
        def __init__(self) -> None:
            super().__init__(
                run,
                ds,
                miners,
                run_seed=seed,
                compress=False,
                eval_windows=eval_windows,
                merger=merger,
                device=device,
                epoch_rounds=epoch_rounds,
            )
            self.arm_feedback: dict[str, ArmFeedback] = {}
            self.headers: dict[tuple[str, ...], int] = {}
            self.transport = self._arm_transport

        def _arm_transport(self, round, a, encs, delta, res, base_digest):  # type: ignore[no-untyped-def]
            ef = self.arm_feedback.setdefault(a.miner, ArmFeedback(arm, beta))
            sent, bits = ef.compress(delta, round)
            if a.module_ids not in self.headers:
                self.headers[a.module_ids] = header_bytes(self, round, a, res)
            self.last_bits[a.miner] = bits
            return sent, FRAME_BYTES + self.headers[a.module_ids] + math.ceil(bits / 8)

        def step(self, round: int, evaluate_after: bool = True) -> Any:
            self.last_bits: dict[str, int] = {}
            st = super().step(round, evaluate_after)
            numel = sum(
                sum(self.params[n].numel() for n in self.trained_names(a))
                for a in self.assignments(round).values()
            )
            st.payload_bits_per_param_step = sum(self.last_bits.values()) / numel / self.run.inner.steps
            return st

        def trained_names(self, a: Any) -> list[str]:
            return list(module_params(self.params, a.module_ids))

    return ArmSimulation()


def make_arm(spec: dict[str, Any], seed: int) -> tuple[Any, float, Callable[..., Any] | None]:
    """The compressor, error-feedback decay and merger of an arm ``spec`` (``arm``: ``seeded`` or
    ``sparseloco``; a seeded arm merges as the validators do, SparseLoCo as Templar does)."""
    if spec["arm"] == "sparseloco":
        return SparseLoCoCodec(spec["topk"]), spec.get("beta", EF_DECAY), sparseloco_merge
    if spec["arm"] == "seeded":
        arm = SeededCodec(spec["keep"], spec.get("bits", 2), spec.get("select", "random"), seed)
        return arm, spec.get("beta", 0.95), lambda c: robust_merge(c, MergePolicy())
    raise ValueError(f"unknown arm {spec['arm']!r}")


def run_arm(
    mode: str,
    scale: dict[str, Any],
    rounds: int,
    h: int,
    seed: int,
    spec: dict[str, Any],
    corpus: Any,
    cache: Any = None,
    windows: int = 0,
) -> dict[str, Any]:
    """One simulated run of an arm (same model, data, rounds and evaluation as
    ``benchmarks.training_runs.run_variant``): the final held-out loss and the bits; cached by config."""

    config = {
        "kind": "arm",
        "mode": mode,
        "scale": scale,
        "rounds": rounds,
        "h": h,
        "seed": seed,
        "spec": spec,
        "corpus": corpus.digest,
        "windows": windows,
    }
    if cache is not None and (hit := cache.get(config)) is not None:
        return dict(hit)
    run = run_config(mode, scale, rounds, h, _recipe_codec(), spec["outer"], spec.get("carry", True))
    arm, beta, merger = make_arm(spec, seed)
    miners = [f"0x{i + 1:040x}" for i in range(MINERS)]
    ds = prepare(corpus, run.model)
    epoch = spec.get("epoch_rounds", 1)
    sim = arm_simulation(run, ds, miners, seed, arm, beta, merger, windows or 10**9, epoch_rounds=epoch)
    t0, wire, bits, trained = time.perf_counter(), 0, [], 0
    for r in range(rounds):
        st = sim.step(r, evaluate_after=r + 1 == rounds)
        wire += st.bytes_sent
        bits.append(st.payload_bits_per_param_step)
        trained += sum(
            sim.params[n].numel() for a in sim.assignments(r).values() for n in sim.trained_names(a)
        )
    result = {
        "final_loss": st.eval_loss,
        "eval_loss": [(rounds, st.eval_loss)],
        "payload_bits_per_param_step": sum(bits) / len(bits),
        "wire_bits_per_param_step": 8.0 * wire / (trained * h),
        "seconds": time.perf_counter() - t0,
    }
    if cache is not None:
        cache.put(config, result)
    return result


def _recipe_codec() -> dict[str, Any]:
    """The recipe's codec (what the measured header names)."""
    return dict(CHOSEN["codec"])
