"""The audit scenarios of the attack suite: a fake one validator of three proves, the reverse attack, and
every way around an audit (withhold, hang or drip when audited, the update withheld, the
last-delta riders, partial fakers at f = 0.1 and 0.5), each beside an honest miner."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from miner.behaviour import Behaviour
from miner.node import MinerNode
from protocol.rounds.audits import REPORT_WINDOW_ROUNDS
from protocol.rounds.deployment import NetworkParams
from protocol.runspec import RunSpec
from tessera.attack.casting import (
    MINER_STAKE,
    VALIDATOR_STAKE,
    Scenario,
    adversary,
    honest,
    validator_factory,
)
from tessera.attack.dodgers import (
    DripWhenAudited,
    HangWhenAudited,
    LastDeltaHangWhenAudited,
    LastDeltaRider,
    WithholdWhenAudited,
    audited_reader,
)
from tessera.attack.harness import Participant
from tessera.attack.miners import (
    LazyMiner,
    Withholder,
)
from tessera.attack.validators import (
    FalseReporterValidator,
)


def audit_scenarios() -> list[Scenario]:
    """a fake that one validator of three proves, a miner that withholds when audited, and a
    validator that reports honest miners unanswered (the reverse attack)."""

    def withholder(cfg: Any, spec: Any, coord: Any, disc: Any) -> Any:
        def audited(round: int, miner: str) -> bool:
            return any(d.audited for d in coord.audit_draws(round, [miner]).values())

        return MinerNode(cfg, spec, coord, disc, behaviour=WithholdWhenAudited(audited))

    return [
        Scenario("fake-proven-by-one-of-three", "miner",
                 "fakes 1 of 3 segments; 3 validators replay one each: one proves it, two score it well",
                 lambda: [*honest(3, 3), adversary("lazy-33", LazyMiner(1 / 3, 3))], audit_checks="proven-by-one"),
        Scenario("withhold-when-audited", "miner", "honest, but refuses its states exactly when audited (q = 0.8)",
                 lambda: [*honest(), Participant("miner", "withhold-when-audited", MINER_STAKE, withholder)],
                 provable=False, audit_params={"audit_rate_bps": 8_000}, audit_checks="withhold-when-audited"),
        Scenario("false-unanswered-report", "validator",
                 "a validator (c = 1 of 2, q = 1) reports the honest miners it audits unanswered",
                 lambda: [*honest(1, 0), Participant("validator", "false-reporter", VALIDATOR_STAKE,
                                                      validator_factory(FalseReporterValidator)), *honest(0, 3)],
                 scores_dishonestly=False, audit_params={"audit_rate_bps": 10_000, "committee_size": 1},
                 audit_checks="false-unanswered-report", timeout_s=2_400.0, min_rounds=REPORT_WINDOW_ROUNDS + 2),
    ]  # fmt: skip


def when_audited(make: Callable[[RunSpec, Callable[[int, str], bool]], Behaviour]) -> Callable[..., Any]:
    """A miner factory whose behaviour ``make(spec, audited)`` reads the chain's audit draw."""

    def factory(cfg: Any, spec: Any, coord: Any, disc: Any) -> Any:
        return MinerNode(cfg, spec, coord, disc, behaviour=make(spec, audited_reader(coord)))

    return factory


AROUND_Q_BPS = 8_000
"""The audit rate of the ways around an audit (q = 0.8, as ``withhold-when-audited``): most rounds
audited, a few not, in a 3-round run."""
AROUND_SLASH_BPS = NetworkParams().slash_bps
"""The deployment's slash (50%) for the ways around an audit."""
SUITE_REWARD = 1000 * (10_000 - 1000) / 10_000 / 4
"""An honest miner's pay per round in the suite's network (the harness's emission of 1,000 tokens, 10% to
validators, 4 miners)."""
AROUND_STAKE = round(
    NetworkParams().min_miner_stake
    / 10**18
    * SUITE_REWARD
    / (
        NetworkParams().emission_per_round
        / 10**18
        * (10_000 - NetworkParams().validator_share_bps)
        / 10_000
        / 4
    )
)
"""The cheater's stake in the ways around an audit: the default deployment's stake in rounds of pay
(350,000 tokens against 200 a round) at the suite's pay, 393,750 tokens. At the suite's older stake of 100
and slash of 10% a caught miner lost about K rounds of pay, a network the formula would not deploy at
q = 0.8 (margin 1.6): one draw of 1 audit in 4 cheating rounds (about 3% likely, and the same every run,
the seeds coming from the validators' keys) let the last-delta rider that hangs come out ahead."""
RIDER_FROM = 3
"""First round the last-delta riders surely ride: they train their first round honestly (no theta_{r-1}
yet), round 1 on the in-memory chain and round 2 on anvil (round 1 is the join round)."""
PARTIAL_STEPS = 10
"""Inner steps (one transcript segment each) of the partial fakers' scenarios: f = 0.1 fakes one step."""


def _segment_per_step(spec: RunSpec) -> RunSpec:
    """The suite's run with :data:`PARTIAL_STEPS` inner steps and a transcript state after each."""
    return replace(spec, inner=replace(spec.inner, steps=PARTIAL_STEPS, transcript_interval=1))


def ways_around_an_audit() -> list[Scenario]:
    """every way around an audit, each beside an honest miner with its realized profit against
    the honest one's and the model's expected profit (``tessera.attack.auditchecks.profit_vs_honest``).
    ``withhold-when-audited`` (above) is the update served but not the states."""
    q = {"audit_rate_bps": AROUND_Q_BPS, "slash_bps": AROUND_SLASH_BPS}

    def way(
        label: str, make: Callable[[RunSpec, Callable[[int, str], bool]], Behaviour]
    ) -> Callable[[], list[Participant]]:
        return lambda: [*honest(), Participant("miner", label, AROUND_STAKE, when_audited(make))]

    def lazy(f: float) -> Callable[[], list[Participant]]:
        return lambda: [
            *honest(),
            adversary(f"lazy f={f:g}", LazyMiner(f, PARTIAL_STEPS), stake=AROUND_STAKE),
        ]

    return [
        Scenario("hang-when-audited", "miner", "honest, but its states hang (no answer in any window) when audited (q = 0.8)",
                 way("hang-when-audited", lambda spec, audited: HangWhenAudited(audited)),
                 provable=False, audit_params=q, audit_checks="caught-when-audited"),
        Scenario("drip-when-audited", "miner", "honest, but serves its states 25 s late when audited (q = 0.8)",
                 way("drip-when-audited", lambda spec, audited: DripWhenAudited(audited)),
                 provable=False, audit_params=q, audit_checks="caught-when-audited"),
        Scenario("withholder-audited", "miner",
                 "commits, never serves its update (q = 0.8): the update withheld from its committee is unanswered",
                 lambda: [*honest(), adversary("withholder", Withholder(), stake=AROUND_STAKE)],
                 provable=False, audit_params=q, audit_checks="caught-when-audited"),
        Scenario("free-rider-last-delta", "miner",
                 "trains nothing: each step adds (theta_r - theta_{r-1}) / H, transcript consistent (q = 0.8)",
                 way("free-rider-last-delta", lambda spec, audited: LastDeltaRider(spec)), cheat_from=RIDER_FROM,
                 audit_params=q, audit_checks="caught-when-audited"),
        Scenario("free-rider-last-delta-hang", "miner",
                 "the last-delta rider that also hangs when audited (q = 0.8)",
                 way("free-rider-last-delta-hang", lambda spec, audited: LastDeltaHangWhenAudited(spec, audited)),
                 cheat_from=RIDER_FROM, provable=False, audit_params=q, audit_checks="caught-when-audited"),
        Scenario("lazy-10", "miner", f"fakes 1 of {PARTIAL_STEPS} steps (f = 0.1; q = 0.8, one step replayed an audit)",
                 lazy(0.1), audit_params=q, audit_checks="partial-faker", adapt_spec=_segment_per_step),
        Scenario("lazy-50", "miner", f"fakes 5 of {PARTIAL_STEPS} steps (f = 0.5; q = 0.8, one step replayed an audit)",
                 lazy(0.5), audit_params=q, audit_checks="partial-faker", adapt_spec=_segment_per_step),
    ]  # fmt: skip
