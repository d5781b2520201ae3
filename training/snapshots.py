"""Copies of the inner loop's training state and their digests, off the step's thread where it can be.

The state (``training.inner``'s module doc: parameters, AdamW moments, step counters) is captured as CPU
tensors, restored into a model and optimizer, and digested (``training.digest.part_digests``). On a GPU,
:func:`capture_async` copies into pinned host memory without waiting and :func:`digest_future` hashes in a
helper thread once a CUDA event says the copies have landed, so neither the device-to-host copy nor
SHA-256 stalls the steps; the bytes digested are the same as a synchronous copy's.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor

import torch
from torch import Tensor

from training.digest import part_digests
from training.errors import ReplayError


def on_gpu(params: dict[str, torch.nn.Parameter]) -> bool:
    """Whether the trained parameters live on a CUDA device (then the loop takes its GPU paths)."""
    return any(p.device.type == "cuda" for p in params.values())


def capture(
    params: dict[str, torch.nn.Parameter],
    opt: torch.optim.AdamW,
    step: int,
    adam_step: int,
    copy: bool = True,
) -> dict[str, Tensor]:
    """The state (see the module doc) on the CPU; ``copy=False`` returns live views where they are (on the
    compute device), valid until the next step (for digesting only). On a GPU use :func:`capture_async`."""
    state: dict[str, Tensor] = {
        "step": torch.tensor(step, dtype=torch.int64),
        "adam_step": torch.tensor(adam_step, dtype=torch.int64),
    }
    for name, p in params.items():
        st = opt.state.get(p)
        entries = {
            "param": p.detach(),
            "exp_avg": st["exp_avg"] if st else torch.zeros_like(p),
            "exp_avg_sq": st["exp_avg_sq"] if st else torch.zeros_like(p),
        }
        for kind, t in entries.items():
            state[f"{kind}/{name}"] = t.to("cpu", copy=True) if copy else t
    return state


def capture_async(
    params: dict[str, torch.nn.Parameter], opt: torch.optim.AdamW, step: int, adam_step: int
) -> tuple[dict[str, Tensor], torch.cuda.Event | None]:
    """:func:`capture` into pinned host memory without waiting for the copies (GPU parameters): the state
    and the CUDA event after which its bytes are valid (None where the parameters are on the CPU: a
    plain copy, valid at once). The copies are queued on the current stream, so the steps that follow
    cannot overwrite what they read."""
    if not on_gpu(params):
        return capture(params, opt, step, adam_step), None
    live = capture(params, opt, step, adam_step, copy=False)
    state: dict[str, Tensor] = {}
    for key, t in live.items():
        if t.device.type == "cpu":
            state[key] = t
        else:
            state[key] = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            state[key].copy_(t, non_blocking=True)
    done = torch.cuda.Event()
    done.record(torch.cuda.current_stream(next(iter(params.values())).device))
    return state, done


def restore(
    params: dict[str, torch.nn.Parameter], opt: torch.optim.AdamW, state: Mapping[str, Tensor]
) -> tuple[int, int]:
    """Load ``state`` into the trained parameters and AdamW (fresh moments when its ``adam_step`` is 0):
    its ``(step, adam_step)``; :class:`ReplayError` if its names, shapes or counters do not fit."""
    expected = {"step", "adam_step"} | {
        f"{k}/{n}" for n in params for k in ("param", "exp_avg", "exp_avg_sq")
    }
    if set(state) != expected:
        raise ReplayError("snapshot names do not match the assignment's parameters")
    step, adam_step = int(state["step"]), int(state["adam_step"])
    if step < 0 or adam_step < step:
        raise ReplayError("snapshot step counters are inconsistent")
    opt.state.clear()
    with torch.no_grad():
        for name, p in params.items():
            for kind in ("param", "exp_avg", "exp_avg_sq"):
                if state[f"{kind}/{name}"].shape != p.shape:
                    raise ReplayError(f"snapshot shape of {kind}/{name} does not match the model")
            p.copy_(state[f"param/{name}"])
            if adam_step > 0:
                opt.state[p] = {  # AdamW keeps a non-capturable step count on the CPU
                    "step": torch.tensor(float(adam_step)),
                    "exp_avg": state[f"exp_avg/{name}"].to(p.device, copy=True),
                    "exp_avg_sq": state[f"exp_avg_sq/{name}"].to(p.device, copy=True),
                }
    return step, adam_step


def digest_future(
    state: dict[str, Tensor], pool: ThreadPoolExecutor | None, landed: torch.cuda.Event | None = None
) -> Future[tuple[bytes, bytes]]:
    """``part_digests(state)`` in ``pool`` (SHA-256 releases the GIL), or here and now without one;
    ``landed``: the event after which ``state``'s bytes are valid (:func:`capture_async`)."""
    if pool is not None:
        if landed is not None:
            return pool.submit(_digest_landed, state, landed)
        return pool.submit(part_digests, state)
    if landed is not None:
        return _done(_digest_landed(state, landed))
    return _done(part_digests(state))


def _digest_landed(state: dict[str, Tensor], landed: torch.cuda.Event) -> tuple[bytes, bytes]:
    """``part_digests(state)`` once the copies into ``state`` have landed."""
    landed.synchronize()
    return part_digests(state)


def _done(parts: tuple[bytes, bytes]) -> Future[tuple[bytes, bytes]]:
    """A finished future holding ``parts``."""
    done: Future[tuple[bytes, bytes]] = Future()
    done.set_result(parts)
    return done
