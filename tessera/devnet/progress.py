"""``tessera devnet``'s progress lines where there is no live view (``--no-live``, or output to a pipe or
a file, where rich draws the live view only once, at exit): one line per certified round, with the
held-out loss before and after its merge and the first sample of its certified checkpoint."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def round_line(round: int, summary: dict[str, Any], got: dict[str, Any] | None, seconds: float) -> str:
    """The line for ``round``: validator0's round ``summary`` (``/rounds``) and the round's samples."""
    hb, ha = summary.get("heldout_before"), summary.get("heldout_after")
    held = f"held-out {hb:.3f} -> {ha:.3f}" if hb is not None and ha is not None else "held-out -"
    line = f"{seconds:6.0f}s  round {round} certified theta_{round + 1}: {held}"
    if got is not None:
        texts = got.get("samples") or [f"({got.get('error', 'no sample')})"]
        line += "  sample: " + repr(got.get("prompt", "") + texts[0].replace("\n", " / ")[:70])
    return line


def printer(
    net: Any, samples: dict[int, dict[str, Any]], t0: float, sampler: Callable[[int], None] | None
) -> Callable[[int], None]:
    """A round callback that takes the round's samples (``sampler``, when there is one), then prints
    :func:`round_line` to stdout."""

    def on_round(round: int) -> None:
        if sampler is not None:
            sampler(round)
        summary = {x.get("round"): x for x in net.get("validator0", "/rounds") or []}.get(round, {})
        print(round_line(round, summary, samples.get(round), time.time() - t0), flush=True)

    return on_round
