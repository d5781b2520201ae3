"""The money checks every fault scenario ends with, one named function per promise (see
:mod:`tessera.devnet.faults`): nothing paid twice, payouts as settled, every honest participant paid,
the target paid when it completed the fault round, recovery within one round, nobody slashed, and a log
line saying what happened."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from protocol.rounds.audits import counted_matrix
from protocol.rounds.consensus import settle
from tessera.devnet.network import Devnet
from validator.stages import Stage

if TYPE_CHECKING:
    from tessera.devnet.faults.base import Scenario

Check = dict[str, Any]
"""One check's outcome: ``{"name", "ok", "detail"}`` (the report's format)."""


def make_check(name: str, ok: bool, detail: str = "") -> Check:
    """One check's outcome."""
    return {"name": name, "ok": bool(ok), "detail": detail}


@dataclass(frozen=True)
class Payouts:
    """The chain's finalizations and rewards, read once for all the checks."""

    names: dict[str, str]
    """Lower-case address -> node name."""
    finalized: Counter[int]
    """Round -> how many ``RoundFinalized`` events it has."""
    miner_paid: list[tuple[int, str, int, int]]
    """(round, lower-case miner, consensus score, amount) per ``MinerRewarded``."""
    validator_paid: list[tuple[int, str, int]]
    """(round, lower-case validator, amount) per ``ValidatorRewarded``."""

    def miner(self, round: int, a: str) -> int:
        """What miner ``a`` was paid for ``round``."""
        return sum(amt for rr, aa, _c, amt in self.miner_paid if rr == round and aa == a.lower())

    def validator(self, round: int, a: str) -> int:
        """What validator ``a`` was paid for ``round``."""
        return sum(amt for rr, aa, amt in self.validator_paid if rr == round and aa == a.lower())


def read_payouts(net: Devnet) -> Payouts:
    """The devnet chain's :class:`Payouts`."""
    chain = net.chain
    return Payouts(
        names={n.address.lower(): name for name, n in net.nodes.items()},
        finalized=Counter(int(e.round) for e in chain.events("RoundFinalized")),
        miner_paid=[
            (int(e.round), e.miner.lower(), int(e.consensus), int(e.amount))
            for e in chain.events("MinerRewarded")
        ],
        validator_paid=[
            (int(e.round), e.validator.lower(), int(e.amount)) for e in chain.events("ValidatorRewarded")
        ],
    )


def check_run(
    net: Devnet, sc: Scenario, fault_round: int, last_round: int, cheats: list[str] | None = None
) -> list[Check]:
    """Every check of one scenario (see the module docstring of :mod:`tessera.devnet.faults`); the
    ``cheats`` (node names) are not honest participants and are checked by the scenario."""
    paid = read_payouts(net)
    rounds = list(range(fault_round, last_round + 1))
    target = sc.target if sc.target != "anvil" else None
    checks = [
        nothing_paid_twice(net, paid),
        payouts_match_consensus(net, paid),
        honest_paid_every_round(net, paid, target, fault_round, rounds, cheats or []),
    ]
    if target is not None and target in net.nodes:
        checks.append(sc.target_check(net, paid, fault_round))
    checks.append(recovered_within_one_round(net, paid, target, fault_round))
    checks.append(nobody_slashed(net, paid, cheats or []))
    checks.append(logs_say_what_happened(net, sc))
    return checks


def nothing_paid_twice(net: Devnet, paid: Payouts) -> Check:
    """Each round finalized once, each participant paid once per round, and nobody claimed more than it
    earned."""
    names = paid.names
    twice = [f"round {r} finalized {c}x" for r, c in paid.finalized.items() if c > 1]
    for payees in ([x[:2] for x in paid.miner_paid], [y[:2] for y in paid.validator_paid]):
        twice += [
            f"{names.get(a, a)} paid {c}x in round {r}" for (r, a), c in Counter(payees).items() if c > 1
        ]
    earned: Counter[str] = Counter()
    for x in paid.miner_paid:
        earned[x[1]] += x[3]
    for y in paid.validator_paid:
        earned[y[1]] += y[2]
    claims = net.chain.events("Claimed")
    for e in claims:
        if (
            int(e.amount)
            and sum(int(c.amount) for c in claims if c.account == e.account) > earned[e.account.lower()]
        ):
            twice.append(f"{names.get(e.account.lower(), e.account)} claimed more than it earned")
    return make_check(
        "nothing_paid_twice",
        not twice,
        "; ".join(sorted(set(twice))) or "each round finalized once, each payout once, claims <= earnings",
    )


def payouts_match_consensus(net: Devnet, paid: Payouts) -> Check:
    """Every finalized round paid exactly what the contract's settlement of its revealed scores says
    (recomputed here with :func:`protocol.rounds.consensus.settle`)."""
    bps = net.chain.params().validator_share_bps
    bad: list[str] = []
    for r in sorted(paid.finalized):
        bad += _settlement_differences(net, paid, r, bps)
    return make_check(
        "payouts_match_consensus",
        not bad,
        "; ".join(bad) or f"rounds {sorted(paid.finalized)} settled exactly as the revealed scores say",
    )


def _settlement_differences(net: Devnet, paid: Payouts, round: int, bps: int) -> list[str]:
    """Where ``round``'s rewards differ from the settlement of its revealed scores, settled as the contract
    settles it (issue 26): an audited miner's median over its committee only, and the pay of a miner
    with a slash proposal on the round frozen (0 paid at its median) unless the proposal was rejected."""
    chain, names = net.chain, paid.names
    order = [e.miner for e in chain.committed_miners(round)]
    reveals = chain.revealed_scores(round)
    budget = next(int(e.budget) for e in chain.events("RoundFinalized", round=round))
    st = settle(
        [list(x.scores) for x in reveals],
        [x.weight for x in reveals],
        budget,
        bps,
        n_miners=len(order),
        counted=_committees(net, round, order, [x.validator for x in reveals]),
    )
    frozen = _frozen_miners(net, round)
    bad = []
    got_m = {a: (c, amt) for rr, a, c, amt in paid.miner_paid if rr == round}
    for m, med, pay in zip(order, st.medians, st.miner_pay, strict=True):
        c, amt = got_m.get(m.lower(), (0, 0))
        if m.lower() in frozen:
            pay = 0
        if (pay and (c, amt) != (med, pay)) or (not pay and amt):
            bad.append(
                f"round {round} {names.get(m.lower(), m)}: paid {amt} at consensus {c}, settlement says {pay} at {med}"
            )
    got_v = {a: amt for rr, a, amt in paid.validator_paid if rr == round}
    for x, pay in zip(reveals, st.validator_pay, strict=True):
        if got_v.get(x.validator.lower(), 0) != pay:
            bad.append(
                f"round {round} {names.get(x.validator.lower())}: paid {got_v.get(x.validator.lower(), 0)}, settlement says {pay}"
            )
    return bad


def _committees(net: Devnet, round: int, miners: list[str], revealers: list[str]) -> list[list[bool]] | None:
    """``settle``'s ``counted`` for ``round`` (None when every validator scores every miner), as
    ``protocol.chain.client.Chain.finalize_round`` computes it."""
    chain = net.chain
    p = chain.params()
    if not (p.audit_rate_bps and p.committee_size) or not miners:
        return None
    index = {v.lower(): i for i, v in enumerate(chain.validators())}
    return counted_matrix(chain.round_draws(round, miners), [index[v.lower()] for v in revealers])


def _frozen_miners(net: Devnet, round: int) -> set[str]:
    """Lower-case miners whose pay for ``round`` a slash proposal froze and no rejection released."""
    chain = net.chain
    rejected = {bytes(e.evidence) for e in chain.events("SlashRejected")}
    return {
        e.target.lower()
        for e in chain.events("SlashProposed")
        if int(e.round) == round and bytes(e.evidence) not in rejected
    }


def honest_paid_every_round(
    net: Devnet, paid: Payouts, target: str | None, fault_round: int, rounds: list[int], cheats: list[str]
) -> Check:
    """Every participant but the target (in the fault round) and the ``cheats`` committed or revealed,
    and was paid, in every round."""
    names = paid.names
    miners = sorted(n.address for n in net.nodes.values() if n.role == "miner")
    validators = sorted(n.address for n in net.nodes.values() if n.role == "validator")
    missing: list[str] = []
    for r in rounds:
        committed = {e.miner.lower() for e in net.chain.committed_miners(r)}
        revealed = {e.validator.lower() for e in net.chain.revealed_scores(r)}
        for addrs, took_part, do, done, pay in (
            (miners, committed, "commit", "committed", paid.miner),
            (validators, revealed, "reveal", "revealed", paid.validator),
        ):
            for a in addrs:
                name = names[a.lower()]
                if (name == target and r == fault_round) or name in cheats:
                    continue
                if a.lower() not in took_part:
                    missing.append(f"{name} did not {do} in round {r}")
                elif not pay(r, a):
                    missing.append(f"{name} {done} but was not paid in round {r}")
    return make_check(
        "honest_paid_every_round",
        not missing,
        "; ".join(missing) or f"every non-target participant paid in rounds {rounds}",
    )


def bad_peer_earned_nothing(net: Devnet, paid: Payouts, target: str, fault_round: int) -> Check:
    """The target, a peer that stalled or served corrupt bytes in the fault round, earned nothing for it."""
    amt = paid.miner(fault_round, net.nodes[target].address)
    return make_check("bad_peer_earned_nothing", amt == 0, f"{target} paid {amt} in round {fault_round}")


def target_paid_if_it_completed(net: Devnet, paid: Payouts, target: str, fault_round: int) -> Check:
    """The target node was paid for the fault round if it completed it (a miner's update fetched, a
    validator's scores revealed)."""
    tnode = net.nodes[target]
    a = tnode.address.lower()
    if tnode.role == "miner":
        committed = {e.miner.lower() for e in net.chain.committed_miners(fault_round)}
        fetched = _update_fetched(net, tnode.address, fault_round)
        completed = a in committed and fetched
        amt = paid.miner(fault_round, a)
        return make_check(
            "target_paid_if_it_completed",
            amt > 0 if completed else True,
            f"{target} {'completed' if completed else 'did not complete'} round {fault_round} "
            f"(committed: {a in committed}, update fetched: {fetched}); paid {amt}",
        )
    revealed = {e.validator.lower() for e in net.chain.revealed_scores(fault_round)}
    amt = paid.validator(fault_round, a)
    return make_check(
        "target_paid_if_it_completed",
        amt > 0 if a in revealed else True,
        f"{target} {'revealed' if a in revealed else 'did not reveal'} in round {fault_round}; paid {amt}",
    )


def _update_fetched(net: Devnet, address: str, round: int) -> bool:
    """Whether some validator got miner ``address``'s ``round`` update past the fetch and digest
    stages."""
    fetched = False
    for v in (n for n in net.nodes if n.startswith("validator")):
        vd = (net.get(v, f"/verdicts/{round}") or {}).get(address) or {}
        fetched |= bool(vd) and vd.get("stage") not in (Stage.COMMIT, Stage.FETCH, Stage.DIGEST)
    return fetched


def recovered_within_one_round(net: Devnet, paid: Payouts, target: str | None, fault_round: int) -> Check:
    """The round after the fault finalized once and its checkpoint certified, with the target (a node)
    in it and paid."""
    nxt = fault_round + 1
    certified = net.chain.checkpoint(nxt + 1) != b"\0" * 32
    ok = paid.finalized.get(nxt, 0) == 1 and certified
    detail = (
        f"round {nxt} finalized: {paid.finalized.get(nxt, 0) == 1}, theta_{nxt + 1} certified: {certified}"
    )
    tnode = net.nodes.get(target) if target else None
    if tnode is not None:
        amt = paid.miner(nxt, tnode.address) if tnode.role == "miner" else paid.validator(nxt, tnode.address)
        ok = ok and amt > 0
        detail += f", {target} paid {amt / 1e18:.2f} in round {nxt}"
    return make_check("recovered_within_one_round", ok, detail)


def nobody_slashed(net: Devnet, paid: Payouts, cheats: list[str] | None = None) -> Check:
    """No ``Slashed`` event, but against the scenario's ``cheats`` (node names): an audited cheat that does
    not answer its audit in time is slashed by design (issue 26, ``reportUnanswered``)."""
    slashed: list[str] = []
    cheats_slashed: list[str] = []
    for e in net.chain.events("Slashed"):
        name = paid.names.get(e.target.lower(), e.target)
        (cheats_slashed if name in (cheats or []) else slashed).append(f"{name} ({int(e.amount) / 1e18:.1f})")
    detail = ", ".join(slashed) or "no honest participant slashed"
    if cheats_slashed:
        detail += f"; cheats slashed: {', '.join(cheats_slashed)}"
    return make_check("nobody_slashed", not slashed, detail)


def logs_say_what_happened(net: Devnet, sc: Scenario) -> Check:
    """Each of the scenario's log patterns occurs in the log of a node it names (first hit quoted)."""
    found: list[str] = []
    lost: list[str] = []
    for who, pattern in sc.log_patterns:
        hits = []
        for name, n in sorted(net.nodes.items()):
            if not re.fullmatch(who.replace("*", ".*"), name):
                continue
            text = n.log_path.read_text(errors="replace") if n.log_path.exists() else ""
            m = re.search(pattern, text)
            if m:
                line = text[text.rfind("\n", 0, m.start()) + 1 : text.find("\n", m.start())]
                hits.append(f"{name}: {line.strip()[:160]}")
        (found if hits else lost).append(hits[0] if hits else f"{who}: no line matching /{pattern}/")
    return make_check("logs_say_what_happened", not lost, "; ".join(found + lost))
