"""``tessera faults``: crash, cut off and corrupt real node processes of a devnet, then check the money.

Each scenario starts a fresh devnet (real anvil, contracts, DHT, miner and validator OS processes; see
:mod:`tessera.devnet.network`), lets round 1 be the join round, injects one fault in the first training
round (the *fault round*, chain round 2) at a phase drawn from a named seed, and runs one or more rounds
after it. Faults:

- ``kill-chain``: ``kill -9`` of anvil, down for a few seconds, restarted from its last periodic state
  dump (``--state-interval``): blocks mined since the dump are gone, so to the nodes it is a reorg; their
  lost transactions must be re-sent while the phase allows.
- ``kill-miner`` / ``kill-validator``: ``kill -9`` of a node process, restarted after a delay from its
  data directory.
- ``cut-validator``: a validator's chain RPC and its HTTP API are behind :class:`FaultProxy` ports that are
  closed ("blocked port") from the fault until about a round later.
- ``stall-miner`` / ``corrupt-miner``: a miner's public URL is a proxy that, for the fault round, accepts and
  trickles a byte a second without ever answering, or flips a byte of every body it serves.

- ``poison-dht``: a stranger (plain hivemind client, no key on chain, no stake) joins the DHT and, from the
  fault round on, stores over every round key a non-dictionary value, forged and replayed records under
  the honest nodes' subkeys (all with a one-year expiry), and records it signed with a bad and a dead URL
  (also pushed to every node's ``/records``); see :mod:`tessera.devnet.poison`. Every honest participant
  must be paid in every round, as in every scenario.

- ``slow-certificate``: every validator's ``certify`` transaction is held 30 s at a proxy in front of its
  chain RPC, from the start, on 2-s blocks with wall-clock phases (a 60-s commit window); the miners must
  train ahead of the certificate and lose no round (:mod:`~tessera.devnet.faults.slowcert`).

- ``mixed-hardware``: no fault is injected; the devnet's node processes run under different CPU
  instruction sets for torch's kernels (``ATEN_CPU_CAPABILITY`` default/avx2/avx512, the last only where
  ``/proc/cpuinfo`` shows AVX-512 F/BW/VL/DQ; ``MKL_ENABLE_INSTRUCTIONS`` and ``ONEDNN_MAX_CPU_ISA`` caps
  on some), and every round must be certified with no honest miner refused or slashed
  (:func:`mixed_hardware_env`, :func:`check_mixed_hardware`).

After each scenario the chain's events are checked against the issue's promises: nothing paid twice;
payouts equal what the revealed scores settle to (:func:`protocol.rounds.consensus.settle`, the contract's
arithmetic); every honest participant that was not the fault's target is paid in every round; the target
is paid for the fault round when it completed it (its update was fetched / its scores revealed) and earns
nothing when it served stalls or corrupt bytes; the round after the fault is finalized and its checkpoint
certified, with the target taking part and paid (recovery within one round); nobody is slashed; and the
node logs contain a line saying what happened (grep patterns per scenario).

Each scenario is one class with its behaviour (set-up, inject, restore, checks) over a narrow
:class:`~tessera.devnet.faults.base.FaultContext`; no scenario name is compared anywhere.

Modules:

- ``base``: the :class:`Scenario` base, the :class:`FaultContext`, the phase constants
- ``checks``: the money checks every scenario ends with (``check_run``)
- ``figures``: rounds lost, and each verification's time against its budget
- ``harness``: the driver of one scenario on a fresh devnet, always stopping what it started
- ``kills``: ``kill-chain``, ``kill-miner``, ``kill-validator``
- ``mixed``: ``mixed-hardware`` and its checks
- ``poisondht``: ``poison-dht``
- ``ports``: ``cut-validator``, ``stall-miner``, ``corrupt-miner``
- ``report``: ``run_faults`` (the entry point of ``tessera faults``) and the table
- ``scenarios``: ``SCENARIOS``: the registry, one instance per name, in ``--all``'s order
- ``slowcert``: ``slow-certificate``
- ``slowpeers``: issue 27's slow, frozen and unreachable peers, and a key run twice
"""

from __future__ import annotations

from tessera.devnet.faults.base import (
    CERTIFY_STALL_S,
    FAULT_ROUND,
    POINTS,
    STARTUP_HOLD_S,
    FaultContext,
    FaultRun,
    FaultsError,
    Scenario,
)
from tessera.devnet.faults.checks import check_run
from tessera.devnet.faults.mixed import (
    AVX512_FLAGS,
    REPLAY_METRICS,
    check_mixed_hardware,
    cpu_flags,
    mixed_hardware_env,
    setting_text,
)
from tessera.devnet.faults.report import run_faults, table
from tessera.devnet.faults.scenarios import SCENARIOS

__all__ = [
    "AVX512_FLAGS",
    "CERTIFY_STALL_S",
    "FAULT_ROUND",
    "POINTS",
    "REPLAY_METRICS",
    "SCENARIOS",
    "STARTUP_HOLD_S",
    "FaultContext",
    "FaultRun",
    "FaultsError",
    "Scenario",
    "check_mixed_hardware",
    "check_run",
    "cpu_flags",
    "mixed_hardware_env",
    "run_faults",
    "setting_text",
    "table",
]
