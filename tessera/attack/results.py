"""What each participant of a finished scenario got, and the scenario's checks.

Per participant (:class:`Row`): reward earned (tokens; and the part earned in rounds where it cheated),
slashes and the stake they take, in how many rounds an honest validator refused its update and at which
stage. Per scenario (:class:`ScenarioResult`): the honest miners' share of the miner emission, the
held-out loss of the last certified checkpoint against the all-honest reference (:func:`rebase`), and
for validator attacks the reward per unit of stake against the honest validators' and the largest move
of a consensus score away from the honest median; then the checks the suite claims, by scenario kind.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from protocol.rounds.consensus import weighted_median
from tessera.attack import auditchecks
from tessera.attack.casting import MINER_STAKE, Scenario
from tessera.attack.harness import NetworkRun
from validator.stages import Stage

WEI = 10**18
#: Labels of participants whose work is honest (a Sybil leader trains; its members re-label its update).
HONEST_WORK = frozenset({"honest", "sybil-leader"})
#: Fraction of stake one slash takes (the deployment default, ``NetworkParams.slash_bps``).
SLASH_FRACTION = 0.10
#: A miner down for less than this in REVEAL is still paid: the validators retry an unreachable miner while
#: its budget lasts (``validator.schedule``: MAX_TRIES tries, RETRY_DELAY_S apart; 36 s and more).
WITHHOLD_GRACE_S = 30.0


@dataclass
class Row:
    """One participant's outcome in a scenario."""

    scenario: str
    role: str
    label: str
    address: str
    stake: float
    reward: float
    reward_cheating: float
    slashes: int
    stake_slashed: float
    detected_rounds: int
    rounds: int
    stages: list[str]


@dataclass
class ScenarioResult:
    """A scenario's rows and figures."""

    name: str
    kind: str
    description: str
    rounds: int
    seconds: float
    rows: list[Row]
    honest_share: float
    """Honest miners' share of all miner rewards in the rounds the adversaries cheated."""
    heldout: list[float]
    heldout_baseline: list[float]
    heldout_rel_diff: float
    """(final held-out loss - baseline's) / baseline's."""
    validator: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, bool] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    reference: str = ""
    """The all-honest run its held-out loss is compared with (see :func:`reference`)."""
    audit: dict[str, Any] = field(default_factory=dict)
    """Figures read from the chain (``tessera.attack.auditchecks``): per round, who proved,
    what was paid, the draws and the proposals."""

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ScenarioResult:
        """Inverse of :meth:`to_json` (a worker process's result)."""
        return cls(**{**doc, "rows": [Row(**r) for r in doc["rows"]]})


def _rewards(run: NetworkRun, address: str, from_round: int) -> tuple[float, float]:
    total = cheat = 0.0
    for r, rd in run.ledger.rounds.items():
        s = rd.settlement
        if s is None:
            continue
        amt = s.miner_rewards.get(address, 0) + s.validator_rewards.get(address, 0)
        total += amt / WEI
        if r >= from_round:
            cheat += amt / WEI
    return total, cheat


def evaluate(
    sc: Scenario, run: NetworkRun, base: Sequence[float] = (), reference_name: str = ""
) -> ScenarioResult:
    """Rows and figures of a finished run; ``base``: its all-honest reference's held-out losses (the held-out
    comparison is left out without one; :func:`rebase` adds it later)."""
    rows = [_row(sc, run, p) for p in run.participants]
    share = _honest_share(sc, run)
    res = ScenarioResult(
        sc.name, sc.kind, sc.description, run.rounds, round(run.seconds, 1), rows, round(share, 6),
        [round(x, 5) for x in run.heldout], [], 0.0, errors=run.errors[-10:],
    )  # fmt: skip
    res.checks["network_live"] = not run.stalled
    if run.stalled:
        res.errors.insert(0, f"stalled: {run.stalled}")
    if sc.kind == "miner":
        _miner_checks(res, sc, run, share)
    if sc.kind in ("miner", "validator"):
        res.checks["honest_miners_paid_every_round"] = auditchecks.honest_miners_paid_every_round(run)
    if sc.audit_checks == "proven-by-one":
        checks, res.audit = auditchecks.proven_by_one(run, sc.cheat_from)
        res.checks.update(checks)
    elif sc.audit_checks == "withhold-when-audited":
        # it trains honestly and is paid when not audited: earning 0 overall is not its claim
        checks, res.audit = auditchecks.withhold_when_audited(run)
        res.checks.pop("cheaters_earn_0", None)
        res.checks.pop("honest_share>=0.99", None)
        res.checks.update(checks)
    elif sc.audit_checks in ("caught-when-audited", "partial-faker"):
        # paid in the rounds it is not audited (only the audit's expected loss deters it), so
        # earning 0 overall is not the claim; every audit catching it is (except a partial faker's)
        res.checks.pop("cheaters_earn_0", None)
        res.checks.pop("honest_share>=0.99", None)
        if sc.audit_checks == "caught-when-audited":
            checks, res.audit = auditchecks.caught_when_audited(run, sc.cheat_from)
            res.checks.update(checks)
    elif sc.audit_checks == "false-unanswered-report":
        # a reported honest miner's pay is held until the report expires: paid, just later
        checks, res.audit = auditchecks.false_unanswered_report(run)
        res.checks.pop("honest_miners_paid_every_round", None)
        res.checks.update(checks)
    if sc.kind == "miner" and sc.audit_params:
        _profit_checks(res, sc, run)
    if sc.kind == "fault":
        _fault_checks(res, sc, run)
    if sc.kind == "validator":
        res.validator = _validator_figures(run)
        checks = res.validator.pop("checks")
        if not sc.scores_dishonestly:  # it scores like an honest validator and is paid like one
            checks.pop("adversarial_validator_earns_less_per_stake")
        if sc.audit_params.get("committee_size"):  # a committee's score is its miners' consensus alone
            checks.pop("consensus_within_honest_range")
        res.checks.update(checks)
        res.checks["honest_share>=0.99"] = share >= 0.99
    if base:
        rebase(res, sc, base, reference_name)
    return res


def _profit_checks(res: ScenarioResult, sc: Scenario, run: NetworkRun) -> None:
    """A cheating miner's realized profit against an honest one's beside the model's, and the
    check that it earns no more than honest work."""
    # the cheaters' own stake and the scenario's slash (the ways around an audit run at the default's)
    stakes = [
        p.stake for p in run.participants if p.role == "miner" and p.label not in auditchecks.HONEST_LABELS
    ]
    profit = auditchecks.profit_vs_honest(
        run, cheat_from=sc.cheat_from, stake=max(stakes, default=MINER_STAKE),
        slash_fraction=sc.audit_params.get("slash_bps", round(SLASH_FRACTION * 10_000)) / 10_000,
        audit_params=sc.audit_params,
    )  # fmt: skip
    if profit:
        res.audit["profit"] = profit
        res.checks["earns_no_more_than_honest"] = all(r["realized_profit_per_round"] <= 0 for r in profit)


def _row(sc: Scenario, run: NetworkRun, p: Any) -> Row:
    """Participant ``p``'s outcome: rewards (all, and while cheating), slashes, rounds refused and stages."""
    total, cheat = _rewards(run, p.address, sc.cheat_from)
    vs = run.verdicts.get(p.address.lower(), [])
    bad = sorted({v["round"] for v in vs if v["stage"] != Stage.OK})
    stages = sorted({v["stage"] for v in vs if v["stage"] != Stage.OK})
    slashes = int(run.ledger.slashed.get(p.address, 0))
    return Row(sc.name, p.role, p.label, p.address, p.stake, round(total, 4),
               round(cheat if p.label not in HONEST_WORK else total, 4), slashes,
               round(p.stake * (1 - (1 - SLASH_FRACTION) ** slashes), 4), len(bad), run.rounds, stages)  # fmt: skip


def _honest_share(sc: Scenario, run: NetworkRun) -> float:
    """The honest miners' share of all miner rewards from the round the adversaries start cheating (1.0
    when nothing was paid)."""
    honest_cheat_rounds = 0.0
    all_cheat_rounds = 0.0
    for p in run.participants:
        if p.role != "miner":
            continue
        _, cheat = _rewards(run, p.address, sc.cheat_from)
        all_cheat_rounds += cheat
        if p.label in HONEST_WORK:
            honest_cheat_rounds += cheat
    return honest_cheat_rounds / all_cheat_rounds if all_cheat_rounds else 1.0


def _miner_checks(res: ScenarioResult, sc: Scenario, run: NetworkRun, share: float) -> None:
    """A miner attack: honest miners keep the emission, cheaters earn nothing, the provably caught are
    slashed, no honest miner is."""
    miners = [r for r in res.rows if r.role == "miner"]
    cheaters = [r for r in miners if r.label not in HONEST_WORK]
    res.checks["honest_share>=0.99"] = share >= 0.99
    res.checks["cheaters_earn_0"] = all(r.reward_cheating == 0 for r in cheaters)
    if sc.provable:
        # every cheater some validator caught provably is slashed; one whose only failures are
        # unprovable (a Sybil member that serves no transcript state) is a withholder: 0, not slashed
        caught = [
            r for r in cheaters if any(v.get("provable") for v in run.verdicts.get(r.address.lower(), []))
        ]
        res.checks["cheaters_slashed"] = bool(caught) and all(r.slashes > 0 for r in caught)
        proposals = getattr(run.ledger, "slash_proposals", None)
        if proposals is not None:  # on anvil: every validator that proposed counted, none stuck (F18)
            res.checks["every_slash_proposal_executed"] = all(proposals.values())
    res.checks["no_honest_miner_slashed"] = _no_honest_miner_slashed(res)


def _fault_checks(res: ScenarioResult, sc: Scenario, run: NetworkRun) -> None:
    """A fault scenario: each restarted node is paid again, every round pays miners, no honest miner is
    slashed."""
    for rnd, phase, who, *down in sc.faults:
        p = run.participants[who]
        res.checks[f"restarted_{p.role}_paid_in_round_{rnd + 1}"] = _paid(run, rnd + 1, p.address) > 0
        if p.role == "miner" and phase == 1 and (down[0] if down else 0.0) < WITHHOLD_GRACE_S:
            # killed after its commit, back within the validators' grace: it serves again and its
            # round still pays it (a restarted miner used to earn 0, stage 'fetch')
            res.checks[f"restarted_miner_paid_in_round_{rnd}"] = _paid(run, rnd, p.address) > 0
    # one restarted node must not cost everyone a round (round 4 paid nobody)
    settled = [run.ledger.rounds[r].settlement for r in range(2, run.rounds + 1) if r in run.ledger.rounds]
    res.checks["every_round_paid_miners"] = all(
        st is not None and sum(st.miner_rewards.values()) > 0 for st in settled
    )
    res.checks["no_honest_miner_slashed"] = _no_honest_miner_slashed(res)


def _no_honest_miner_slashed(res: ScenarioResult) -> bool:
    return all(r.slashes == 0 for r in res.rows if r.role == "miner" and r.label == "honest")


def _paid(run: Any, round: int, address: str) -> int:
    """What ``address`` earned (as a miner or a validator) in ``round``'s settlement (0 if unsettled)."""
    led = run.ledger.rounds.get(round)
    s = led.settlement if led is not None else None
    return 0 if s is None else s.miner_rewards.get(address, 0) + s.validator_rewards.get(address, 0)


def rebase(res: ScenarioResult, sc: Scenario, base: Sequence[float], reference_name: str) -> None:
    """Compare ``res``'s held-out loss with its all-honest reference's (``base``), at the same checkpoint."""
    if not base:
        res.errors.append(f"no held-out figures from the reference {reference_name}")
    k = min(len(res.heldout), len(base)) - 1  # the same checkpoint (a stalled run certifies fewer)
    rel = (res.heldout[k] - base[k]) / base[k] if k >= 0 else 0.0
    res.heldout_baseline = [round(x, 5) for x in base]
    res.heldout_rel_diff = round(rel, 5)
    res.reference = reference_name
    if sc.kind in ("miner", "validator") and base:
        # one-sided: the claim is that an attack cannot make the model worse by more than 1%
        res.checks["heldout_no_worse_than_1%"] = rel <= 0.01


def _validator_figures(run: NetworkRun) -> dict[str, Any]:
    vals = [p for p in run.participants if p.role == "validator"]
    honest = [p for p in vals if p.label == "honest"]
    adv = [p for p in vals if p.label != "honest"]
    per_stake: dict[str, float] = {}
    for p in vals:
        total, _ = _rewards(run, p.address, 1)
        per_stake[p.label + ":" + p.address[:8]] = total / p.stake
    honest_ps = min(per_stake[p.label + ":" + p.address[:8]] for p in honest) if honest else 0.0
    adv_ps = max((per_stake[p.label + ":" + p.address[:8]] for p in adv), default=0.0)
    max_move = 0
    outside = 0
    for _r, rd in run.ledger.rounds.items():
        s = rd.settlement
        if s is None:
            continue
        miners = sorted(rd.commits, key=lambda a: int(a, 16))
        hv = [p for p in honest if p.address in rd.reveals]
        for j, m in enumerate(miners):
            col = [rd.reveals[p.address][j] for p in hv]
            if not col:
                continue
            ref = weighted_median(col, [p.stake for p in hv])
            got = s.consensus.get(m, 0)
            max_move = max(max_move, abs(got - ref))
            if not min(col) <= got <= max(col):
                outside += 1
    return {
        "reward_per_stake": {k: round(v, 6) for k, v in per_stake.items()},
        "max_consensus_move_vs_honest_median": max_move,
        "consensus_outside_honest_range": outside,
        "checks": {
            "adversarial_validator_earns_less_per_stake": adv_ps < honest_ps,
            "consensus_within_honest_range": outside == 0,
        },
    }
