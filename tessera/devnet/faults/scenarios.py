"""The fault scenarios of ``tessera faults``, one instance of each by name, in the order ``--all`` runs
them. Each is a :class:`~tessera.devnet.faults.base.Scenario` subclass that declares its settings and
carries its behaviour; adding a scenario is adding its class and its line here."""

from __future__ import annotations

from tessera.devnet.faults.base import Scenario
from tessera.devnet.faults.kills import KillChain, kill_miner, kill_validator
from tessera.devnet.faults.mixed import MixedHardware
from tessera.devnet.faults.poisondht import PoisonDht
from tessera.devnet.faults.ports import CutValidator, corrupt_miner, stall_miner
from tessera.devnet.faults.slowcert import SlowCertificate
from tessera.devnet.faults.slowpeers import DripSybils, FreezeAfterAnnounce, SameKeyTwice, ValidatorRpcOutage

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        KillChain(),
        kill_miner(),
        kill_validator(),
        CutValidator(),
        stall_miner(),
        corrupt_miner(),
        PoisonDht(),
        DripSybils(),
        FreezeAfterAnnounce(),
        ValidatorRpcOutage(),
        SameKeyTwice(),
        SlowCertificate(),
        MixedHardware(),
    )
}
"""Every scenario by name."""
