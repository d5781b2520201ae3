"""``tessera bench chain``: gas figures of the settlement contracts on a local anvil (--hardfork prague).

Measures, on one deployment with up to 256 miners and 16 scoring validators (plus extra registered
validators for the certificate curve):

* gas per miner per round: ``commitUpdate`` + ``claim`` (separate transactions) and ``commitAndClaim``;
* ``finalize`` and the total gas of a round for 16 / 64 / 256 committed miners and 16 validators;
* checkpoint certificates: BLS aggregate (``certifyCheckpoint``) vs one ECDSA signature per validator
  (``certifyCheckpointEcdsa``) for growing numbers of signers.

Prints a table and writes JSON (default ``reports/bench-chain.json``). Run with ``tessera bench chain``
or ``python -m benchmarks.chain [--miners 16,64,256] [--validators 16] [--cert-validators 32]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eth_account import Account
from web3 import Web3

from protocol.chain import Chain, deploy_network
from protocol.rounds.anvil import Anvil
from protocol.rounds.deployment import Deployment, NetworkParams
from protocol.wire.bls import BlsKeyPair

DEFAULT_OUT = Path("reports/bench-chain.json")


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="tessera bench chain", description=__doc__.splitlines()[0])
    p.add_argument("--miners", default="16,64,256", help="comma-separated committed-miner counts per round")
    p.add_argument("--validators", type=int, default=16, help="validators that score each round")
    p.add_argument(
        "--cert-validators", type=int, default=32, help="registered validators for the certificate curve"
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON output file")
    return p.parse_args(list(argv))


def _args_from(args: Any) -> argparse.Namespace:
    if args is None:
        return _parse(sys.argv[1:])
    if isinstance(args, (list, tuple)):
        return _parse(args)
    extra = [a for a in (getattr(args, "extra", None) or []) if a != "--"]
    ns = _parse(extra)
    out = getattr(args, "out", None)
    if out and "--out" not in extra:
        o = Path(out)
        ns.out = o if o.suffix == ".json" else o / "bench-chain.json"
    return ns


def run(ns: argparse.Namespace) -> dict[str, Any]:
    """Runs the measurements and returns the figures."""
    sizes = [int(x) for x in ns.miners.split(",") if x]
    n_val = ns.validators
    n_cert = max(ns.cert_validators, n_val)
    t0 = time.monotonic()
    with Anvil(accounts=1) as node:
        b = _Bench(node, _params(max(sizes), n_cert))
        b.register(max(sizes), n_cert, n_val)
        results: dict[str, Any] = {"rounds": [], "per_miner": {}, "certificates": []}
        claim_gas: list[int] = []
        commit_gas: list[int] = []
        # pay vests K rounds after its round: K warm-up rounds, so that every claim measured
        # below finds vested pay (the steady state of a miner that mines every round)
        for _ in range(b.params.vesting_rounds):
            print("warm-up round (vesting) ...", file=sys.stderr)
            b.play_round(b.miners[: max(sizes)], use_commit_and_claim=False)
        for n in sizes:
            print(f"round with {n} miners / {n_val} validators ...", file=sys.stderr)
            results["rounds"].append(_size_round(b, n, n_cert, claim_gas, commit_gas))
        results["per_miner"] = _per_miner(b, min(sizes), commit_gas, claim_gas)
        results["validator_registration_gas_mean"] = round(statistics.mean(b.reg_gas))
        results["certificates"] = _certificates(b, n_cert)
        results["wall_seconds"] = round(time.monotonic() - t0, 1)
        results["anvil"] = {"hardfork": "prague", "block_gas_limit": 30_000_000}
    return results


def _params(n_miners: int, n_cert: int) -> Any:
    """Phase windows long enough for every miner's and validator's transactions of a round."""
    return NetworkParams(
        commit_blocks=n_miners + 2 * n_cert + 8,
        reveal_blocks=n_cert + 4,
        score_commit_blocks=n_cert + 4,
        score_reveal_blocks=n_cert + 4,
        pool_supply=10**9 * 10**18,
        genesis_supply=10**10 * 10**18,
    )


class _Bench:
    """One deployment on a local anvil: the owner, a reader, the registered miners and validators, and
    the round driving the measurements share."""

    def __init__(self, node: Any, params: Any) -> None:
        self.w3 = Web3(Web3.HTTPProvider(node.rpc_url, request_kwargs={"timeout": 120}))
        self.params = params
        boss_acct = self.new_acct()
        network, token, block, tx = deploy_network(self.w3, boss_acct, params)
        self.dep = Deployment(
            node.chain_id, network, token, block, boss_acct.address, params, node.rpc_url, {"network": tx}
        )
        self.boss = Chain(self.w3, self.dep, boss_acct)
        self.reader = Chain(self.w3, self.dep)
        self.miners: list[Any] = []
        self.validators: list[Any] = []
        self.keys: list[Any] = []
        self.reg_gas: list[int] = []
        self.scorers: list[Any] = []

    def new_acct(self) -> Any:
        """A fresh funded account."""
        a = Account.create()
        self.w3.provider.make_request("anvil_setBalance", [a.address, hex(10**22)])  # type: ignore[arg-type]
        return a

    def mine(self, n: int) -> None:
        """Mine ``n`` empty blocks."""
        self.w3.provider.make_request("anvil_mine", [hex(max(n, 0))])  # type: ignore[arg-type]

    def past_deadline(self) -> None:
        """Mine past the current phase's deadline."""
        st = self.reader.round_state()
        self.mine(st.deadline - self.w3.eth.block_number + 1)

    def register(self, n_miners: int, n_cert: int, n_val: int) -> None:
        """Register ``n_miners`` miners and ``n_cert`` validators (validator 0 staked as a quorum alone);
        the first ``n_val`` validators score."""
        print(f"registering {n_miners} miners and {n_cert} validators ...", file=sys.stderr)
        params = self.params
        for _ in range(n_miners):
            a = self.new_acct()
            self.boss.transfer(a.address, params.min_miner_stake * 10)
            c = Chain(self.w3, self.dep, a)
            c.register_miner(params.min_miner_stake)
            self.miners.append(c)
        for i in range(n_cert):
            a = self.new_acct()
            stake = params.min_validator_stake * (10 * n_cert if i == 0 else 1)  # v0 alone is a quorum
            self.boss.transfer(a.address, stake)
            k = BlsKeyPair.generate(i.to_bytes(32, "big"))
            c = Chain(self.w3, self.dep, a)
            self.reg_gas.append(c.register_validator(stake, k).gas_used)
            self.validators.append(c)
            self.keys.append(k)
        self.scorers = self.validators[:n_val]

    def finish_empty_round(self) -> int:
        """Advance the current round to its end and finalize it; the next round's number."""
        st = self.reader.round_state()
        while st.phase != 4:
            self.past_deadline()
            self.boss.advance()
            st = self.reader.round_state()
        self.boss.finalize_round(st.round)
        return st.round + 1

    def play_round(self, committers: list[Any], use_commit_and_claim: bool) -> dict[str, Any]:
        """One whole round with ``committers`` committing and every scorer scoring; the gas of each kind
        of transaction."""
        r = self.finish_empty_round()
        gas: dict[str, list[int]] = {k: [] for k in ("commit", "seed", "advance", "scores", "finalize")}
        for i, m in enumerate(committers):
            d = (r * 100_000 + i).to_bytes(32, "big")
            res = m.commit_and_claim(r, d) if use_commit_and_claim else m.commit_update(r, d)
            gas["commit"].append(res.gas_used)
        scorers = self.scorers
        secrets_ = [bytes([7]) * 31 + bytes([i]) for i in range(len(scorers))]
        for v, s in zip(scorers, secrets_, strict=True):
            gas["seed"].append(v.commit_seed(r, s).gas_used)
        gas["advance"].append(self.next_phase())
        for v, s in zip(scorers, secrets_, strict=True):
            gas["seed"].append(v.reveal_seed(r, s).gas_used)
        gas["advance"].append(self.next_phase())
        n = len(committers)
        vecs = [[1000 + (i * 37 + j * 11) % 9000 for j in range(n)] for i in range(len(scorers))]
        for v, vec in zip(scorers, vecs, strict=True):
            gas["scores"].append(v.commit_scores(r, vec, b"\x01" * 32).gas_used)
        gas["advance"].append(self.next_phase())
        for v, vec in zip(scorers, vecs, strict=True):
            gas["scores"].append(v.reveal_scores(r, vec, b"\x01" * 32).gas_used)
        self.past_deadline()
        gas["finalize"].append(self.boss.finalize_round(r).gas_used)
        return {"round": r, "gas": gas}

    def next_phase(self) -> int:
        """Mine past the deadline and advance the phase; the advance's gas."""
        self.past_deadline()
        return int(self.boss.advance().gas_used)


def _size_round(
    b: _Bench, n: int, n_cert: int, claim_gas: list[int], commit_gas: list[int]
) -> dict[str, Any]:
    """A round with ``n`` committed miners, each claiming after it (separate transactions): the row of
    the round table; the commit and claim gas are added to ``commit_gas`` and ``claim_gas``."""
    rr = b.play_round(b.miners[:n], use_commit_and_claim=False)
    claims = [m.claim().gas_used for m in b.miners[:n]]
    claim_gas += claims
    commit_gas += rr["gas"]["commit"]
    g = rr["gas"]
    total = sum(sum(v) for v in g.values()) + sum(claims)
    return {
        "miners": n,
        "validators": len(b.scorers),
        "registered_validators": n_cert,
        "commit_gas_mean": round(statistics.mean(g["commit"])),
        "claim_gas_mean": round(statistics.mean(claims)),
        "validator_gas_total": sum(g["seed"]) + sum(g["scores"]),
        "score_reveal_gas_max": max(g["scores"]),
        "advance_gas_total": sum(g["advance"]),
        "finalize_gas": g["finalize"][0],
        "total_round_gas": total,
        "total_round_gas_per_miner": round(total / n),
    }


def _per_miner(b: _Bench, n: int, commit_gas: list[int], claim_gas: list[int]) -> dict[str, Any]:
    """Per-miner gas: commit and claim as separate transactions against ``commitAndClaim``, measured on
    ``n`` miners that are owed a reward from the previous round."""
    print("commitAndClaim round ...", file=sys.stderr)
    cc_miners = b.miners[:n]
    b.play_round(cc_miners, use_commit_and_claim=False)
    cac = b.play_round(cc_miners, use_commit_and_claim=True)["gas"]["commit"]
    return {
        "commitUpdate_mean": round(statistics.mean(commit_gas)),
        "claim_mean": round(statistics.mean(claim_gas)),
        "commit_plus_claim_separate": round(statistics.mean(commit_gas) + statistics.mean(claim_gas)),
        "commitAndClaim_mean": round(statistics.mean(cac)),
        "commitAndClaim_max": max(cac),
        "budget": 60_000,
    }


def _certificates(b: _Bench, n_cert: int) -> list[dict[str, Any]]:
    """BLS aggregate against per-signer ECDSA certificate gas (estimated on the same state) for growing
    numbers of signers (validator 0 always among them); then a real BLS certificate with everyone
    signing, as a check."""
    print("certificate curve ...", file=sys.stderr)
    boss, validators = b.boss, b.validators
    last_round = b.reader.round_state().round - 1
    digest = b"\x5a" * 32
    msg = b.reader.checkpoint_message(last_round, digest)
    bls_sigs = {v.address: k.sign(msg) for v, k in zip(validators, b.keys, strict=True)}
    ecdsa_sigs = {v.address: v.sign_checkpoint_ecdsa(v.account, last_round, digest) for v in validators}
    rows = []
    for k in sorted({1, 2, 4, 8, 12, 16, 20, 24, 28, 32, n_cert} & set(range(1, n_cert + 1))):
        chosen = validators[:k]
        bitmap, sig = boss.bls_certificate_args({v.address: bls_sigs[v.address] for v in chosen})
        bls_gas = boss.estimate("certifyCheckpoint", last_round, digest, bitmap, sig)
        ordered = [ecdsa_sigs[a] for a in sorted((v.address for v in chosen), key=lambda a: int(a, 16))]
        ecdsa_gas = boss.estimate("certifyCheckpointEcdsa", last_round, digest, ordered)
        rows.append(
            {
                "registered": n_cert,
                "signers": k,
                "non_signers": n_cert - k,
                "bls_gas": bls_gas,
                "ecdsa_gas": ecdsa_gas,
            }
        )
    boss.certify_checkpoint(last_round, digest, bls_sigs)
    return rows


def render(res: dict[str, Any]) -> str:
    """The figures as a Markdown table."""
    pm = res["per_miner"]
    lines = [
        "| per miner per round | gas |",
        "|---|---:|",
        f"| commitUpdate | {pm['commitUpdate_mean']:,} |",
        f"| claim (separate tx) | {pm['claim_mean']:,} |",
        f"| commit + claim, separate txs | {pm['commit_plus_claim_separate']:,} |",
        f"| commitAndClaim (one tx) | {pm['commitAndClaim_mean']:,} (max {pm['commitAndClaim_max']:,}) |",
        "",
        "| miners | validators | finalize | validator txs (all) | total round gas | per miner |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res["rounds"]:
        lines.append(
            f"| {r['miners']} | {r['validators']} | {r['finalize_gas']:,} | {r['validator_gas_total']:,} | "
            f"{r['total_round_gas']:,} | {r['total_round_gas_per_miner']:,} |"
        )
    lines += [
        "",
        "| signers (of registered) | BLS aggregate | ECDSA per signer | cheaper |",
        "|---:|---:|---:|---|",
    ]
    for c in res["certificates"]:
        cheaper = "BLS" if c["bls_gas"] < c["ecdsa_gas"] else "ECDSA"
        lines.append(
            f"| {c['signers']} / {c['registered']} | {c['bls_gas']:,} | {c['ecdsa_gas']:,} | {cheaper} |"
        )
    return "\n".join(lines)


def main(args: Any = None) -> int:
    """Entry point for ``tessera bench chain`` (an argparse namespace) and ``python -m benchmarks.chain``."""
    ns = _args_from(args)
    res = run(ns)
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(json.dumps(res, indent=2) + "\n")
    print(render(res))
    print(f"\nwrote {ns.out} ({res['wall_seconds']} s)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
