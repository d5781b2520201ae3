"""The loop every node role runs: step, wait, and on a failure retry with exponential backoff.

A node's step handles peers' input (records, updates, blobs, signatures); an error of any type that one
peer's input causes must not stop the process. Typed errors (``retry_on``) are reported in one line; any
other :class:`Exception` is reported the same way (kept for ``/status``, counted in ``errors{type}``) and
logged with its traceback, since it names a boundary that should have refused the input with a typed
error. Only ``BaseException``s that are not ``Exception``s (``KeyboardInterrupt``, ``SystemExit``) end the
loop, unless ``survive_untyped=False`` asks for the old behaviour (tests of a bug's propagation).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)

MAX_BACKOFF = 15.0
"""Seconds: the longest wait between retries of a failing step."""


@dataclass(frozen=True)
class StepLoop:
    """How a node's step loop runs (:meth:`run`): its interval, which errors it retries or ends on, and
    whom it tells.

    An exception of ``retry_on`` (the node's typed errors: chain, network, its own) is passed to
    ``on_error(exc, backoff)`` and the step is retried after ``backoff`` seconds, doubling up to
    :data:`MAX_BACKOFF` while it keeps failing. Any other ``Exception`` is handled the same way after its
    traceback is logged (``survive_untyped=False``: it propagates). ``on_recovery()`` is called after the
    first successful step that follows a failure (the node clears the error it shows in ``/status``).
    An exception of ``fatal`` (a condition no retry can mend, such as another node holding this node's
    key) ends the loop and propagates, unreported: the caller prints it once and exits."""

    interval: float
    """Seconds between steps, and the first backoff."""
    retry_on: tuple[type[BaseException], ...]
    """The node's typed errors: reported and retried."""
    on_error: Callable[[BaseException, float], None]
    """Told each failure and the seconds before the retry (:func:`failure_reporter`)."""
    done: Callable[[], bool] | None = None
    """Checked after each step: the loop ends once it holds."""
    on_recovery: Callable[[], None] | None = None
    """Called after the first successful step that follows a failure (:func:`recovery_reporter`)."""
    fatal: tuple[type[BaseException], ...] = ()
    """Errors that end the loop and propagate, unreported."""
    pace: Callable[[], float] | None = None
    """The wait after a successful step (:class:`PollPacer`; None: ``interval``)."""
    survive_untyped: bool = True
    """Whether an ``Exception`` outside ``retry_on`` is retried too (False: it propagates)."""

    def run(self, step: Callable[[], None], stop: threading.Event) -> None:
        """Call ``step`` every ``interval`` seconds (or what ``pace()`` says) until ``stop`` is set or
        ``done()`` holds."""
        backoff = self.interval
        failing = False
        while not stop.is_set():
            try:
                step()
                backoff = self.interval
                if failing and self.on_recovery is not None:
                    self.on_recovery()
                failing = False
            except self.fatal:
                raise
            except self.retry_on as exc:
                failing = True
                self.on_error(exc, backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
            except Exception as exc:
                if not self.survive_untyped:
                    raise
                failing = True
                log.error("untyped %s in a node step (retried)", type(exc).__name__, exc_info=exc)
                self.on_error(exc, backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
            if self.done is not None and self.done():
                break
            stop.wait(self.pace() if self.pace is not None and not failing else backoff)


IDLE_POLL_MAX_S = 4.0
"""Seconds: the longest wait between looks at the chain while a node's view of it stays the same, in a phase
of at most ``PHASE_POLLS`` times as long (a longer phase raises the cap with it)."""
PHASE_POLLS = 8
"""Looks at the chain an idle node takes in one phase window at the cap, whatever the window's length: the
cap is the window over this (a fixed cap made the requests grow with the round's length; 16
were half a validator's requests in a 220-s round of 2-s blocks). Deadlines are met by the halving
below, not by this."""


class PollPacer:
    """How long a node waits before its next look at the chain (a look every 0.5 s was most of a
    node's JSON-RPC requests, about 1,660 a 220-s round on a chain of 2-s blocks).

    The wait is ``base`` (or half a block, if longer) after anything changed (round, phase or what the
    node says it is doing), and doubles while nothing does, up to ``cap`` or the phase window over
    ``phase_polls`` (the window from the first reading of the phase to its deadline, at the block time
    measured from the readings), whichever is longer, and never past half the time left to the phase's
    deadline, so a node that waits for a peer or a deadline asks about ``phase_polls`` times a phase
    however long it lasts, and one whose deadline passed (a phase to advance) asks at that first wait."""

    def __init__(
        self,
        base: float,
        cap: float = IDLE_POLL_MAX_S,
        phase_polls: int = PHASE_POLLS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base = base
        self.clock = clock
        self.cap = max(cap, base)
        self.phase_polls = max(1, phase_polls)
        self._key: object = None
        self._wait = base
        self._window = 0.0
        self._first: tuple[float, int] | None = None
        self._latest: tuple[float, int] | None = None

    def block_seconds(self) -> float:
        """Seconds per block over the readings seen so far (1.0 until two blocks were seen)."""
        if self._first is None or self._latest is None or self._latest[1] <= self._first[1]:
            return 1.0
        return (self._latest[0] - self._first[0]) / (self._latest[1] - self._first[1])

    def next(self, round: int, phase: int, block: int, deadline: int, doing: object = None) -> float:
        """The wait after a step that read the chain at ``block`` in ``round``'s ``phase`` (deadline block
        ``deadline``); ``doing``: what the node says it does (a change resets the wait)."""
        now = self.clock()
        if self._first is None or block < self._first[1]:
            self._first = (now, block)
        self._latest = (now, block)
        key = (round, phase, doing)
        if not isinstance(self._key, tuple) or self._key[:2] != (round, phase):
            self._window = max(0, deadline - block) * self.block_seconds()  # the phase as first seen
        # nothing on the chain changes between blocks: no wait shorter than half a block
        floor = max(self.base, self.block_seconds() / 2)
        if key != self._key:
            self._key, self._wait = key, floor
            return floor
        cap = max(self.cap, self._window / self.phase_polls)
        self._wait = min(self._wait * 2, cap)
        if block > deadline:
            return floor
        left = (deadline - block) * self.block_seconds()
        return max(floor, min(self._wait, left / 2))


class _Reporting(Protocol):
    last_error: str
    metrics: Any


def failure_reporter(
    node: _Reporting, role: str, logger: logging.Logger
) -> Callable[[BaseException, float], None]:
    """The ``on_error`` of a node: keep the error for ``/status``, count it in the node's Prometheus
    ``errors{type}`` and log one line saying when the step is retried."""

    def on_error(exc: BaseException, backoff: float) -> None:
        node.last_error = f"{type(exc).__name__}: {exc}"
        node.metrics.errors.labels(type=type(exc).__name__).inc()
        logger.warning("%s step failed (retrying in %.1fs): %s", role, backoff, node.last_error)

    return on_error


def recovery_reporter(node: _Reporting, role: str, logger: logging.Logger) -> Callable[[], None]:
    """The ``on_recovery`` of a node: ``/status`` stops showing an error that no longer happens (it used to
    keep the last one forever), and the log says the node is working again."""

    def on_recovery() -> None:
        if node.last_error:
            logger.warning("%s recovered (last error: %s)", role, node.last_error)
        node.last_error = ""

    return on_recovery
