"""Run scenarios, measure what each participant got, and check the suite's claims.

Per participant: reward earned (tokens; and the part earned in rounds where it cheated), slashes and the
stake they take, in how many rounds an honest validator refused its update and at which stage. Per
scenario: the honest miners' share of the miner emission, the held-out loss of the last certified
checkpoint against the all-honest baseline, and for validator attacks the reward per unit of stake
against the honest validators' and the largest move of a consensus score away from the honest median.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tessera.attack.harness import Network, NetworkRun, tiny_spec
from tessera.attack.scenarios import Scenario, get
from validator.config import ValidatorConfig

log = logging.getLogger(__name__)

WEI = 10**18
#: Labels of participants whose work is honest (a Sybil leader trains; its members re-label its update).
HONEST_WORK = frozenset({"honest", "sybil-leader"})
#: Fraction of stake one slash takes (the deployment default, ``NetworkParams.slash_bps``).
SLASH_FRACTION = 0.10
#: The validators' default grace: a miner down for less than this in REVEAL is still paid.
WITHHOLD_GRACE_S = ValidatorConfig.withhold_grace_seconds


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

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ScenarioResult:
        """Inverse of :meth:`to_json` (a worker process's result)."""
        return cls(**{**doc, "rows": [Row(**r) for r in doc["rows"]]})


def _fill_board(sc: Scenario) -> Any:
    """An ``on_step`` hook that copies revealed updates and evidence onto the scenario's board."""

    def hook(net: Network) -> None:
        from protocol.records import decode_record

        by_addr = {p.address: p for p in net.participants if p.role == "miner"}
        for (r, addr), data in list(net.board.items()):
            p = by_addr.get(addr)
            if p is None or (r, addr) in sc.board.updates:
                continue
            rec = decode_record(data)
            for kind, target in (("update", sc.board.updates), ("evidence", sc.board.evidence)):
                d = rec.digest_of(kind)
                if d is not None and p.node.public.has(d):
                    target[(r, addr)] = p.node.public.get(d)

    return hook


def run_scenario(
    sc: Scenario, rounds: int, spec: Any = None, timeout: float = 900.0, chain: str = "anvil"
) -> NetworkRun:
    """Run one scenario's network for ``rounds`` rounds on ``chain`` (``anvil``: a fresh anvil and
    deployment; ``memory``: the in-memory ledger)."""
    from tessera.attack.harness import Fault

    net = Network(
        sc.build(),
        spec=spec or tiny_spec(),
        on_step=_fill_board(sc),
        chain=chain,
        phase_blocks=sc.phase_blocks,
    )
    net.faults = [Fault(*f) for f in sc.faults]
    net.start()
    try:
        return net.run(rounds, timeout=timeout)
    finally:
        net.stop()


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
    rows = []
    for p in run.participants:
        total, cheat = _rewards(run, p.address, sc.cheat_from)
        vs = run.verdicts.get(p.address.lower(), [])
        bad = sorted({v["round"] for v in vs if v["stage"] != "ok"})
        stages = sorted({v["stage"] for v in vs if v["stage"] != "ok"})
        slashes = int(run.ledger.slashed.get(p.address, 0))
        rows.append(
            Row(sc.name, p.role, p.label, p.address, p.stake, round(total, 4),
                round(cheat if p.label not in HONEST_WORK else total, 4), slashes,
                round(p.stake * (1 - (1 - SLASH_FRACTION) ** slashes), 4), len(bad), run.rounds, stages)
        )  # fmt: skip
    miners = [r for r in rows if r.role == "miner"]
    honest_cheat_rounds = 0.0
    all_cheat_rounds = 0.0
    for p in run.participants:
        if p.role != "miner":
            continue
        _, cheat = _rewards(run, p.address, sc.cheat_from)
        all_cheat_rounds += cheat
        if p.label in HONEST_WORK:
            honest_cheat_rounds += cheat
    share = honest_cheat_rounds / all_cheat_rounds if all_cheat_rounds else 1.0
    res = ScenarioResult(
        sc.name, sc.kind, sc.description, run.rounds, round(run.seconds, 1), rows, round(share, 6),
        [round(x, 5) for x in run.heldout], [], 0.0, errors=run.errors[-10:],
    )  # fmt: skip
    res.checks["network_live"] = not run.stalled
    if run.stalled:
        res.errors.insert(0, f"stalled: {run.stalled}")
    cheaters = [r for r in miners if r.label not in HONEST_WORK]
    honest_miners = [r for r in miners if r.label == "honest"]
    if sc.kind == "miner":
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
        res.checks["no_honest_miner_slashed"] = all(r.slashes == 0 for r in honest_miners)
    if sc.kind == "fault":
        for rnd, phase, who, *down in sc.faults:
            p = run.participants[who]
            res.checks[f"restarted_{p.role}_paid_in_round_{rnd + 1}"] = _paid(run, rnd + 1, p.address) > 0
            if p.role == "miner" and phase == 1 and (down[0] if down else 0.0) < WITHHOLD_GRACE_S:
                # killed after its commit, back within the validators' grace: it serves again and its
                # round still pays it (issue 10: a restarted miner used to earn 0, stage 'fetch')
                res.checks[f"restarted_miner_paid_in_round_{rnd}"] = _paid(run, rnd, p.address) > 0
        # one restarted node must not cost everyone a round (issue 10: round 4 paid nobody)
        settled = [
            run.ledger.rounds[r].settlement for r in range(2, run.rounds + 1) if r in run.ledger.rounds
        ]
        res.checks["every_round_paid_miners"] = all(
            st is not None and sum(st.miner_rewards.values()) > 0 for st in settled
        )
        res.checks["no_honest_miner_slashed"] = all(r.slashes == 0 for r in honest_miners)
    if sc.kind == "validator":
        res.validator = _validator_figures(run)
        checks = res.validator.pop("checks")
        if not sc.scores_dishonestly:  # it scores like an honest validator and is paid like one
            checks.pop("adversarial_validator_earns_less_per_stake")
        res.checks.update(checks)
        res.checks["honest_share>=0.99"] = share >= 0.99
    if base:
        rebase(res, sc, base, reference_name)
    return res


def _paid(run: Any, rnd: int, address: str) -> int:
    """What ``address`` earned (as a miner or a validator) in round ``rnd``'s settlement (0 if unsettled)."""
    led = run.ledger.rounds.get(rnd)
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


def reference(sc: Scenario) -> Scenario:
    """The all-honest counterpart of ``sc``: the same participants, every adversary replaced by an honest
    node of its role and stake (built like the scenario's own honest nodes: TEE evidence included). With
    the harness's fixed entropy the two runs draw the same round seeds, so their held-out losses differ
    only by what the adversary did (and the work it did not contribute)."""
    from tessera.attack.harness import Participant

    def build() -> list[Participant]:
        parts = sc.build()
        template = {p.role: p for p in parts if p.label == "honest"}
        return [
            p
            if p.label == "honest"
            else Participant(
                p.role, "honest", p.stake, template[p.role].factory if p.role in template else None
            )
            for p in parts
        ]

    return Scenario(
        f"reference:{sc.name}", "baseline", f"all-honest counterpart of {sc.name}", build, tee=sc.tee
    )


def reference_key(sc: Scenario) -> tuple[Any, ...]:
    """Scenarios with the same key share one reference run."""
    return (sc.tee, tuple((p.role, p.stake) for p in sc.build()))


def _validator_figures(run: NetworkRun) -> dict[str, Any]:
    from protocol.consensus import weighted_median

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


def _failed(sc: Scenario, rounds: int, exc: BaseException) -> ScenarioResult:
    return ScenarioResult(
        sc.name, sc.kind, sc.description, rounds, 0.0, [], 0.0, [], [], 0.0,
        checks={"ran": False}, errors=[f"{type(exc).__name__}: {exc}"],
    )  # fmt: skip


def _run_one(
    name: str, rounds: int, spec_json: dict[str, Any], chain: str, as_reference: bool = False
) -> dict[str, Any]:
    """One scenario (or its all-honest reference) in a worker process; its result as JSON, without the
    held-out comparison (plain data crosses the process boundary)."""
    from protocol.runspec import RunSpec

    logging.basicConfig(level=logging.WARNING)
    for noisy in ("miner", "validator"):  # as the CLI sets them in the parent
        logging.getLogger(noisy).setLevel(logging.ERROR)
    sc = reference(get(name)) if as_reference else get(name)
    try:
        run = run_scenario(sc, rounds, RunSpec.from_json(spec_json), chain=chain)
        return evaluate(sc, run).to_json()
    except Exception as exc:  # a crashed scenario is a finding, not the end of the suite
        log.error("scenario %s failed: %s", sc.name, exc, exc_info=True)
        return _failed(sc, rounds, exc).to_json()


def run_suite(
    names: Sequence[str],
    rounds: int,
    out: Path | None = None,
    spec: Any = None,
    progress: Any = None,
    chain: str = "anvil",
    jobs: int = 1,
) -> list[ScenarioResult]:
    """Run the baseline, each named scenario and their all-honest references; write JSON to ``out`` (after
    every run) if given.

    Each scenario's held-out loss is compared with its all-honest reference (:func:`reference`: the same
    participants with the adversaries made honest, the same round seeds); scenarios of the same shape
    share one reference, and the all-honest ``baseline`` is its own. ``chain``: ``anvil`` (default: each
    run on a fresh anvil with freshly deployed contracts) or ``memory`` (the in-memory ledger; the report
    says so). ``jobs`` > 1 runs that many at once, each in its own process with its own anvil (a run spends
    most of its time waiting for blocks and peers, so this shortens the suite even on 2 cores); results
    are reported in the order given.

    A scenario whose network fails is reported with ``checks = {"ran": False}`` and the error; the
    suite goes on with the next one.
    """
    t0 = time.perf_counter()
    spec = spec or tiny_spec()
    order = ["baseline", *[n for n in names if n != "baseline"]]
    scenarios = {n: get(n) for n in order}
    ref_of: dict[str, str] = {}  # scenario -> reference run name ("baseline" for the all-honest shape)
    refs: dict[tuple[Any, ...], str] = {reference_key(scenarios["baseline"]): "baseline"}
    for n in order:
        key = reference_key(scenarios[n])
        refs.setdefault(key, f"reference:{n}")
        ref_of[n] = refs[key]
    ref_runs = [r for r in dict.fromkeys(ref_of.values()) if r != "baseline"]
    jobs_list = [(r.removeprefix("reference:"), True) for r in ref_runs] + [(n, False) for n in order]
    ref_heldout: dict[str, list[float]] = {}
    done: dict[str, ScenarioResult] = {}
    waiting: list[str] = []
    references: dict[str, Any] = {}

    def save() -> None:
        if out is None:
            return
        out.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "chain": chain,
            "rounds": rounds,
            "jobs": jobs,
            "seconds": round(time.perf_counter() - t0, 1),
            "spec": spec.to_json(),
            "scenarios": [done[n].to_json() for n in order if n in done],
            "references": references,
        }
        out.write_text(json.dumps(doc, indent=1))

    def finish(name: str, as_reference: bool, doc: dict[str, Any]) -> None:
        res = ScenarioResult.from_json(doc)
        if as_reference:
            ref = f"reference:{name}"
            ref_heldout[ref] = res.heldout
            references[ref] = {"seconds": res.seconds, "heldout": res.heldout, "checks": res.checks}
            if progress:
                progress(res)
        else:
            if name == "baseline":
                ref_heldout["baseline"] = res.heldout
            waiting.append(name)
            done[name] = res
        for n in list(waiting):
            if ref_of[n] in ref_heldout:
                waiting.remove(n)
                rebase(done[n], scenarios[n], ref_heldout[ref_of[n]], ref_of[n])
                if progress:
                    progress(done[n])
        save()

    if jobs <= 1:
        for name, as_ref in jobs_list:
            finish(name, as_ref, _run_one(name, rounds, spec.to_json(), chain, as_ref))
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        ctx = multiprocessing.get_context("spawn")  # fresh interpreters: no forked threads, locks or torch
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            futures = {
                pool.submit(_run_one, name, rounds, spec.to_json(), chain, as_ref): (name, as_ref)
                for name, as_ref in jobs_list
            }
            for fut in as_completed(futures):
                name, as_ref = futures[fut]
                try:
                    doc = fut.result()
                except Exception as exc:  # the worker process itself died
                    sc = reference(scenarios[name]) if as_ref else scenarios[name]
                    doc = _failed(sc, rounds, exc).to_json()
                finish(name, as_ref, doc)
    for n in waiting:  # a reference run failed: reported without the held-out comparison
        done[n].errors.append(f"reference {ref_of[n]} did not run")
        if progress:
            progress(done[n])
    save()
    return [done[n] for n in order if n in done]


def table(results: Sequence[ScenarioResult]) -> str:
    """A plain-text table: one line per participant, then one per scenario's checks."""
    lines = [
        f"{'scenario':22} {'role':9} {'mode':20} {'stake':>6} {'reward':>9} {'cheating':>9} "
        f"{'slashed':>7} {'detected':>8}  stages"
    ]
    for res in results:
        for r in res.rows:
            lines.append(
                f"{res.name:22} {r.role:9} {r.label:20} {r.stake:6.0f} {r.reward:9.2f} {r.reward_cheating:9.2f} "
                f"{r.stake_slashed:7.1f} {r.detected_rounds:>4}/{r.rounds:<3}  {','.join(r.stages)}"
            )
        checks = " ".join(f"{k}={'PASS' if v else 'FAIL'}" for k, v in res.checks.items())
        lines.append(
            f"{'':22} -> honest share {res.honest_share:.4f}, held-out {res.heldout[-1] if res.heldout else 0:.4f}"
            f" ({res.heldout_rel_diff:+.2%} vs honest), {res.seconds:.0f}s  {checks}"
        )
    return "\n".join(lines)


#: Share of an honest round's compute each miner mode saves (the rest it spends; lazy modes are exact).
SAVED: dict[str, float] = {
    "free-rider": 1.0, "copier": 1.0, "commitment-copier": 1.0, "replayer": 1.0, "withholder": 1.0,
    "sybil": 1.0, "quote-replayer": 0.0, "poisoner": 0.0, "forger": 0.0, "lazy-other-data": 0.0,
    "lazy-33": 1 / 3,
}  # fmt: skip


def _saved(label: str) -> float:
    return next((v for k, v in sorted(SAVED.items(), key=lambda kv: -len(kv[0])) if label.startswith(k)), 0.0)


def profit_rows(doc: dict[str, Any], segments: int = 3, checked: int = 2) -> list[dict[str, Any]]:
    """Expected (``tessera.attack.economics``) against measured profit per cheating round, per cheater of a
    report written by :func:`run_suite`: ``R`` = the honest miners' mean reward per round in that scenario,
    compute cost ``c = R / 2``, the cheater's stake, slash fraction :data:`SLASH_FRACTION`; measured profit
    = reward while cheating - compute spent - stake slashed. ``segments``/``checked``: the run's transcript
    segments per update and segments each validator replays (the suite's tiny spec: 3 and 2)."""
    from tessera.attack import economics as ec

    out = []
    for res in doc["scenarios"]:
        if res["kind"] != "miner" or not res["rows"]:
            continue
        sc = get(res["name"])
        honest = [r for r in res["rows"] if r["role"] == "miner" and r["label"] == "honest"]
        weights = [int(r["stake"]) for r in res["rows"] if r["role"] == "validator"]
        reward = sum(r["reward"] for r in honest) / max(1, len(honest)) / max(1, res["rounds"])
        for r in res["rows"]:
            if r["role"] != "miner" or r["label"] in HONEST_WORK:
                continue
            n = max(1, r["rounds"] - sc.cheat_from + 1)
            saved = _saved(r["label"])
            if r["label"].startswith("lazy-33"):
                st = ec.lazy_strategy(1 / 3, segments, checked, weights, evidence_shared=True)
            else:
                st = ec.deterministic_strategy(r["label"], saved, sc.provable)
            e = ec.Economy(reward, reward / 2, r["stake"], SLASH_FRACTION)
            measured = (r["reward_cheating"] - (1 - saved) * e.compute_cost * n - r["stake_slashed"]) / n
            out.append({
                "scenario": res["name"], "mode": r["label"], "rounds_cheating": n, "model_p_zero": st.p_zero,
                "refused": f"{min(r['detected_rounds'], n)}/{n}", "model_profit": st.expected_profit(e),
                "measured_profit": measured,
            })  # fmt: skip
    return out


def profit_markdown(doc: dict[str, Any]) -> str:
    """:func:`profit_rows` as a Markdown table."""
    lines = [
        "| scenario (mode) | rounds cheating | model P(reward zeroed) | measured (rounds refused) | "
        "model E[profit]/round | measured profit/round |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for p in profit_rows(doc):
        lines.append(
            f"| {p['scenario']} ({p['mode']}) | {p['rounds_cheating']} | {p['model_p_zero']:.3f} | {p['refused']} | "
            f"{p['model_profit']:.1f} | {p['measured_profit']:.1f} |"
        )
    return "\n".join(lines)


def markdown(doc: dict[str, Any]) -> str:
    """The report JSON (as written by :func:`run_suite`) as Markdown tables for docs/security.md."""
    out = [
        "| scenario | participant | stake | reward | reward while cheating | stake slashed | rounds detected | stages |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    summary = [
        "| scenario | honest miners' share | held-out loss (vs all-honest) | checks |",
        "|---|---:|---:|---|",
    ]
    for res in doc["scenarios"]:
        for r in res["rows"]:
            if res["name"] != "baseline" and r["label"] == "honest" and r["role"] == "miner":
                continue
            out.append(
                f"| {res['name']} | {r['role']} {r['label']} | {r['stake']:.0f} | {r['reward']:.2f} | "
                f"{r['reward_cheating']:.2f} | {r['stake_slashed']:.1f} | {r['detected_rounds']}/{r['rounds']} | "
                f"{', '.join(r['stages'])} |"
            )
        held = res["heldout"][-1] if res["heldout"] else float("nan")
        checks = ", ".join(f"{k} {'✓' if v else '✗'}" for k, v in res["checks"].items())
        summary.append(
            f"| {res['name']} | {res['honest_share']:.4f} | {held:.4f} ({res['heldout_rel_diff']:+.2%}) | {checks} |"
        )
    chain = doc.get("chain", "memory")
    head = [
        f"chain: **{chain}**" + (" (in-memory ledger, not a real chain)" if chain == "memory" else ""),
        "",
        "| scenario | cheater reward (while cheating) | cheater stake slashed | cheater rounds detected | "
        "honest miners' share | held-out loss vs honest |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for res in doc["scenarios"]:
        bad = [r for r in res["rows"] if r["label"] not in HONEST_WORK]
        det = f"{sum(r['detected_rounds'] for r in bad)}/{sum(r['rounds'] for r in bad)}" if bad else "-"
        held = res["heldout"][-1] if res["heldout"] else float("nan")
        live = "" if res["checks"].get("network_live", True) else " (stalled)"
        head.append(
            f"| {res['name']}{live} | {sum(r['reward_cheating'] for r in bad):.2f} | "
            f"{sum(r['stake_slashed'] for r in bad):.1f} | {det} | {res['honest_share']:.4f} | "
            f"{held:.4f} ({res['heldout_rel_diff']:+.2%}) |"
        )
    return "\n".join(head) + "\n\n" + "\n".join(summary) + "\n\n" + "\n".join(out)
