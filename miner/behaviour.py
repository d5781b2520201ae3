"""Miner behaviours: the honest default and the hook adversarial modes plug into.

A :class:`Behaviour` is consulted at each decision of a round; every method's default is the honest
action, so a mode overrides only what it changes (the attack suite adds free riders, lazy miners, copiers,
replayers, poisoners and forgers as subclasses and registers them with :func:`register`). The hook points,
in round order:

- ``batches``: the token batches the miner trains on (a lazy miner trains on other data);
- ``inner_result``: the inner loop's result, transcript included (a free rider makes one up instead of
  training: last-delta rider);
- ``pseudo_gradient``: the per-parameter delta before compression (poisoners scale or flip it);
- ``update_bytes``: the encoded update before its digest is committed (a copier substitutes another's);
- ``should_commit``: whether to commit at all;
- ``served_update``: the bytes served after the deadline (a replayer serves something else);
- ``evidence``: the TEE evidence served (a forger tampers with it);
- ``serves_state``: whether transcript states are served on demand (a miner withholding when audited
  refuses them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from miner.errors import MinerConfigError
from training.inner import InnerResult


@dataclass
class BehaviourContext:
    """What a behaviour may look at when deciding (the validator's round context is
    ``validator.context.RoundContext``)."""

    round: int
    miner: str
    modules: tuple[str, ...]
    inner_steps: int
    extra: dict[str, Any] = field(default_factory=dict)
    epoch_rounds: int = 1
    """Rounds per assignment epoch in the run file (a DiPaCo miner knows its path that long ahead)."""


class Behaviour:
    """The honest miner. Subclass and override to build an adversarial mode."""

    name = "honest"

    def bind(self, spec: Any, coord: Any) -> None:
        """Called once, when the miner's connections are made, with its run file and coordinator (honest:
        nothing; a mode started by name that reads the chain, such as the audit draw, keeps them)."""

    def batches(self, ctx: BehaviourContext, batches: Tensor) -> Tensor:
        """The batches to train on (honest: the assigned ones)."""
        return batches

    def inner_result(
        self, ctx: BehaviourContext, checkpoint: Mapping[str, Tensor], train: Callable[[], InnerResult]
    ) -> InnerResult:
        """The inner loop's result from ``checkpoint`` (theta_r) (honest: ``train()``, the assigned
        training on the batches :meth:`batches` chose)."""
        return train()

    def pseudo_gradient(self, ctx: BehaviourContext, delta: dict[str, Tensor]) -> dict[str, Tensor]:
        """The delta to compress and send (honest: the true one)."""
        return delta

    def update_bytes(self, ctx: BehaviourContext, data: bytes) -> bytes:
        """The encoded update to commit (honest: as built)."""
        return data

    def should_commit(self, ctx: BehaviourContext) -> bool:
        """Whether to commit this round (honest: yes)."""
        return True

    def served_update(self, ctx: BehaviourContext, data: bytes) -> bytes:
        """The update bytes served after the deadline (honest: the committed ones)."""
        return data

    def evidence(self, ctx: BehaviourContext, evidence: bytes | None) -> bytes | None:
        """TEE evidence to serve (honest: as produced)."""
        return evidence

    def serves_state(self, ctx: BehaviourContext) -> bool:
        """Whether to serve the round's transcript states to the validators that ask (honest: yes)."""
        return True


_REGISTRY: dict[str, Callable[[], Behaviour]] = {"honest": Behaviour}


def register(name: str, factory: Callable[[], Behaviour]) -> None:
    """Make a behaviour selectable by name (``--behaviour NAME``)."""
    _REGISTRY[name] = factory


def available() -> list[str]:
    """Registered behaviour names."""
    return sorted(_REGISTRY)


def make_behaviour(name: str) -> Behaviour:
    """Instantiate a registered behaviour."""
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise MinerConfigError(f"unknown miner behaviour {name!r}; choose from {available()}") from None
