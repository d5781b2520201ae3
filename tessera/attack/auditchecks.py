"""Checks of a finished scenario, read from the chain (the contract's events and views):

- ``proven-by-one``: a fake that one validator of three proves (the one whose replayed segment holds it)
  while the two others score it well is paid 0 for the round and slashed once the proof is confirmed;
- ``withhold-when-audited``: a miner that refuses its states exactly in the rounds the seed draws it for
  an audit is paid 0 in those rounds, reported unanswered by its committee, slashed and its unvested pay
  forfeited: what a caught fake costs; in the rounds it is not audited it is paid like an honest miner;
- ``false-unanswered-report``: a validator that reports the honest miners it audits as unanswered (c = 1)
  slashes none of them: its witness (the other validator) is served, votes against, and expires the
  contested report after its window, which releases the held pay; the liar moves no token off them;
- ``caught-when-audited``: a miner every audit catches, whichever way it takes around it (a
  hang, a drip, the update withheld, a last-delta rider's replay, the rider that also hangs), is paid 0
  and confirmed (proof or unanswered report) in every round it is audited; ``partial-faker``: a lazy
  miner's figures only (one replayed step lands on its fake with probability f);
- every way around an audit: its realized profit against an honest miner beside the model's expected
  profit (:func:`profit_vs_honest`);
- every miner and validator scenario: honest miners are paid in every round they complete.

On anvil the figures come from ``MinerRewarded``, ``ScoresRevealed``, ``SlashProposed``, ``Slashed`` and
``Forfeited`` and the ``auditDraw`` / ``unansweredEvidence`` views (``tessera.attack.chainnet``); on the
in-memory ledger from its state (``MemoryLedger.proposals``, the same shape).
"""

from __future__ import annotations

from typing import Any

from protocol.rounds import economics as ev
from protocol.rounds.audits import REPORT_WINDOW_ROUNDS, audit_draw
from protocol.rounds.deployment import NetworkParams
from tessera.attack.harness import NetworkRun

WEI = 10**18
#: Labels of participants whose work is honest (a Sybil leader trains; its members re-label its update).
HONEST_LABELS = frozenset({"honest", "sybil-leader"})


def _settled(run: NetworkRun) -> dict[int, Any]:
    """Scenario round -> settlement, for the run's rounds."""
    rounds = run.ledger.rounds
    return {r: rounds[r].settlement for r in range(1, run.rounds + 1) if r in rounds}


def honest_miners_paid_every_round(run: NetworkRun) -> bool:
    """Every honest miner that committed in a settled round is paid in it (the chain's ``MinerRewarded``)."""
    ok = True
    for r, st in _settled(run).items():
        commits = run.ledger.rounds[r].commits
        for p in run.participants:
            if p.role != "miner" or p.label != "honest" or p.address not in commits:
                continue
            ok &= st is not None and st.miner_rewards.get(p.address, 0) > 0
    return ok


def audits(run: NetworkRun) -> dict[tuple[int, str], bool]:
    """(scenario round, miner) -> whether the round's seed drew the miner for an audit."""
    led = run.ledger
    known = getattr(led, "audits", None)
    if isinstance(known, dict):
        return known
    out = {}
    for r, rd in led.rounds.items():
        if r in led.seeds and r in led.draw_size:
            for m in rd.commits:
                d = audit_draw(led.seeds[r], m, led.draw_size[r], led.audit_rate_bps, led.committee_size)
                out[(r, m)] = bool(d.audited)
    return out


def proposals(run: NetworkRun) -> list[dict[str, Any]]:
    """Every slash proposal with its outcome (see ``LedgerSnapshot.proposals``; ``MemoryLedger.proposals``
    gives the same); a ledger without them: its frozen pay and executed proofs in that shape."""
    led = run.ledger
    known = getattr(led, "proposals", None)
    if isinstance(known, list):
        return known
    return [
        {"evidence": ev.hex(), "target": m, "proposer": "", "round": r, "unanswered": False,
         "executed": ev in led.executed, "stake_taken": 0, "forfeited": 0}
        for (r, m), ev in led.frozen.items()
    ]  # fmt: skip


def _cheaters(run: NetworkRun) -> list[Any]:
    return [p for p in run.participants if p.role == "miner" and p.label not in HONEST_LABELS]


def proven_by_one(run: NetworkRun, cheat_from: int) -> tuple[dict[str, bool], dict[str, Any]]:
    """Checks and figures of ``fake-proven-by-one-of-three``."""
    settled = _settled(run)
    figures: dict[str, Any] = {"rounds": {}}
    checks = {"one_validator_proves_two_score_it_well": True, "faker_paid_0_every_round": True}
    faker_props = []
    for p in _cheaters(run):
        for r in range(cheat_from, run.rounds + 1):
            rd = run.ledger.rounds.get(r)
            st = settled.get(r)
            vs = [v for v in run.verdicts.get(p.address.lower(), []) if v["round"] == r]
            provers = sorted({v["validator"] for v in vs if v["provable"]})
            miners = sorted(rd.commits, key=lambda a: int(a, 16)) if rd is not None else []
            j = miners.index(p.address) if p.address in miners else -1
            others = {a: s[j] for a, s in (rd.reveals.items() if rd is not None and j >= 0 else ())
                      if a not in provers}  # fmt: skip
            paid = st.miner_rewards.get(p.address, 0) if st is not None else -1
            figures["rounds"][r] = {"provers": len(provers), "other_scores": sorted(others.values()),
                                    "paid": paid / WEI}  # fmt: skip
            checks["one_validator_proves_two_score_it_well"] &= (
                len(provers) == 1 and len(others) >= 2 and all(s > 0 for s in others.values())
            )
            checks["faker_paid_0_every_round"] &= paid == 0
        faker_props += [x for x in proposals(run) if x["target"] == p.address]
    checks["faker_slashed_once_confirmed"] = bool(faker_props) and all(x["executed"] for x in faker_props)
    figures["proposals"] = faker_props
    return checks, figures


def withhold_when_audited(run: NetworkRun) -> tuple[dict[str, bool], dict[str, Any]]:
    """Checks and figures of ``withhold-when-audited``."""
    settled, drawn, props = _settled(run), audits(run), proposals(run)
    checks = {
        "audited_at_least_once": False,
        "paid_0_when_audited": True,
        "paid_when_not_audited": True,
        "unanswered_confirmed_when_audited": True,
        "costs_like_a_caught_fake": True,
    }
    figures: dict[str, Any] = {"rounds": {}}
    for p in _cheaters(run):
        for r, st in settled.items():
            audited = drawn.get((r, p.address))
            paid = st.miner_rewards.get(p.address, 0) if st is not None else 0
            mine = [x for x in props if x["target"] == p.address and x["round"] == r and x["unanswered"]]
            figures["rounds"][r] = {"audited": audited, "paid": paid / WEI, "unanswered": mine}
            if audited:
                checks["audited_at_least_once"] = True
                checks["paid_0_when_audited"] &= paid == 0
                confirmed = [x for x in mine if x["executed"]]
                checks["unanswered_confirmed_when_audited"] &= bool(confirmed)
                # the same execution as a confirmed fraud proof: stake taken (slash_bps) and unvested pay
                # forfeited; the round's own pay is held (paid 0 above)
                checks["costs_like_a_caught_fake"] &= all(x["stake_taken"] > 0 for x in confirmed)
            elif audited is False:
                checks["paid_when_not_audited"] &= paid > 0
    return checks, figures


def false_unanswered_report(run: NetworkRun) -> tuple[dict[str, bool], dict[str, Any]]:
    """Checks and figures of ``false-unanswered-report``: every report on an honest miner made by the
    liar, none executed, nothing taken; each report whose window closed within the run expired (or was
    rejected) with the round's pay released; every honest miner paid in every round, at settlement or
    by that release (a report still inside its window at the end holds the pay: counted apart)."""
    settled, props = _settled(run), proposals(run)
    honest = {p.address for p in run.participants if p.role == "miner" and p.label in HONEST_LABELS}
    liars = {p.address for p in run.participants if p.role == "validator" and p.label != "honest"}
    reports = [x for x in props if x["unanswered"] and x["target"] in honest]
    closed = [x for x in reports if x["round"] + REPORT_WINDOW_ROUNDS < run.rounds]
    released = {(x["round"], x["target"]): x.get("released", 0) for x in reports}
    held_open = {(x["round"], x["target"]) for x in reports if x not in closed}
    paid_ok = True
    for r, st in settled.items():
        for m in honest & set(run.ledger.rounds[r].commits):
            paid = st.miner_rewards.get(m, 0) if st is not None else 0
            paid_ok &= paid > 0 or released.get((r, m), 0) > 0 or (r, m) in held_open
    checks = {
        "liar_reported_honest_miners": bool(reports) and all(x["proposer"] in liars for x in reports),
        "no_report_on_an_honest_miner_executed": not any(x["executed"] for x in reports),
        "liar_takes_nothing": all(x["stake_taken"] == 0 and x["forfeited"] == 0 for x in reports),
        "closed_reports_released_the_pay": bool(closed)
        and all((x.get("expired") or x.get("rejected")) and x.get("released", 0) > 0 for x in closed),
        "honest_miners_paid_or_released_every_round": paid_ok,
    }
    figures = {
        "reports": [
            {"round": x["round"], "target": x["target"][:10], "expired": x.get("expired", False),
             "rejected": x.get("rejected", False), "released": x.get("released", 0) / WEI}
            for x in reports
        ],
        "window_closed_in_run": len(closed),
        "released_total": sum(x.get("released", 0) for x in reports) / WEI,
    }  # fmt: skip
    return checks, figures


def caught_when_audited(run: NetworkRun, cheat_from: int = 1) -> tuple[dict[str, bool], dict[str, Any]]:
    """Checks and figures of a miner every audit catches, whichever way it takes around it (a
    hang, a drip, the update withheld, a last-delta rider's replay, the rider that also hangs): in every
    round from ``cheat_from`` the seed drew it for an audit, a proposal on it -- a fraud proof or an
    unanswered report -- is confirmed, it is paid 0 that round, and the confirmation costs what a caught
    fake costs (stake taken). The rounds it is not audited are figures, not a claim (a rider that passes
    every check that moves no state is paid in them: only the audit's expected loss deters it)."""
    settled, drawn, props = _settled(run), audits(run), proposals(run)
    checks = {
        "audited_at_least_once": False,
        "paid_0_when_audited": True,
        "confirmed_when_audited": True,
        "costs_like_a_caught_fake": True,
    }
    figures: dict[str, Any] = {"rounds": {}}
    # the chain's events give the stake each confirmation took; the memory ledger counts slashes only
    stake_figures = isinstance(getattr(run.ledger, "proposals", None), list)
    for p in _cheaters(run):
        for r, st in settled.items():
            if r < cheat_from:
                continue
            audited = drawn.get((r, p.address))
            paid = st.miner_rewards.get(p.address, 0) if st is not None else 0
            mine = [x for x in props if x["target"] == p.address and x["round"] == r]
            confirmed = [x for x in mine if x["executed"]]
            figures["rounds"][r] = {
                "audited": audited, "paid": paid / WEI,
                "confirmed": [("unanswered" if x["unanswered"] else "proof") for x in confirmed],
            }  # fmt: skip
            if audited:
                checks["audited_at_least_once"] = True
                checks["paid_0_when_audited"] &= paid == 0
                checks["confirmed_when_audited"] &= bool(confirmed)
                checks["costs_like_a_caught_fake"] &= (
                    all(x["stake_taken"] > 0 for x in confirmed)
                    if stake_figures
                    else run.ledger.slashed.get(p.address, 0) > 0
                )
    return checks, figures


#: The model's row (``protocol.rounds.economics.strategy_rows``) and the share of an honest round's compute
#: each way around an audit saves, by the cheater's label prefix (longest first).
MODEL_ROWS: dict[str, tuple[str, float]] = {
    "withhold-when-audited": ("withholding-when-audited", 0.0),
    "withholder": ("update-withheld", 0.0),
    "hang-when-audited": ("hang-when-audited", 0.0),
    "drip-when-audited": ("drip-when-audited", 0.0),
    "free-rider-last-delta-hang": ("free-rider-last-delta-hang", 1.0),
    "free-rider-last-delta": ("free-rider-last-delta", 1.0),
    "lazy f=0.1": ("lazy f=0.1", 0.1),
    "lazy f=0.5": ("lazy f=0.5", 0.5),
}


def model_row(label: str) -> tuple[str, float] | None:
    """The model's row name and the compute share saved for a cheater labelled ``label`` (None: no row)."""
    for prefix in sorted(MODEL_ROWS, key=len, reverse=True):
        if label.startswith(prefix):
            return MODEL_ROWS[prefix]
    return None


def profit_vs_honest(
    run: NetworkRun,
    *,
    cheat_from: int = 1,
    stake: float,
    slash_fraction: float,
    audit_params: dict[str, int],
) -> list[dict[str, Any]]:
    """Per cheater with a model row (:func:`model_row`): its realized profit per cheating round against an
    honest miner's, beside the model's expected profit (``protocol.rounds.economics``) at the run's q, c, K,
    stake and slash, with ``R`` the honest miners' mean pay per round and ``C = R`` (the model's default).

    Realized = (its pay kept - an honest miner's pay - the stake its slashes took) / rounds + saved x C,
    where the pay kept is what it was credited minus what confirmed proposals forfeited, and ``saved`` is
    the share of an honest round's compute it did not spend (0 for a miner that trains honestly and only
    dodges the audit; its model row assumes the dodge hides a fake, gain C)."""
    settled = {r: st for r, st in _settled(run).items() if r >= cheat_from and st is not None}
    n = len(settled)
    honest = [p for p in run.participants if p.role == "miner" and p.label in HONEST_LABELS]
    if not n or not honest:
        return []
    reward = sum(st.miner_rewards.get(p.address, 0) for st in settled.values() for p in honest) / WEI
    reward /= len(honest) * n
    validators = sum(p.role == "validator" for p in run.participants)
    econ = ev.RunEconomics(
        stake=stake, slash_fraction=slash_fraction, reward=reward, compute_cost=reward,
        vesting_rounds=audit_params.get("vesting_rounds", NetworkParams().vesting_rounds),
        committee_size=audit_params.get("committee_size", 0), validators=max(1, validators), honest_fraction=1.0,
    )  # fmt: skip
    q = audit_params.get("audit_rate_bps", 10_000) / 10_000
    model = {row.name: row for row in ev.strategy_rows(econ, q)}
    rows = []
    for p in _cheaters(run):
        found = model_row(p.label)
        if found is None or found[0] not in model:
            continue
        name, saved = found
        credited = sum(st.miner_rewards.get(p.address, 0) for st in settled.values()) / WEI
        if isinstance(getattr(run.ledger, "proposals", None), list):  # the chain's Forfeited events
            forfeited = sum(x["forfeited"] for x in proposals(run) if x["target"] == p.address) / WEI
        else:  # the memory ledger keeps what each miner forfeited
            forfeited = getattr(run.ledger, "forfeited", {}).get(p.address, 0) / WEI
        slashes = int(run.ledger.slashed.get(p.address, 0))
        stake_lost = stake * (1 - (1 - slash_fraction) ** slashes)
        realized = (credited - forfeited - reward * n - stake_lost) / n + saved * reward
        m = model[name]
        rows.append({
            "label": p.label, "rounds": n, "honest_pay_per_round": round(reward, 4), "credited": round(credited, 4),
            "forfeited": round(forfeited, 4), "slashes": slashes, "stake_lost": round(stake_lost, 4),
            "saved": saved, "realized_profit_per_round": round(realized, 4), "model_row": name, "q": q,
            "model_expected_profit_per_round": round(m.expected_profit, 4),
            "below_honest": realized < 0,
        })  # fmt: skip
    return rows
