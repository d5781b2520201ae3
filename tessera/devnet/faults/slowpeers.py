"""Issue 27's scenarios of ``tessera faults``: peers that are slow, frozen or unreachable, and a key run
twice, on a devnet with wall-clock phases (2-s blocks, no fast-forward), 3 validators and 4 honest miners.

- ``drip-sybils``: two more miners whose keys are ground to addresses below every honest one (validators
  that verify in address order meet them first) serve their transcript states :data:`DRIP_S` seconds
  late each (a :class:`~tessera.devnet.proxy.FaultProxy` in ``drip`` mode in front of their public port);
- ``freeze-after-announce``: miner1's process group is SIGSTOPped the moment it serves its update in
  REVEAL and SIGCONTed :data:`FREEZE_S` seconds later;
- ``validator-rpc-outage``: validator1's chain RPC is a proxy the harness closes for :data:`FREEZE_S`
  seconds from the start of SCORE_COMMIT (its verification);
- ``same-key-twice``: a second ``tessera miner run`` with miner1's key and its own data directory.

Checks beside the common ones (:func:`tessera.devnet.faults.checks.check_run`): the cheats earned nothing
(:func:`cheats_earned_nothing`), the cut validator's verdicts are not final for its own outage
(:func:`own_errors_not_final`), the twin stopped with one clear error (:func:`twin_stopped`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eth_account import Account

from protocol.rounds.anvil import free_port
from tessera.devnet.faults.checks import Check, Payouts, make_check
from tessera.devnet.faults.scenarios import FREEZE_S, Scenario
from tessera.devnet.network import Devnet
from tessera.devnet.procs import signal_group
from tessera.devnet.proxy import ProxyMode
from validator.stages import Stage

if TYPE_CHECKING:
    from tessera.devnet.faults.harness import Harness

LOW_PREFIX = "0x00"
"""What a sybil's address starts with: below 7 random honest addresses but with odds of 1 in 37 (256
tries to grind, seconds; ``0x000`` took 2 minutes on this loaded machine)."""


def sybil_names(sc: Scenario, honest: int) -> list[str]:
    """The devnet names of ``sc``'s sybils: the miners after the ``honest`` ones."""
    return [f"miner{honest + i}" for i in range(sc.sybils)]


def grind_key(seed: int, label: str, prefix: str = LOW_PREFIX) -> str:
    """A private key, drawn deterministically from ``seed`` and ``label``, whose address starts with
    ``prefix`` (about 256 tries for ``0x00``)."""
    for n in range(1 << 24):
        key = "0x" + hashlib.sha256(f"tessera.faults.sybil\0{seed}\0{label}\0{n}".encode()).hexdigest()
        if str(Account.from_key(key).address).lower().startswith(prefix):
            return key
    raise AssertionError("unreachable: no key in 2^24 tries")  # pragma: no cover


def seed_sybil_keys(workdir: Path, names: list[str], seed: int) -> None:
    """Start ``workdir`` (emptied) with a keys file holding the sybils' ground keys: the devnet keeps
    the keys it finds and draws the others (``tessera.devnet.network.Devnet`` with ``fresh=False``)."""
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    path = workdir / "devnet-keys.json"
    path.write_text(json.dumps({n: grind_key(seed, n) for n in names}, indent=1))
    os.chmod(path, 0o600)


def miner_served(net: Devnet, name: str, round: int) -> bool:
    """Whether miner ``name`` serves its update of ``round`` (its ``/rounds`` says ``served``)."""
    rec = (net.get(name, "/rounds") or {}).get(str(round)) or {}
    return bool(rec.get("status") == "served")


def inject_drip(h: Harness, round: int, point: str, block: int) -> None:
    """Every sybil's public port holds back each transcript state from now on."""
    for name, p in h.proxies.items():
        p.set_mode(ProxyMode.DRIP)
        h.note(f"{name}'s public port set to drip at round {round} {point}, block {block}")
    h.restored = True  # lasts the whole scenario: nothing to lift


def inject_freeze(h: Harness, round: int, point: str, block: int) -> None:
    """SIGSTOP the target's process group; SIGCONT it :data:`FREEZE_S` seconds later."""
    n = h.net.nodes[h.sc.target]
    assert n.proc is not None
    signal_group(n.proc.pid, signal.SIGSTOP)
    h.note(f"SIGSTOP {h.sc.target} (pid {n.proc.pid}) at round {round} {point}, block {block}")

    def thaw() -> None:
        assert n.proc is not None
        signal_group(n.proc.pid, signal.SIGCONT)
        h.run.restored = {"at": time.time(), "down_s": round_s(time.time() - h.run.injected["at"])}
        h.note(f"SIGCONT {h.sc.target} after {h.run.restored['down_s']}s")
        h.restored = True

    h.pending.append((time.time() + FREEZE_S, thaw, f"SIGCONT {h.sc.target}"))


def inject_rpc_outage(h: Harness, round: int, point: str, block: int) -> None:
    """Close the target validator's chain RPC port; open it again :data:`FREEZE_S` seconds later."""
    proxy = h.proxies["rpc"]
    proxy.set_mode(ProxyMode.BLOCK)
    h.note(f"{h.sc.target}'s chain RPC closed at round {round} {point}, block {block}")

    def reopen() -> None:
        proxy.set_mode(ProxyMode.PASS)
        h.run.restored = {"at": time.time(), "down_s": round_s(time.time() - h.run.injected["at"])}
        h.run.restored["block"] = h.net.chain.block_number()
        h.note(f"{h.sc.target}'s chain RPC open again after {h.run.restored['down_s']}s")
        h.restored = True

    h.pending.append((time.time() + FREEZE_S, reopen, f"reopen {h.sc.target}'s RPC"))


def inject_twin(h: Harness, round: int, point: str, block: int) -> None:
    """Start a second ``tessera miner run`` with miner1's key, its own data directory, port and log."""
    src = h.net.nodes["miner1"]
    wd = h.cfg.workdir
    args = list(src.args)
    args[args.index("--data-dir") + 1] = str(wd / "miner1-twin")
    args[args.index("--port") + 1] = str(free_port())
    h.twin_log = wd / "logs" / "miner1-twin.log"
    env = {**os.environ, **src.env, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": str(h.cfg.threads)}
    with open(h.twin_log, "ab") as logf:
        h.twin = subprocess.Popen(
            [sys.executable, "-m", "tessera", "-v", "miner", "run", *args],
            env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    h.note(f"second miner1 started (pid {h.twin.pid}) at round {round} {point}, block {block}")
    h.restored = True


def round_s(x: float) -> float:
    """Seconds to 0.1 s."""
    return round(x, 1)


def stop_twin(h: Harness) -> None:
    """Stop the twin if it still runs (it should have stopped itself)."""
    twin = getattr(h, "twin", None)
    if twin is not None and twin.poll() is None:
        signal_group(twin.pid, signal.SIGKILL)
        twin.wait(timeout=30)


def extra_checks(h: Harness, paid: Payouts) -> list[Check]:
    """The checks of issue 27's scenarios beside the common ones."""
    name = h.sc.name
    if name == "drip-sybils":
        return [cheats_earned_nothing(h.net, paid, h.cheats, h.fault_round, h.last_round)]
    if name == "validator-rpc-outage":
        return [own_errors_not_final(h.net, h.sc.target, h.fault_round)]
    if name == "same-key-twice":
        return [twin_stopped(h)]
    return []


def cheats_earned_nothing(net: Devnet, paid: Payouts, cheats: list[str], first: int, last: int) -> Check:
    """Each cheat was paid nothing from the fault round on."""
    got = {c: sum(paid.miner(r, net.nodes[c].address) for r in range(first, last + 1)) for c in cheats}
    return make_check(
        "cheats_earned_nothing",
        not any(got.values()),
        ", ".join(f"{c} paid {v / 1e18:.2f} in rounds {first}..{last}" for c, v in got.items()),
    )


def own_errors_not_final(net: Devnet, target: str, round: int) -> Check:
    """The cut validator scored no miner 0 for its own outage: none of its verdicts of ``round`` ended
    at the ``error`` stage or with an RPC error as the reason."""
    verdicts = net.get(target, f"/verdicts/{round}") or {}
    bad = [
        f"{_name(net, m)}: {v.get('stage')} ({str(v.get('reason', ''))[:80]})"
        for m, v in verdicts.items()
        if v.get("stage") == Stage.ERROR or re.search(r"RPC|connection", str(v.get("reason", "")))
    ]
    return make_check(
        "own_errors_not_final",
        bool(verdicts) and not bad,
        "; ".join(bad) or f"{target}: {len(verdicts)} verdicts in round {round}, none for its own outage",
    )


def twin_stopped(h: Harness) -> Check:
    """The second instance exited (status 2) with one line naming the key in use, and did not retry."""
    twin = getattr(h, "twin", None)
    text = h.twin_log.read_text(errors="replace") if getattr(h, "twin_log", None) else ""
    lines = [ln for ln in text.splitlines() if re.search(r"KeyInUse|key in use", ln, re.I)]
    code = None if twin is None else twin.poll()
    ok = code == 2 and 1 <= len(lines) <= 2  # the error, and the CLI's one-line report of it
    return make_check(
        "twin_stopped",
        ok,
        f"exit status {code}; {len(lines)} key-in-use lines: "
        + " | ".join(ln.strip()[:140] for ln in lines[:3]),
    )


def rounds_lost(net: Devnet, paid: Payouts, first: int, last: int) -> list[int]:
    """Rounds from ``first`` to ``last`` in which no miner was paid (no scores committed, or none
    finalized)."""
    return [r for r in range(first, last + 1) if not any(x[0] == r and x[3] for x in paid.miner_paid)]


def _name(net: Devnet, address: str) -> str:
    return next((n for n, p in net.nodes.items() if p.address.lower() == address.lower()), address[:10])


def verification_times(net: Devnet, round: int) -> dict[str, Any]:
    """Each validator's verdicts of ``round`` as ``/verdicts`` shows them: stage, wall seconds to the
    verdict and the miner's budget (``metrics.verify_wall_seconds`` and ``metrics.budget_s``, where the
    validator schedules against the deadline), else the sum of its stage timings."""
    out: dict[str, Any] = {}
    for v in (n for n in net.nodes if n.startswith("validator")):
        for m, vd in (net.get(v, f"/verdicts/{round}") or {}).items():
            metrics, timings = vd.get("metrics") or {}, vd.get("timings") or {}
            out[f"{v}/{_name(net, m)}"] = {
                "stage": vd.get("stage"),
                "seconds": metrics.get("verify_wall_seconds", float(f"{sum(timings.values()):.3f}")),
                "budget_s": metrics.get("budget_s"),
            }
    return out


def slowest_honest(times: dict[int, dict[str, Any]], exclude: set[str]) -> dict[str, Any]:
    """The longest verification of an honest miner (not in ``exclude``) over ``times`` (round ->
    :func:`verification_times`), with its budget: ``{"round", "who", "stage", "seconds", "budget_s"}``."""
    best: dict[str, Any] = {}
    for r, per in times.items():
        for who, t in per.items():
            if who.split("/")[1] in exclude or t.get("seconds") is None:
                continue
            if not best or t["seconds"] > best["seconds"]:
                best = {"round": r, "who": who, **t}
    return best
