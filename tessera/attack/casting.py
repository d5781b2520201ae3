"""Who takes part in an attack scenario: the :class:`Scenario` record and the casts it is built from (honest
nodes at the deployment's stakes, adversarial miners by behaviour, validators by class)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from miner.node import MinerNode, simulated_evidence
from protocol.runspec import RunSpec
from tessera.attack.harness import Participant
from tessera.attack.miners import Board
from validator.devtee import dev_evidence_checker
from validator.node import ValidatorNode

MINER_STAKE = 100
VALIDATOR_STAKE = 1000
CHAIN_ID = 31337
DEV_SEED = os.urandom(32)
"""This process's development-enclave root: fresh per run, like the devnet's."""


@dataclass
class Scenario:
    """A named attack: its participants (built fresh per run) and what counts as cheating."""

    name: str
    kind: str
    """``miner``, ``validator`` or ``baseline``."""
    description: str
    build: Callable[[], list[Participant]]
    cheat_from: int = 1
    """First round in which the adversaries cheat."""
    provable: bool = True
    """Whether the cheat leaves slashing evidence."""
    board: Board = field(default_factory=Board)
    tee: bool = False
    """Validators check TEE evidence (development root)."""
    faults: list[tuple[int, int, int] | tuple[int, int, int, float]] = field(default_factory=list)
    """Crash-and-restart faults: (round, phase, participant index[, seconds down]); see ``harness.Fault``."""
    scores_dishonestly: bool = True
    """A validator attack on the scores (checked: it earns less per stake than honest validators); False
    for one that attacks something else, such as the certificate (checked: the network stays live)."""
    phase_blocks: int = 40
    """Blocks per phase. The harness mines one block per step of every node (about 0.3 s here), so 40 holds
    the nodes' work; a fault that keeps a node down must get a window that outlasts it, as a deployment's
    windows are sized to (``tessera.devnet.sizing``). The fast-forward skips a phase once all are done."""
    audit_params: dict[str, int] = field(default_factory=dict)
    """The chain's audit rate, committee size or vesting where not the suite's (q = 1, every validator)."""
    audit_checks: str = ""
    """Checks read from the chain (``tessera.attack.auditchecks``): ``proven-by-one``,
    ``withhold-when-audited`` or ``false-unanswered-report``; "" for none."""
    timeout_s: float = 900.0  # wall-clock limit of one run (longer where the effect lands rounds later)
    min_rounds: int = 0  # rounds the checks need (a report's window closing), whatever --rounds says
    adapt_spec: Callable[[RunSpec], RunSpec] | None = None
    """The scenario's run file from the suite's (None: the suite's), e.g. DiPaCo with assignment epochs;
    its all-honest reference runs the same one."""


def honest(validators: int = 2, miners: int = 3) -> list[Participant]:
    """``validators`` honest validators, then ``miners`` honest miners, at the default stakes."""
    return [Participant("validator", "honest", VALIDATOR_STAKE) for _ in range(validators)] + [
        Participant("miner", "honest", MINER_STAKE) for _ in range(miners)
    ]


def miner_factory(behaviour: Any, evidence: bool = False) -> Callable[..., Any]:
    """Builds a miner node with ``behaviour`` (and simulated TEE evidence with ``evidence``)."""

    def make(cfg: Any, spec: Any, coord: Any, disc: Any) -> Any:
        ev = simulated_evidence(CHAIN_ID, DEV_SEED) if evidence else None
        return MinerNode(cfg, spec, coord, disc, behaviour=behaviour, evidence_fn=ev)

    return make


def adversary(label: str, behaviour: Any, evidence: bool = False, stake: int = MINER_STAKE) -> Participant:
    """An adversarial miner named ``label`` that acts by ``behaviour``."""
    return Participant("miner", label, stake, miner_factory(behaviour, evidence))


def validator_factory(cls: Any, **kwargs: Any) -> Callable[..., Any]:
    """Builds a validator node of class ``cls`` with ``kwargs``."""

    def make(cfg: Any, spec: Any, coord: Any, disc: Any, key: str, **extra: Any) -> Any:
        return cls(cfg, spec, coord, disc, key, **kwargs, **extra)

    return make


def tee_validators(n: int = 2) -> list[Participant]:
    """``n`` honest validators that check TEE evidence against this process's development root."""
    return [
        Participant(
            "validator",
            "honest",
            VALIDATOR_STAKE,
            validator_factory(ValidatorNode, check_evidence=dev_evidence_checker(CHAIN_ID, DEV_SEED)),
        )
        for _ in range(n)
    ]
