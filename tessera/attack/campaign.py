"""Every way around an audit over many rounds at the default stake: realized profit beside the model's.

**The run.** One network on the in-memory ledger (the contract's rules mirrored by
:class:`protocol.rounds.memcoordinator.MemoryLedger`: the audit draw, committees, witnesses, unanswered
reports, slashing and vesting) with the real nodes and the real verification pipeline: 2 honest validators,
:data:`HONEST` honest miners and ``identities`` miners per way around an audit (:data:`STRATEGIES`). The
economics are the deployment's defaults (``NetworkParams``: stake, slash, vesting K, emission and the
validators' share; ``AuditSpec``: committees of one). The audit rate is the one ``contracts deploy`` sets for
this planned network (``protocol.rounds.economics.audit_rate_bps``) unless ``q_bps`` raises it.

**Why a raised rate too.** At the default stake the deployed q is a fraction of a percent: 200 rounds draw
each identity for about ``200 q`` audits, so one identity's realized profit over such a run is a lottery
(positive whenever no audit falls, with probability ``(1 - q)^200``). Expected-value security is about the
mean. The campaign therefore measures, per strategy, what decides the mean: its pay in rounds it was not
audited and in rounds it was, against the honest miners', the share ``d`` of its audits that ended in a
confirmed slash, and the loss ``L`` each confirmation took (stake burned plus pay forfeited). A run at a
raised rate (the same stake, slash and K) measures these over many audits; :func:`expected_at` then gives
the expected profit per round at the deployed rate from them: ``saved C + (1 - q) du + q (da - d L)``.

**Realized.** Per strategy, over its identities and cheating rounds: pay kept (credited, minus forfeited
and still held) minus the honest miners' mean pay, minus the stake its slashes burned, plus the compute
it did not spend (``saved x C``, ``C = R`` as the model assumes), per identity-round.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from miner.behaviour import Behaviour
from protocol.rounds import economics as ev
from protocol.rounds.audits import audit_draw
from protocol.rounds.auditspec import AuditSpec
from protocol.rounds.deployment import NetworkParams
from protocol.runspec import RunSpec
from tessera.attack.auditchecks import model_row
from tessera.attack.auditscenarios import PARTIAL_STEPS, RIDER_FROM, when_audited
from tessera.attack.dodgers import (
    DripWhenAudited,
    HangWhenAudited,
    LastDeltaHangWhenAudited,
    LastDeltaRider,
    WithholdWhenAudited,
)
from tessera.attack.harness import Network, NetworkRun, Participant, tiny_spec
from tessera.attack.miners import LazyMiner, Withholder

WEI = 10**18
HONEST = 2
"""Honest miners beside the strategies (their mean pay is the reference)."""
VALIDATORS = 2
"""Honest validators: a committee of one and one witness, both needed for 2/3 of the electorate."""


@dataclass(frozen=True)
class Strategy:
    """One way around an audit: its label (a model row's prefix), how to build its behaviour, and the
    first round it cheats (the last-delta riders need theta_{r-1})."""

    label: str
    make: Callable[[RunSpec, Callable[[int, str], bool]], Behaviour]
    cheat_from: int = 1


STRATEGIES: tuple[Strategy, ...] = (
    Strategy("hang-when-audited", lambda spec, audited: HangWhenAudited(audited)),
    Strategy("drip-when-audited", lambda spec, audited: DripWhenAudited(audited)),
    Strategy("withhold-when-audited", lambda spec, audited: WithholdWhenAudited(audited)),
    Strategy("withholder", lambda spec, audited: Withholder()),
    Strategy("free-rider-last-delta", lambda spec, audited: LastDeltaRider(spec), RIDER_FROM),
    Strategy(
        "free-rider-last-delta-hang",
        lambda spec, audited: LastDeltaHangWhenAudited(spec, audited),
        RIDER_FROM,
    ),
    Strategy("lazy f=0.1", lambda spec, audited: LazyMiner(0.1, PARTIAL_STEPS)),
    Strategy("lazy f=0.5", lambda spec, audited: LazyMiner(0.5, PARTIAL_STEPS)),
)
"""Every way around an audit the issue names: the update served but not the states (withhold), hang and
drip when audited, the update withheld, the last-delta rider with a consistent transcript, the same plus
hang, and partial fakers at f = 0.1 and 0.5."""


def campaign_spec() -> RunSpec:
    """The suite's tiny run with one transcript segment per step (:data:`PARTIAL_STEPS` steps), so that a
    partial faker's f is exactly the share of faked segments."""
    spec = tiny_spec()
    return replace(spec, inner=replace(spec.inner, steps=PARTIAL_STEPS, transcript_interval=1))


def default_economics(miners: int, validators: int = VALIDATORS) -> ev.RunEconomics:
    """The deployment's defaults for a planned network of ``miners``: ``NetworkParams``' stake, slash,
    vesting, emission and share, ``AuditSpec``'s committee, compute cost = reward (the model's default)."""
    p, a = NetworkParams(), AuditSpec()
    reward = p.emission_per_round * (10_000 - p.validator_share_bps) / 10_000 / miners / WEI
    return ev.RunEconomics(
        stake=p.min_miner_stake / WEI, slash_fraction=p.slash_bps / 10_000, reward=reward, compute_cost=reward,
        vesting_rounds=p.vesting_rounds, committee_size=a.committee_size, validators=validators,
    )  # fmt: skip


def participants(identities: int = 1, strategies: tuple[Strategy, ...] = STRATEGIES) -> list[Participant]:
    """The validators, the honest miners and ``identities`` miners per strategy (labels ``NAME#i``), all at
    the deployment's minimum stakes (in tokens: the in-memory ledger weighs them, amounts are kept here)."""
    p = NetworkParams()
    people = [Participant("validator", "honest", p.min_validator_stake // WEI) for _ in range(VALIDATORS)]
    people += [Participant("miner", "honest", p.min_miner_stake // WEI) for _ in range(HONEST)]
    for s in strategies:
        for i in range(identities):
            people.append(
                Participant("miner", f"{s.label}#{i}", p.min_miner_stake // WEI, when_audited(s.make))
            )
    return people


def chain_params(miners: int, q_bps: int | None = None) -> dict[str, int]:
    """The ledger's q, c and K: the deployed rate for ``miners`` planned miners (or ``q_bps``), the run
    file's committee, the deployment's vesting."""
    e = default_economics(miners)
    return {
        "audit_rate_bps": ev.audit_rate_bps(e) if q_bps is None else int(q_bps),
        "committee_size": e.committee_size,
        "vesting_rounds": e.vesting_rounds,
    }


def run_campaign(
    rounds: int = 200,
    identities: int = 1,
    q_bps: int | None = None,
    strategies: tuple[Strategy, ...] = STRATEGIES,
    timeout: float = 4 * 3600.0,
    progress: Path | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the campaign's network for ``rounds`` rounds and return :func:`summarize`'s figures; ``progress``
    is rewritten with the figures so far after every settled round, ``log`` gets a line per round."""
    people = participants(identities, strategies)
    miners = sum(p.role == "miner" for p in people)
    params = chain_params(miners, q_bps)
    p = NetworkParams()
    net = Network(
        people, spec=campaign_spec(), chain="memory", audit_params=params,
        emission=p.emission_per_round, validator_share_bps=p.validator_share_bps,
    )  # fmt: skip
    t0 = time.perf_counter()
    seen = [1]

    def keep(n: Network) -> None:
        done = n.ledger.round - 1
        if done < seen[0]:
            return
        try:
            doc = summarize(snapshot(n, done, time.perf_counter() - t0), params, strategies)
        except RuntimeError:  # a node thread changed a record meanwhile: the next step reports it
            return
        seen[0] = done + 1
        if log is not None:
            best = max((s["realized_profit_per_round"] for s in doc["strategies"]), default=0.0)
            log(
                f"round {done}/{rounds}: {doc['audits']} audits, {doc['confirmed']} confirmed, best strategy "
                f"{best:+.2f}/identity-round against honest, {time.perf_counter() - t0:.0f} s"
            )
        if progress is not None:
            tmp = progress.with_suffix(".tmp")
            tmp.write_text(json.dumps(doc, indent=1))
            tmp.replace(progress)

    net.on_step = keep
    net.start()
    try:
        run = net.run(rounds, timeout=timeout)
    finally:
        net.stop()
    doc = summarize(run, params, strategies)
    doc["seconds"] = round(time.perf_counter() - t0, 1)
    doc["stalled"] = run.stalled
    return doc


def snapshot(net: Network, rounds: int, seconds: float) -> NetworkRun:
    """What :func:`summarize` reads of a running network after ``rounds`` settled rounds."""
    people = [Participant(p.role, p.label, p.stake, address=p.address) for p in net.participants]
    return NetworkRun(rounds, people, net.ledger, [], {}, seconds, list(net.errors))


def _audited(led: Any, round: int, miner: str, params: dict[str, int]) -> bool:
    seed, n = led.seeds.get(round), led.draw_size.get(round)
    if seed is None or n is None:
        return False
    return audit_draw(seed, miner, n, params["audit_rate_bps"], params["committee_size"]).audited


@dataclass
class Tally:
    """One strategy's identities added up over their cheating rounds."""

    identity_rounds: int = 0
    audits: int = 0
    confirmed: int = 0
    kept: float = 0.0
    """Pay kept minus the honest mean's and the stake lost, in tokens."""
    stake_lost: float = 0.0
    forfeited: float = 0.0
    pay_audited: list[float] = field(default_factory=list)
    """Per audited identity-round: its pay minus the honest mean's."""
    pay_unaudited: list[float] = field(default_factory=list)


def tally(
    run: NetworkRun,
    s: Strategy,
    settled: dict[int, Any],
    honest_pay: dict[int, float],
    params: dict[str, int],
) -> Tally:
    """Add up ``s``'s identities in ``run`` against the honest mean pay ``honest_pay`` of each settled round:
    pay credited, forfeited and still held, the stake the ledger took, the rounds audited."""
    led, t = run.ledger, Tally()
    e = default_economics(sum(p.role == "miner" for p in run.participants))
    for p in (p for p in run.participants if p.label.split("#")[0] == s.label):
        rounds = [r for r in settled if r >= s.cheat_from]
        t.identity_rounds += len(rounds)
        got = {r: settled[r].miner_rewards.get(p.address, 0) / WEI for r in rounds}
        for r in rounds:
            audited = _audited(led, r, p.address, params)
            t.audits += audited
            (t.pay_audited if audited else t.pay_unaudited).append(got[r] - honest_pay[r])
        slashes = int(led.slashed.get(p.address, 0))
        t.confirmed += slashes
        # the ledger's own figure (stakes in tokens here), else the contract's rule on the slash count
        taken = getattr(led, "stake_taken", {}).get(p.address)
        lost = float(taken) if taken is not None else e.stake * (1 - (1 - e.slash_fraction) ** slashes)
        t.stake_lost += lost
        forfeited = getattr(led, "forfeited", {}).get(p.address, 0) / WEI
        t.forfeited += forfeited
        held = sum(led.held.get(x, 0) for (_r, m), x in led.frozen.items() if m == p.address) / WEI
        t.kept += sum(got.values()) - forfeited - held - sum(honest_pay[r] for r in rounds) - lost
    return t


def summarize(
    run: NetworkRun, params: dict[str, int], strategies: tuple[Strategy, ...] = STRATEGIES
) -> dict[str, Any]:
    """Per strategy: identity-rounds, audits drawn, confirmed slashes, pay in audited and unaudited rounds
    against the honest mean, the loss per confirmation, realized profit per identity-round, the model's
    expected profit at the run's q, and :func:`expected_at` the run's and the deployed q."""
    led = run.ledger
    settled = {
        r: rd.settlement
        for r in range(1, run.rounds + 1)
        if (rd := led.rounds.get(r)) is not None and rd.settlement is not None
    }
    honest = [p for p in run.participants if p.role == "miner" and p.label == "honest"]
    miners = sum(p.role == "miner" for p in run.participants)
    if not settled or not honest:
        return {"rounds": 0, "audits": 0, "confirmed": 0, "strategies": [], "params": params}
    honest_pay = {
        r: sum(st.miner_rewards.get(p.address, 0) for p in honest) / len(honest) / WEI
        for r, st in settled.items()
    }
    reward = sum(honest_pay.values()) / len(honest_pay)
    e = default_economics(miners)
    q_run, q_deployed = params["audit_rate_bps"] / 10_000, ev.audit_rate_bps(e) / 10_000
    rows = []
    for s in strategies:
        found = model_row(s.label)
        t = tally(run, s, settled, honest_pay, params)
        if found is not None and t.identity_rounds:
            rows.append(strategy_row(s.label, found, t, e, reward, q_run, q_deployed))
    return {
        "chain": "memory", "rounds": len(settled), "miners": miners, "honest_miners": len(honest),
        "validators": sum(p.role == "validator" for p in run.participants), "params": params,
        "q_run": q_run, "q_deployed": q_deployed, "honest_pay_per_round": round(reward, 4),
        "economics_deployed": asdict(e), "audits": sum(r["audits"] for r in rows),
        "confirmed": sum(r["confirmed"] for r in rows), "seconds": round(run.seconds, 1),
        "errors": run.errors[-5:], "strategies": rows,
    }  # fmt: skip


def strategy_row(
    label: str,
    found: tuple[str, float],
    t: Tally,
    e: ev.RunEconomics,
    reward: float,
    q_run: float,
    q_deployed: float,
) -> dict[str, Any]:
    """One strategy's line of :func:`summarize`: realized, measured-expected (at the run's and the deployed
    q, from :func:`expected_at`) and the model's profit per identity-round, with their parts."""
    name, saved = found
    e_run = replace(e, reward=reward, compute_cost=reward)
    model_run = {row.name: row for row in ev.strategy_rows(e_run, q_run)}[name]
    model_dep = {row.name: row for row in ev.strategy_rows(e, q_deployed)}[name]
    realized = t.kept / max(1, t.identity_rounds) + saved * reward
    du = sum(t.pay_unaudited) / len(t.pay_unaudited) if t.pay_unaudited else 0.0
    da = sum(t.pay_audited) / len(t.pay_audited) if t.pay_audited else 0.0
    d = t.confirmed / t.audits if t.audits else None
    # what one confirmation costs a miner bonded at the minimum stake (a slashed miner tops up to keep
    # mining; the realized figure counts the stake it actually lost)
    loss = e.slash_fraction * e.stake + t.forfeited / t.confirmed if t.confirmed else None
    row: dict[str, Any] = {
        "strategy": label, "model_row": name, "identity_rounds": t.identity_rounds, "audits": t.audits,
        "confirmed": t.confirmed, "detection_per_audit": d, "loss_per_confirmation": loss,
        "stake_lost": round(t.stake_lost, 4), "forfeited": round(t.forfeited, 4), "saved": saved,
        "pay_vs_honest_unaudited": round(du, 4), "pay_vs_honest_audited": round(da, 4),
        "realized_profit_per_round": round(realized, 4), "below_honest": realized < 0,
        "p_no_audit": round((1 - q_run) ** max(1, t.identity_rounds), 6),
        "model_profit_per_round_run_q": round(model_run.expected_profit, 4),
        "model_profit_per_round_deployed_q": round(model_dep.expected_profit, 4),
        "model_margin_deployed_q": round(model_dep.margin, 3),
    }  # fmt: skip
    if d is not None and loss is not None:
        for tag, q, econ in (("run_q", q_run, e_run), ("deployed_q", q_deployed, e)):
            exp = expected_at(q, saved * econ.compute_cost, du, da, d, loss)
            row[f"measured_profit_per_round_{tag}"] = round(exp, 4)
            gain = saved * econ.compute_cost + max(0.0, du)
            row[f"measured_margin_{tag}"] = round((gain - exp) / gain, 3) if gain > 0 else None
    return row


def expected_at(q: float, gain: float, du: float, da: float, d: float, loss: float) -> float:
    """Expected profit per round against honest work at audit rate ``q`` from measured parts: the compute
    saved ``gain``, the pay against honest's in unaudited (``du``) and audited (``da``) rounds, the share
    ``d`` of audits that ended in a confirmed slash and the ``loss`` each took (stake plus forfeits)."""
    return gain + (1 - q) * du + q * (da - d * loss)
