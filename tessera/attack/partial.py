"""Partial fakers over many rounds: realized profit beside the model's, and the expected profit at
the default stake as a product of measured parts.

**The run.** One network on the in-memory ledger: 2 honest validators, 2 honest miners and one lazy miner
per fraction ``f`` in :data:`FRACTIONS` (each trains a fraction ``f`` of its ``H = 100`` inner steps on
other data). With one transcript segment per step, faking ``f`` of the steps spoils exactly ``f`` of the
segments. The ledger audits every (miner, round) (q = 1, the attack suite's rate: at the default stake's
tiny q a 30-round realization would be a lottery), by a committee of one validator (c = 1, the default run
file's) that replays one seed-chosen step, with pay vesting over K = 2 rounds; stake 100, slash 10%.

**Realized against the model, at the run's stake.** Per lazy miner and round: its pay kept (credited, not
forfeited) minus the honest miners' mean pay ``R``, plus the compute it saved ``f C`` (``C = R``, the
model's default), minus the stake its confirmed slashes took; the model's ``E[profit] = f C - q eta f L``
(``protocol.rounds.economics``, all validators honest here: eta = 1).

**Measured expected profit at the default stake** = ``f C - q_draw * eta * d * L``: ``q_draw`` is measured,
the share of (miner, round) pairs the real draw (``protocol.rounds.audits.audit_draw``) audits over
:data:`DRAWS` random seeds at the deployed default rate; ``d``, the chance that one audit catches the fake,
is measured as (share of as many seeds whose replayed step, chosen by the validators' own
``validator.sampling.segments_to_check``, lands on a faked step) x (share of the run's audits that landed
on a faked step and were proven); ``C``, ``R``, ``L = sS + max(K,1) R`` and ``eta = 1 - (1/3)^c`` are the
model's (the default stake, emission and slash; a third of the validators assumed dishonest).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from miner.node import MinerNode
from protocol.rounds import economics as ev
from protocol.rounds.audits import audit_draw
from protocol.rounds.auditspec import AuditSpec
from protocol.rounds.deployment import NetworkParams
from tessera.attack.casting import MINER_STAKE, VALIDATOR_STAKE
from tessera.attack.harness import Network, NetworkRun, Participant, tiny_spec
from tessera.attack.miners import LazyMiner
from validator.sampling import segments_to_check

FRACTIONS = (0.01, 0.1, 0.5, 1.0)
"""Fractions of faked steps."""
STEPS = 100
"""Inner steps per round, one transcript segment each."""
DRAWS = 200_000
"""Random seeds for the measured audit rate and landing rate."""
AUDITS = {"audit_rate_bps": 10_000, "committee_size": 1, "vesting_rounds": 2}
"""The run's chain: every pair audited, committees of one, pay vesting over two rounds."""
SLASH = 0.10
"""The suite's slash fraction (``tessera.attack.chainnet``)."""
WEI = 10**18


def _lazy(f: float) -> Participant:
    def make(cfg: Any, spec: Any, coord: Any, disc: Any) -> Any:
        return MinerNode(cfg, spec, coord, disc, behaviour=LazyMiner(f, STEPS))

    return Participant("miner", f"lazy f={f:g}", MINER_STAKE, make)


def participants(fractions: tuple[float, ...] = FRACTIONS) -> list[Participant]:
    """2 honest validators, 2 honest miners, one lazy miner per fraction."""
    return [
        *(Participant("validator", "honest", VALIDATOR_STAKE) for _ in range(2)),
        *(Participant("miner", "honest", MINER_STAKE) for _ in range(2)),
        *(_lazy(f) for f in fractions),
    ]


def run_partial(
    rounds: int = 30,
    fractions: tuple[float, ...] = FRACTIONS,
    timeout: float = 7200.0,
    progress: Path | None = None,
) -> dict[str, Any]:
    """Run the network for ``rounds`` rounds and return the realized and model figures (JSON-ready);
    ``progress``: where to write :func:`realized` for the rounds so far after every settled round (JSON; a
    run takes hours of CPU on a shared box, so its figures can be read before it ends)."""
    net = Network(
        participants(fractions), spec=tiny_spec(steps=STEPS, interval=1), chain="memory", audit_params=AUDITS
    )
    t0 = time.perf_counter()
    saved = [1]

    def keep(n: Network) -> None:
        if progress is not None and n.ledger.round > saved[0]:
            try:
                run = snapshot(n, n.ledger.round - 1, time.perf_counter() - t0)
            except RuntimeError:  # a node thread changed a record meanwhile: the next step saves it
                return
            saved[0] = n.ledger.round
            tmp = progress.with_suffix(".tmp")
            tmp.write_text(json.dumps(realized(run, fractions) | {"seconds": round(run.seconds, 1)}))
            tmp.replace(progress)

    net.on_step = keep
    net.start()
    try:
        run = net.run(rounds, timeout=timeout)
    finally:
        net.stop()
    return realized(run, fractions) | {"seconds": round(time.perf_counter() - t0, 1), "stalled": run.stalled}


def snapshot(net: Network, rounds: int, seconds: float) -> NetworkRun:
    """What :func:`realized` reads of a running network, after ``rounds`` settled rounds."""
    verdicts: dict[str, list[dict[str, Any]]] = {}
    for p in net.participants:
        if p.role != "validator":
            continue
        for cr, rec in p.node.state.rounds().items():
            for miner, v in rec.verdicts.items():
                verdicts.setdefault(miner.lower(), []).append(
                    {"round": int(cr), "validator": p.address, "stage": v.stage, "provable": v.provable}
                )
    people = [Participant(p.role, p.label, p.stake, address=p.address) for p in net.participants]
    return NetworkRun(rounds, people, net.ledger, [], verdicts, seconds, list(net.errors))


def _landed(seed: bytes, miner: str, bad: int) -> bool:
    """Whether a committee of one's replayed step (slot 0 of the round's order) is one the miner faked
    (``LazyMiner`` fakes its first ``bad`` steps)."""
    seg = segments_to_check(seed, miner, STEPS, 1, slot=0)
    return bool(seg) and seg[0] < bad


def realized(run: NetworkRun, fractions: tuple[float, ...] = FRACTIONS) -> dict[str, Any]:
    """Per lazy miner: audits, catches (and whether each audit landed on a faked step), pay kept, slashes,
    the realized profit per round against the honest miners' and the model's at the run's stake."""
    led = run.ledger
    rounds = {r: led.rounds.get(r) for r in range(1, run.rounds + 1)}
    settled = {r: rd.settlement for r, rd in rounds.items() if rd is not None and rd.settlement is not None}
    n = len(settled)
    honest = [p for p in run.participants if p.role == "miner" and p.label == "honest"]
    reward = sum(s.miner_rewards.get(p.address, 0) for s in settled.values() for p in honest) / WEI
    reward /= max(1, len(honest) * n)
    econ = ev.RunEconomics(
        stake=MINER_STAKE, slash_fraction=SLASH, reward=reward, compute_cost=reward,
        vesting_rounds=AUDITS["vesting_rounds"], committee_size=AUDITS["committee_size"], validators=2,
        honest_fraction=1.0,
    )  # fmt: skip
    model = {row.name: row for row in ev.strategy_rows(econ, 1.0, fractions)}
    rows = []
    for p, f in zip([p for p in run.participants if p.label.startswith("lazy")], fractions, strict=True):
        bad = math.ceil(f * STEPS - 1e-9)
        caught = {v["round"] for v in run.verdicts.get(p.address.lower(), []) if v["provable"]}
        audited = [
            r for r in settled if audit_draw(led.seeds[r], p.address, led.draw_size[r], 10_000, 1).audited
        ]
        landed = [r for r in audited if _landed(led.seeds[r], p.address, bad)]
        credited = sum(s.miner_rewards.get(p.address, 0) for s in settled.values()) / WEI
        kept = (
            credited
            - led.forfeited.get(p.address, 0) / WEI
            - sum(led.held.get(e, 0) for (r, m), e in led.frozen.items() if m == p.address) / WEI
        )
        slashes = led.slashed.get(p.address, 0)
        stake_lost = MINER_STAKE * (1 - (1 - SLASH) ** slashes)
        m = model[f"lazy f={f:g}"]
        rows.append({
            "fraction": f, "faked_steps": bad, "rounds": n, "audits": len(audited), "landed": len(landed),
            "caught": len(caught & set(audited)), "caught_landed": len(caught & set(landed)),
            "caught_not_landed": len(caught - set(landed)), "pay_credited": round(credited, 4),
            "pay_kept": round(kept, 4), "slashes": slashes, "stake_lost": round(stake_lost, 4),
            "realized_profit_per_round": round((kept - reward * n - stake_lost) / max(1, n) + f * reward, 4),
            "model_gain": round(m.gain, 4), "model_loss": round(m.loss, 4),
            "model_profit_per_round": round(m.expected_profit, 4),
        })  # fmt: skip
    return {"chain": "memory", "rounds": run.rounds, "steps": STEPS, "audits": AUDITS, "stake": MINER_STAKE,
            "slash": SLASH, "honest_reward_per_round": round(reward, 4), "economics": asdict(econ),
            "fakers": rows}  # fmt: skip


def default_economics(miners: int = 4, validators: int = 2) -> ev.RunEconomics:
    """The default run as ``tessera attack --model`` models it: ``NetworkParams``' stake, emission, slash
    and vesting, the run file's committee (``AuditSpec``), compute cost = reward."""
    p, a = NetworkParams(), AuditSpec()
    reward = p.emission_per_round * (10_000 - p.validator_share_bps) / 10_000 / miners / WEI
    return ev.RunEconomics(
        stake=p.min_miner_stake / WEI, slash_fraction=p.slash_bps / 10_000, reward=reward, compute_cost=reward,
        vesting_rounds=p.vesting_rounds, committee_size=a.committee_size, validators=validators,
    )  # fmt: skip


def _random_pairs(count: int) -> list[tuple[bytes, str]]:
    return [(os.urandom(32), "0x" + os.urandom(20).hex()) for _ in range(count)]


def measured_default(doc: dict[str, Any], draws: int = DRAWS, landing_draws: int = DRAWS) -> dict[str, Any]:
    """The expected profit of each lazy fraction at the default stake from measured parts (module doc):
    ``q_draw`` from ``draws`` random (seed, miner) pairs through the real draw at the deployed rate, the
    landing rate from ``landing_draws`` pairs through the validators' segment choice, the catch rate of a
    landed audit from the run ``doc`` (:func:`realized`)."""
    e = default_economics()
    bps = ev.audit_rate_bps(e)
    n_val = e.validators
    q_draw = (
        sum(audit_draw(s, m, n_val, bps, e.committee_size).audited for s, m in _random_pairs(draws)) / draws
    )
    landed = sum(r["landed"] for r in doc["fakers"])
    caught_landed = sum(r["caught_landed"] for r in doc["fakers"])
    catch = caught_landed / landed if landed else 0.0
    # the replayed step of each random (seed, miner), drawn once for every fraction
    first = [segments_to_check(s, m, STEPS, 1, slot=0)[0] for s, m in _random_pairs(landing_draws)]
    eta, loss, cost = e.committee_catch(), e.loss_when_caught(), e.compute_cost
    model = {
        row.name: row for row in ev.strategy_rows(e, bps / 10_000, [r["fraction"] for r in doc["fakers"]])
    }
    rows = []
    for r in doc["fakers"]:
        f, bad = r["fraction"], r["faked_steps"]
        land = sum(step < bad for step in first) / landing_draws
        gain = f * cost
        exp_loss = q_draw * eta * land * catch * loss
        m = model[f"lazy f={f:g}"]
        rows.append({
            "fraction": f, "landing_rate": land, "detection_per_audit": land * catch, "gain": gain,
            "expected_loss": exp_loss, "expected_profit": gain - exp_loss,
            "margin": exp_loss / gain if gain else math.inf,
            "model_profit": m.expected_profit, "model_margin": m.margin,
        })  # fmt: skip
    return {
        "economics": asdict(e), "q_deployed": bps / 10_000, "q_measured": q_draw, "draws": draws,
        "landing_draws": landing_draws, "catch_given_landed": catch, "landed_audits": landed, "eta_model": eta,
        "rows": rows,
    }  # fmt: skip


def markdown(doc: dict[str, Any]) -> str:
    """The partial fakers' figures (:func:`run_partial`, with ``default`` from :func:`measured_default`) as
    Markdown: realized against the model at the run's stake, then the default stake from measured parts."""
    lines = [
        f"chain: **{doc['chain']}**, {doc['rounds']} rounds, H = {doc['steps']}, q = 1, c = 1, K = 2, stake "
        f"{doc['stake']}, slash {doc['slash']:.0%}; honest pay R = {doc['honest_reward_per_round']:.2f}/round",
        "",
        "| f | audits | landed on a fake | proven (landed / not) | pay kept | slashes | realized profit/round "
        "| model E[profit]/round |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in doc["fakers"]:
        lines.append(
            f"| {r['fraction']:g} | {r['audits']} | {r['landed']} | {r['caught_landed']} / {r['caught_not_landed']} "
            f"| {r['pay_kept']:.2f} | {r['slashes']} | {r['realized_profit_per_round']:.2f} "
            f"| {r['model_profit_per_round']:.2f} |"
        )
    d = doc.get("default")
    if d:
        e = d["economics"]
        lines += [
            "",
            f"default stake {e['stake']:g}, R = C = {e['reward']:g}, q deployed {d['q_deployed']:.4f}, q measured "
            f"{d['q_measured']:.5f} ({d['draws']} draws), P(proven | landed) measured {d['catch_given_landed']:.3f} "
            f"({d['landed_audits']} landed audits), eta {d['eta_model']:.3f} (model)",
            "",
            "| f | landing rate (measured) | detection per audit | gain | expected loss | measured E[profit] "
            "| margin | model E[profit] | model margin |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in d["rows"]:
            lines.append(
                f"| {r['fraction']:g} | {r['landing_rate']:.4f} | {r['detection_per_audit']:.4f} | {r['gain']:.3f} "
                f"| {r['expected_loss']:.3f} | {r['expected_profit']:.3f} | {r['margin']:.2f} "
                f"| {r['model_profit']:.3f} | {r['model_margin']:.2f} |"
            )
    return "\n".join(lines)
