"""The fault scenarios of ``tessera faults``: their names, targets and injection points, the phase
constants the driver times them by, and the node settings of ``mixed-hardware``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tessera.errors import TesseraError

#: Where in the fault round a fault may be injected: the four timed phases, and ``certify`` (round F was
#: finalized, theta_{F+1} not certified yet: validators are merging and gathering signatures).
POINTS = ("commit", "reveal", "score-commit", "score-reveal", "certify")
PHASE_ORDER = ("commit", "reveal", "score-commit", "score-reveal", "finalize", "certify")
"""Every point of a round in time order (``finalize``: finalized, between score-reveal and certify)."""
FAULT_ROUND = 2
"""Chain round of the fault on a fresh devnet (round 1 is the join round)."""
STARTUP_HOLD_S = 120.0
"""Seconds the fast-forward waits, at most, for a restarted node's API to come up."""
CERTIFY_STALL_S = 180.0
"""Seconds a round may stay finalized and uncertified in a scenario without a fault (``mixed-hardware``)
before the harness stops and reports why (merging and signing take seconds)."""
AVX512_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq")
"""The CPU flags ATen's ``avx512`` kernels need (without them torch dies of an illegal instruction)."""


class FaultsError(TesseraError):
    """A fault scenario could not be run (the devnet failed or a deadline passed)."""


SLOW_PEER_WINDOWS = (30, 10, 60, 8)
"""Issue 27's scenarios' phase windows in 2-s blocks: 60 s to train, 20 s to announce, 120 s to verify 6
miners on 3 validators sharing 2 loaded cores (about 7 s a miner each, measured by the sizing), 16 s to
reveal: a 216-s round."""
FREEZE_S = 30.0
"""Seconds ``freeze-after-announce`` keeps its miner stopped and ``validator-rpc-outage`` the RPC down."""
DRIP_S = 25.0
"""Seconds ``drip-sybils``' identities hold back each transcript state they serve."""


@dataclass(frozen=True)
class Scenario:
    """One fault."""

    name: str
    summary: str
    target: str
    """Node name, or ``anvil``."""
    points: tuple[str, ...]
    """Where it may be injected (drawn with the seed)."""
    log_patterns: tuple[tuple[str, str], ...]
    """(node name or ``*`` for any node, regex) that must occur in the logs after the fault."""
    inject: bool = True
    """False: nothing is injected; the scenario is the devnet's set-up (``mixed-hardware``)."""
    validators: int = 2
    """Validator processes of its devnet."""
    honest_miners: int | None = None
    """Honest miner processes (None: ``--miners``)."""
    sybils: int = 0
    """Extra miners, the scenario's cheats (``sybil0``.. in the report), started after the honest ones."""
    block_time: float = 1.0
    """Seconds between anvil's blocks."""
    fast_forward: bool = True
    """False: every phase lasts its whole window (wall-clock deadlines, as on a real chain)."""
    windows: tuple[int, int, int, int] | None = None
    """Blocks of COMMIT, REVEAL, SCORE_COMMIT and SCORE_REVEAL as they are (None: sized from the work
    measured on this machine, which on a loaded one makes a round of 2-s blocks last half an hour)."""
    miner_stake: int | None = None
    """Tokens the devnet's miners bond, its minimum (None: the deployment default). The audit rate follows
    from it (issue 26's deterrence formula): 100 tokens audits every miner, so every miner's transcript
    states are fetched; at the default stake (0.40%) almost none are."""


def _slow_peer(
    name: str, summary: str, target: str, points: tuple[str, ...], line: tuple[str, str] | None, **kw: Any
) -> Scenario:
    """One of issue 27's scenarios: 3 validators, 4 honest miners, 2-s blocks, no fast-forward; ``line``:
    (node, regex) its logs must show (None: none; the scenario's own check reads the log it needs)."""
    return Scenario(
        name, summary, target, points, (line,) if line else (),
        validators=3, honest_miners=4, block_time=2.0, fast_forward=False, windows=SLOW_PEER_WINDOWS, **kw,
    )  # fmt: skip


SLOW_PEER_SCENARIOS = (
    _slow_peer(
        "drip-sybils",
        f"two identities with keys ground to low addresses serve their transcript states {DRIP_S:.0f}s late",
        "sybils",
        ("commit",),
        ("validator*", r"over its budget|not served in time|stall|timed out"),
        sybils=2,
        # every miner audited, so the sybils' dripped states are fetched: at the default stake they are
        # almost never asked for, and the sybils, training honestly, were paid (seed 107, b85a98f)
        miner_stake=100,
    ),
    _slow_peer(
        "freeze-after-announce",
        f"SIGSTOP miner1 (its process group) for {FREEZE_S:.0f}s right after it announces in REVEAL",
        "miner1",
        ("reveal",),
        ("validator*", r"over its budget|not served in time|stalled|timed out|unverified"),
    ),
    _slow_peer(
        "validator-rpc-outage",
        f"validator1's chain RPC (a proxy in front of anvil) closed for {FREEZE_S:.0f}s during verification",
        "validator1",
        ("score-commit",),
        ("validator1", r"connection error|RPC unreachable"),
    ),
    _slow_peer(
        "same-key-twice",
        "miner1's key started a second time with its own data dir: it must stop with one clear error",
        "twin",
        ("commit",),
        None,  # the twin stops at its first check, before it commits: the original sees no conflict
    ),
)
"""Issue 27's scenarios (see :mod:`tessera.devnet.faults.slowpeers`)."""

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "kill-chain",
            "kill -9 anvil at a random phase, restart it from its last periodic dump (lost blocks = a reorg)",
            "anvil",
            POINTS,
            (("*", r"connection error|RPC unreachable"),),
        ),
        Scenario(
            "kill-miner",
            "kill -9 miner1 at a random phase, restart it after a delay",
            "miner1",
            POINTS,
            (("miner1", r"(?s)serving at.*serving at"),),
        ),
        Scenario(
            "kill-validator",
            "kill -9 validator1 at a random phase, restart it after a delay",
            "validator1",
            POINTS,
            (("validator1", r"(?s)serving at.*serving at"),),
        ),
        Scenario(
            "cut-validator",
            "close validator1's chain RPC and HTTP ports (a blocked port) for about a round",
            "validator1",
            POINTS[:4],
            (("validator1", r"connection error|RPC unreachable"),),
        ),
        Scenario(
            "stall-miner",
            "miner1's public port accepts, then trickles a byte a second and never answers, for a round",
            "miner1",
            POINTS[:2],
            (("validator*", r"stalling peer|stalled a fetch"),),
        ),
        Scenario(
            "corrupt-miner",
            "miner1's public port flips a byte of what it serves, for a round",
            "miner1",
            POINTS[:2],
            (("validator*", r"served a bad blob|hash to"),),
        ),
        Scenario(
            "poison-dht",
            "a stranger's plain hivemind client stores junk, forged and replayed records over every round key "
            "(1-year expiry) and announces signed records with a bad and a dead URL",
            "dht",
            ("commit",),
            (("validator*", r"http://127\.0\.0\.1:9\b"),),  # the stranger's dead URL tried and skipped
        ),
        *SLOW_PEER_SCENARIOS,
        Scenario(
            "mixed-hardware",
            "nodes on different CPU instruction sets (ATen default/avx2/avx512, MKL/oneDNN caps); no fault",
            "none",
            ("commit",),
            (),
            inject=False,
        ),
    )
}


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU's feature flags (empty if ``/proc/cpuinfo`` cannot be read)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def mixed_hardware_env(validators: int, miners: int, flags: set[str]) -> dict[str, dict[str, str]]:
    """Each node's instruction-set environment for ``mixed-hardware``.

    validator0 runs the oldest x86-64 setting (ATen ``default``: no SIMD kernels; MKL capped at SSE4.2,
    oneDNN at SSE4.1), validator1 the best this CPU has (no caps), further validators alternate; miners
    cycle through ATen ``default``, ``avx2`` with MKL and oneDNN capped at AVX2, and ``avx512`` with MKL
    at AVX-512 where ``flags`` has :data:`AVX512_FLAGS` (else ATen ``default`` with MKL and oneDNN capped
    at AVX)."""
    avx512 = all(f in flags for f in AVX512_FLAGS)
    best = "avx512" if avx512 else "avx2" if "avx2" in flags else "default"
    oldest = {
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
    }
    vsettings = [oldest, {"ATEN_CPU_CAPABILITY": best}]
    msettings: list[dict[str, str]] = [{"ATEN_CPU_CAPABILITY": "default"}]
    if "avx2" in flags:
        msettings.append(
            {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
        )
    if avx512:
        msettings.append(
            {
                "ATEN_CPU_CAPABILITY": "avx512",
                "MKL_ENABLE_INSTRUCTIONS": "AVX512",
                "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
            }
        )
    else:
        msettings.append(
            {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "AVX", "ONEDNN_MAX_CPU_ISA": "AVX"}
        )
    env = {f"validator{i}": dict(vsettings[i % len(vsettings)]) for i in range(validators)}
    env.update({f"miner{i}": dict(msettings[i % len(msettings)]) for i in range(miners)})
    return env


def setting_text(env: dict[str, str]) -> str:
    """``ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ...`` (or ``machine default``)."""
    return " ".join(f"{k}={v}" for k, v in sorted(env.items())) or "machine default"


@dataclass
class FaultRun:
    """What happened in one scenario (the report's raw material)."""

    scenario: str
    seed: int
    point: str
    offset_s: float
    delay_s: float
    injected: dict[str, Any] = field(default_factory=dict)
    restored: dict[str, Any] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
