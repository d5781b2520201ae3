"""``tessera attack``: run the attack suite and print who earned, lost and was caught.

tessera attack --all [--rounds N] [--out attack.json] [--chain anvil|memory]
tessera attack free-rider-zero lazy-33 [--rounds N]
tessera attack --quick              # tiny model, 2 rounds, a few scenarios (CI)
tessera attack --list
tessera attack --model [--fraction F ...]   # the detection/profit model only (no network)
tessera attack --campaign [--rounds 200] [--identities K] [--audit-rate-bps Q]   # every way around an
                                    # audit at the default stake, in memory: realized and expected profit

Each scenario runs on a fresh local anvil with freshly deployed contracts (``--chain anvil``, the
default); ``--chain memory`` is a fast in-memory ledger, and its report says ``chain: memory``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

QUICK = ("free-rider-random", "lazy-33", "poisoner-nan", "colluding-validators")


def register(subparsers: Any) -> None:
    """Add ``attack``."""
    p = subparsers.add_parser("attack", help="run adversarial scenarios beside honest nodes and report")
    p.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="scenario names (see --list)")
    p.add_argument("--all", action="store_true", help="every scenario")
    p.add_argument("--quick", action="store_true", help=f"2 rounds of {', '.join(QUICK)}")
    p.add_argument("--rounds", type=int, default=None, help="rounds per scenario (default 3; --partial: 30)")
    p.add_argument(
        "--partial",
        action="store_true",
        help="lazy miners faking f = 0.01, 0.1, 0.5, 1 of their steps for --rounds rounds on the in-memory "
        "ledger: realized profit beside the model's, and the default stake's expected profit from measured "
        "parts (tessera.attack.partial); writes --out and prints the tables",
    )
    _campaign_arguments(p)
    p.add_argument("--out", type=Path, default=Path("attack-report.json"), help="JSON report path")
    p.add_argument(
        "--jobs",
        type=int,
        default=4,
        help="scenarios run at once, each in its own process and anvil (default 4; they mostly wait on "
        "blocks and peers, so 4 fit 2 cores); 1 runs them one after another",
    )
    p.add_argument(
        "--chain",
        choices=("anvil", "memory"),
        default="anvil",
        help="anvil (default): a fresh anvil + deployed contracts per scenario; memory: in-memory ledger (fast)",
    )
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument(
        "--report",
        type=Path,
        metavar="JSON",
        help="print a finished run's report (--out) as Markdown tables, with the expected against the "
        "measured profit of each cheat, and exit",
    )
    _model_arguments(p)
    p.set_defaults(handler=_run)


def _campaign_arguments(p: argparse.ArgumentParser) -> None:
    """``--campaign`` and its options."""
    p.add_argument(
        "--campaign",
        action="store_true",
        help="every way around an audit (tessera.attack.campaign) for --rounds rounds (default 200) at the "
        "default stake on the in-memory ledger: realized profit per identity-round against honest, and the "
        "expected profit at the deployed q from measured parts; writes --out, a PNG beside it, the tables",
    )
    p.add_argument("--identities", type=int, default=1, help="--campaign: miners per strategy (default 1)")
    p.add_argument(
        "--strategy",
        action="append",
        default=None,
        metavar="NAME",
        help="--campaign: only these ways around an audit (repeatable; default: every one), e.g. 'lazy f=0.1'",
    )
    p.add_argument(
        "--audit-rate-bps",
        type=int,
        default=None,
        help="--campaign: the ledger's q in basis points (default: what contracts deploy sets for this "
        "network at the default stake; raise it to see many audits in a few hundred rounds)",
    )


def _model_arguments(p: argparse.ArgumentParser) -> None:
    """``--model`` and its options."""
    p.add_argument(
        "--model",
        action="store_true",
        help="print the expected-value table (audit rate q*, each strategy's gain and loss) and exit",
    )
    p.add_argument("--segments", type=int, default=3, help="--model: transcript segments per update")
    p.add_argument("--checked", type=int, default=2, help="--model: segments each validator replays")
    p.add_argument("--validators", type=int, default=2, help="--model: equal-stake validators")
    p.add_argument("--miners", type=int, default=4, help="--model: miners sharing the emission (default 4)")
    p.add_argument(
        "--compute-cost",
        type=float,
        default=None,
        help="--model: an honest round's compute in tokens (measured seconds x price; default: the reward)",
    )
    p.add_argument("--committee", type=int, default=None, help="--model: committee size c (default: run's)")
    p.add_argument("--vesting", type=int, default=None, help="--model: vesting rounds K (default: run's)")
    p.add_argument("--slash-bps", type=int, default=None, help="--model: slash fraction (default: run's)")
    p.add_argument("--stake", type=float, default=None, help="--model: miner stake in tokens (default: min)")


def _model(args: argparse.Namespace) -> int:
    """The expected-value table for the default run (``NetworkParams``' stake and emission, a
    run file's default audit section: committees of one) at the audit rate a deployment with that run
    file computes, then the older per-segment detection table."""
    from protocol.rounds import economics as ev
    from protocol.rounds.auditspec import AuditSpec
    from protocol.rounds.deployment import NetworkParams

    p, a = NetworkParams(), AuditSpec()
    reward = p.emission_per_round * (10_000 - p.validator_share_bps) / 10_000 / args.miners / 10**18
    run = ev.RunEconomics(
        stake=args.stake if args.stake is not None else p.min_miner_stake / 10**18,
        slash_fraction=(args.slash_bps if args.slash_bps is not None else p.slash_bps) / 10_000,
        reward=reward,
        compute_cost=args.compute_cost if args.compute_cost is not None else reward,
        vesting_rounds=args.vesting if args.vesting is not None else p.vesting_rounds,
        committee_size=args.committee if args.committee is not None else a.committee_size,
        validators=args.validators,
    )
    q_star = ev.audit_rate(run)
    q = ev.audit_rate_bps(run) / 10_000  # what `tessera contracts deploy --run-file` deploys (q >= q*)
    print(
        f"stake S {run.stake:g}, slash s {run.slash_fraction:.0%}, reward R {run.reward:g}/round, compute C "
        f"{run.compute_cost:g}/round, vesting K {run.vesting_rounds}, committee c {run.committee_size or 'all'} "
        f"of V {run.validators}"
    )
    print(
        f"L = sS + max(K,1)R = {run.loss_when_caught():g}; eta = {run.committee_catch():.3f}; "
        f"q* = 2 max(C,R) / (eta L) = {q_star:.4f}"
        + (
            ""
            if q_star <= 1
            else f" > 1: not deterred at this stake; min stake at q=1: {ev.min_stake(run):g}"
        )
    )
    print(f"at q = {q:.4f}:")
    print(f"{'strategy':28} {'gain':>9} {'loss':>9} {'margin':>7} {'E[profit]':>10}  caught by")
    for row in ev.strategy_rows(run, q):
        print(
            f"{row.name:28} {row.gain:9.2f} {row.loss:9.2f} {row.margin:7.2f} {row.expected_profit:10.2f}  "
            + row.how
        )
    print()
    from tessera.attack import economics as ec

    e = ec.Economy(reward=300.0, compute_cost=150.0, stake=run.stake, slash_fraction=0.1)
    rows = ec.strategy_table(
        n_segments=args.segments, m=args.checked, weights=[1] * args.validators, economy=e
    )
    print(f"reward {e.reward}, compute cost {e.compute_cost}, stake {e.stake}, slash {e.slash_fraction:.0%}")
    print(
        f"{'strategy':20} {'saved':>5} {'p_zero':>7} {'p_slash':>7} {'E[profit]':>10} {'advantage':>10} {'min stake':>10}"
    )
    for r in rows:
        ms = r["min_stake"]["advantage"]
        print(
            f"{r['name']:20} {r['saved']:5.2f} {r['p_zero']:7.3f} {r['p_slash']:7.3f} "
            f"{r['expected_profit']:10.2f} {r['advantage']:10.2f} {ms:10.1f}"
        )
    return 0


def _partial(args: argparse.Namespace) -> int:
    """Run the partial fakers (``tessera.attack.partial``), write ``--out``, print the tables."""
    from tessera.attack import partial

    logging.getLogger("miner").setLevel(logging.ERROR)
    logging.getLogger("validator").setLevel(logging.ERROR)
    doc = partial.run_partial(
        30 if args.rounds is None else args.rounds, progress=args.out.with_suffix(".partial.json")
    )
    doc["default"] = partial.measured_default(doc)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1))
    print(partial.markdown(doc))
    print(f"report: {args.out}")
    return 0


def _campaign(args: argparse.Namespace) -> int:
    """Run the campaign (``tessera.attack.campaign``), write ``--out`` and its PNG, print the table."""
    from tessera.attack import campaign, campaignreport
    from tessera.attack.errors import AttackError

    rounds = 200 if args.rounds is None else args.rounds
    if rounds < 1 or args.identities < 1:
        raise AttackError("--rounds and --identities must be at least 1")
    if args.audit_rate_bps is not None and not 0 < args.audit_rate_bps <= 10_000:
        raise AttackError("--audit-rate-bps must be in 1..10000")
    logging.getLogger("miner").setLevel(logging.ERROR)
    logging.getLogger("validator").setLevel(logging.ERROR)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    ways = campaign.STRATEGIES
    if args.strategy:
        known = {s.label: s for s in campaign.STRATEGIES}
        unknown = [n for n in args.strategy if n not in known]
        if unknown:
            raise AttackError(f"--strategy {unknown[0]!r}: choose from {sorted(known)}")
        ways = tuple(known[n] for n in args.strategy)
    doc = campaign.run_campaign(
        rounds,
        args.identities,
        args.audit_rate_bps,
        ways,
        progress=args.out.with_suffix(".progress.json"),
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    args.out.write_text(json.dumps(doc, indent=1))
    png = campaignreport.plot(doc, args.out.with_suffix(".png"))
    print(campaignreport.markdown(doc))
    print(f"report: {args.out}, plot: {png}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from tessera.attack.errors import AttackError
    from tessera.attack.scenarios import get, registry

    if args.list:
        for name, sc in registry().items():
            print(f"{name:22} {sc.kind:9} {sc.description}")
        return 0
    if args.model:
        return _model(args)
    if args.partial:
        return _partial(args)
    if args.campaign:
        return _campaign(args)
    if args.report:
        from tessera.attack import campaignreport, partial
        from tessera.attack.report import markdown, profit_markdown

        try:
            doc = json.loads(args.report.read_text())
            if "fakers" in doc:
                print(partial.markdown(doc))
            elif "strategies" in doc and "q_deployed" in doc:
                print(campaignreport.markdown(doc))
            else:
                print(markdown(doc) + "\n\n" + profit_markdown(doc))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise AttackError(
                f"{args.report} is not a report written by tessera attack --out: {exc}"
            ) from exc
        return 0
    rounds = 3 if args.rounds is None else args.rounds
    if args.quick:
        names, rounds = list(QUICK), 2
    elif args.all:
        names = [n for n in registry() if n != "baseline"]
    else:
        names = list(args.scenarios)
    if not names:
        raise AttackError("name scenarios, or pass --all, --quick or --list")
    for n in names:
        get(n)
    quiet = [logging.getLogger("miner"), logging.getLogger("validator")]
    levels = [lg.level for lg in quiet]
    for lg in quiet:  # the nodes' routine logs would bury the table; restored below for the caller
        lg.setLevel(logging.ERROR)
    try:
        return _run_scenarios(args, names, rounds)
    finally:
        for lg, level in zip(quiet, levels, strict=True):
            lg.setLevel(level)


def _run_scenarios(args: argparse.Namespace, names: list[str], rounds: int) -> int:
    """Run the scenarios and print the table; 1 if any check failed."""
    from tessera.attack.errors import AttackError
    from tessera.attack.report import table
    from tessera.attack.runner import run_suite

    def progress(res: Any) -> None:
        verdict = "ok" if all(res.checks.values()) else "FAIL"
        print(f"  {res.name}: {res.seconds:.0f}s {verdict}", file=sys.stderr, flush=True)

    label = (
        "anvil (fresh local chain + deployed contracts per scenario)"
        if args.chain == "anvil"
        else ("memory (IN-MEMORY LEDGER, not a real chain)")
    )
    print(f"chain: {label}", file=sys.stderr, flush=True)
    if args.jobs < 1:
        raise AttackError("--jobs must be at least 1")
    results = run_suite(names, rounds, out=args.out, progress=progress, chain=args.chain, jobs=args.jobs)
    print(f"chain: {label}")
    print(table(results))
    print(f"report: {args.out}")
    failed = [r.name for r in results if not all(r.checks.values())]
    if failed:
        print(json.dumps({"failed_checks": failed}))
    return 1 if failed else 0
