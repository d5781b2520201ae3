"""``tessera contracts build|deploy``: compile the Foundry project and deploy a Tessera run.

``deploy`` is resumable: every completed step is written to the deployment file at once (atomically), and a
re-run skips each step whose result is already on chain. A run whose file is complete and whose contracts
exist leaves the file untouched. Keys come from an encrypted keystore (``--keystore``; password from
``$TESSERA_KEYSTORE_PASSWORD`` or a prompt) or a named environment variable (``--key-env``), never from a
plain file.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from eth_utils import to_checksum_address

from protocol.rounds.deployment import Deployment, DeploymentError, NetworkParams
from protocol.wire.keys import load_account
from tessera.errors import TesseraError

CONTRACTS_DIR = Path(__file__).resolve().parents[2] / "contracts"


def register(subparsers: Any) -> None:
    """Add ``tessera contracts``."""
    parser = subparsers.add_parser("contracts", help="build and deploy the settlement contracts")
    sub = parser.add_subparsers(dest="contracts_command", metavar="ACTION")

    b = sub.add_parser(
        "build", help="forge build + export protocol/contracts.json (needs `npm ci` in contracts/)"
    )
    b.set_defaults(handler=_build)

    d = sub.add_parser("deploy", help="deploy TesseraNetwork (and its token) and write the deployment file")
    d.add_argument("--rpc-url", required=True, help="JSON-RPC endpoint, e.g. http://127.0.0.1:8545")
    key = d.add_mutually_exclusive_group(required=True)
    key.add_argument("--keystore", type=Path, help="encrypted keystore JSON of the deployer")
    key.add_argument(
        "--key-env", help="name of an environment variable holding the deployer's 0x private key"
    )
    d.add_argument(
        "--password-env", default="TESSERA_KEYSTORE_PASSWORD", help="variable with the keystore password"
    )
    d.add_argument("--out", type=Path, default=Path("deployment.json"), help="deployment file to write")
    d.add_argument(
        "--run-file",
        type=Path,
        help="the run's run.json (`tessera runspec init`): its theta_0 digest becomes the genesis checkpoint, "
        "its audits section the audit rate (from the deterrence formula), committee, vesting and slash",
    )
    d.add_argument(
        "--audit-every-update",
        action="store_true",
        help="deploy q = 1 with every validator on each committee where the run file has no audits section "
        "(also: --audit-rate-bps 10000 --committee-size 0): every validator fetches every miner's "
        "transcript states every round",
    )
    d.add_argument(
        "--params", type=Path, help="JSON object of NetworkParams fields (overridden by flags below)"
    )
    for f in fields(NetworkParams):
        flag = "--" + f.name.replace("_", "-")
        typ = str if f.name == "genesis_checkpoint" else int
        d.add_argument(flag, type=typ, default=None, help=f"NetworkParams.{f.name} (default {f.default})")
    d.add_argument(
        "--fund",
        action="append",
        default=[],
        metavar="ADDR=WEI",
        help="after deploying, transfer WEI tokens from the genesis allocation to ADDR (repeatable; skipped "
        "if ADDR already holds at least WEI)",
    )
    d.set_defaults(handler=_deploy)
    parser.set_defaults(handler=lambda args: (parser.print_help(), 1)[1])


def _build(args: argparse.Namespace) -> int:
    if not (CONTRACTS_DIR / "node_modules").is_dir():
        raise TesseraError(f"{CONTRACTS_DIR}/node_modules missing: run `cd contracts && npm ci`")
    r = subprocess.run(["npm", "run", "--silent", "build"], cwd=CONTRACTS_DIR, check=False)
    return 0 if r.returncode == 0 else 2


def _params(args: argparse.Namespace) -> Any:
    values: dict[str, Any] = {}
    if args.params:
        try:
            loaded = json.loads(args.params.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise DeploymentError(f"cannot read --params {args.params}: {exc}") from exc
        if not isinstance(loaded, dict):
            raise DeploymentError("--params must hold a JSON object")
        values.update(loaded)
    for f in fields(NetworkParams):
        v = getattr(args, f.name)
        if v is not None:
            values[f.name] = v
    try:
        params = _with_audits(NetworkParams(**values), args)
    except TypeError as exc:
        raise DeploymentError(f"bad parameters: {exc}") from exc
    params.validate()
    params = _with_genesis(params, getattr(args, "run_file", None))
    _check_audits(params, args)
    return params


def _asked_every_update(args: argparse.Namespace) -> bool:
    """Whether the command line asks for q = 1 with every validator on each committee: the flag, or both
    ``--audit-rate-bps 10000`` and ``--committee-size 0`` given (in flags or ``--params``)."""
    if args.audit_every_update:
        return True
    given: dict[str, Any] = {}
    if args.params:
        loaded = json.loads(args.params.read_text())  # read and checked by _params already
        given |= {k: loaded[k] for k in ("audit_rate_bps", "committee_size") if k in loaded}
    given |= {
        k: getattr(args, k) for k in ("audit_rate_bps", "committee_size") if getattr(args, k) is not None
    }
    return given.get("audit_rate_bps") == 10_000 and given.get("committee_size") == 0


def _check_audits(params: Any, args: argparse.Namespace) -> None:
    """Print the deployment's q, committee and expected audit traffic (stderr); refuse a deployment where
    every validator audits every update unless ``--audit-every-update`` says so, with what it costs."""
    from protocol.rounds.auditspec import AuditSpec, audit_traffic

    run_file = getattr(args, "run_file", None)
    traffic, plan = None, AuditSpec()
    if run_file is not None:
        from protocol.runspec import RunSpec
        from training.presets import trained_params_per_miner

        spec = RunSpec.load(run_file)
        plan = spec.audits or plan
        trained, _ = trained_params_per_miner(spec.model, spec.experts_per_miner)
        traffic = audit_traffic(
            params.audit_rate_bps, params.committee_size, plan.miners, plan.validators, trained
        )
    committee = "every validator" if params.committee_size == 0 else f"{params.committee_size} validator(s)"
    print(
        f"audits: q = {params.audit_rate_bps / 100:g}% of (miner, round) pairs, committees of {committee} "
        f"(planned network: {plan.miners} miners, {plan.validators} validators)"
        + (f"; {traffic.describe()}" if traffic is not None else ""),
        file=sys.stderr,
    )
    if params.audit_rate_bps == 10_000 and params.committee_size == 0 and not _asked_every_update(args):
        cost = "" if traffic is None else f" ({traffic.describe()})"
        raise DeploymentError(
            "this deployment audits every update by every validator: each validator fetches every miner's "
            f"transcript states every round{cost}. Give the run file an audits section (`tessera runspec "
            "init` writes one; q then follows from the stake) or pass --audit-every-update to deploy it so"
        )


def _with_audits(params: Any, args: argparse.Namespace) -> Any:
    """``params`` with the run file's audit section: q from the deterrence formula at these
    stakes and emission, and the run's c, K and slash; a flag given on the command line wins."""
    run_file = getattr(args, "run_file", None)
    if run_file is None:
        return params
    from protocol.runspec import RunSpec

    audits = RunSpec.load(run_file).audits
    if audits is None:
        return params
    # c, K or the slash given as flags are the formula's inputs too; q given as a flag is taken as is
    given = {k: getattr(args, k, None) for k in ("committee_size", "vesting_rounds", "slash_bps")}
    audits = replace(audits, **{k: v for k, v in given.items() if v is not None})
    derived = audits.network_params(
        params.min_miner_stake, params.emission_per_round, params.validator_share_bps
    )
    return replace(params, **{k: v for k, v in derived.items() if getattr(args, k, None) is None})


ZERO_GENESIS = "0x" + "00" * 32


def _with_genesis(params: Any, run_file: Path | None) -> Any:
    """``params`` with the genesis checkpoint of ``run_file``; a zero genesis is refused: no node can start
    round 1 from it (validators wait for a certificate and miners for a checkpoint, silently)."""
    if run_file is not None:
        from protocol.runspec import RunSpec

        genesis = RunSpec.load(run_file).genesis_digest()
        if params.genesis_checkpoint not in (ZERO_GENESIS, genesis):
            raise DeploymentError(
                f"--genesis-checkpoint {params.genesis_checkpoint} differs from {run_file}'s theta_0 ({genesis})"
            )
        params = replace(params, genesis_checkpoint=genesis)
    if params.genesis_checkpoint == ZERO_GENESIS:
        raise DeploymentError(
            "refusing to deploy with genesis checkpoint 0x00: pass --run-file run.json (its theta_0 digest) "
            "or --genesis-checkpoint 0x<64 hex>; nodes cannot start round 1 without it"
        )
    return params


def _check_score_commit_window(w3: Any, params: Any) -> None:
    """Refuse a score-commit window that cannot hold an audit at the chain's block time (measured from its
    last blocks; nothing is checked where it cannot be: fewer than 3 blocks, or blocks that come with
    transactions). A validator verifies the miners it audits first, with the serving window plus
    ``AUDIT_CHECK_S``; a fetch its deadline cuts shorter is its own fault and is not reported, so below
    that a miner that hangs when audited is never reported."""
    from protocol.chain.transport import retrying
    from protocol.node.settings import NodeConfig
    from protocol.rounds.deployment import DeploymentError
    from validator.roundschedule import AUDIT_CHECK_S
    from validator.schedule import RETRY_MARGIN_BLOCKS

    try:  # anvil's automine mines a block per transaction: its timestamps say nothing of a block time
        if w3.provider.make_request("anvil_getAutomine", []).get("result") is True:
            return
    except Exception:  # a public chain has no such method: it mines on an interval
        pass
    latest = int(retrying(lambda: w3.eth.block_number, "eth_blockNumber"))
    if latest < 3:
        return
    back = min(10, latest - 1)

    def stamp(n: int) -> int:
        return int(retrying(lambda: w3.eth.get_block(n), "eth_getBlockByNumber")["timestamp"])

    spacing = (stamp(latest) - stamp(latest - back)) / back
    if spacing < 0.5:
        return  # blocks come with transactions (automine): windows are not time
    need = NodeConfig().fetch_timeout + AUDIT_CHECK_S
    usable = (params.score_commit_blocks - RETRY_MARGIN_BLOCKS) * spacing
    print(
        f"score commit: {params.score_commit_blocks} blocks at {spacing:g}-s blocks leave {usable:g} s to "
        f"verify; an audit needs {need:g} s",
        file=sys.stderr,
    )
    if usable < need:
        least = RETRY_MARGIN_BLOCKS + math.ceil(need / spacing)
        raise DeploymentError(
            f"--score-commit-blocks {params.score_commit_blocks} at this chain's {spacing:g}-s blocks leaves "
            f"{usable:g} s after the validators' {RETRY_MARGIN_BLOCKS}-block margin, less than an audit's "
            f"{need:g} s (the fetch timeout {NodeConfig().fetch_timeout:g} s + {AUDIT_CHECK_S:g} s of checks): "
            "a miner that hangs when audited would be cut off by the validator's own deadline and never "
            f"reported. Give at least {least} blocks (docs/deploy.md, Sizing the phase windows)"
        )


def _deploy(args: argparse.Namespace) -> int:
    from protocol.chain import Chain, deploy_network
    from protocol.chain.endpoint import http_web3
    from protocol.chain.transport import check_rpc_url, retrying

    rpc_url = check_rpc_url(args.rpc_url)  # a URL without a scheme: one line at once, not a traceback
    params = _params(args)
    account = load_account(keystore=args.keystore, key_env=args.key_env, password_env=args.password_env)
    w3 = http_web3(rpc_url, 60)
    chain_id = retrying(lambda: int(w3.eth.chain_id), "eth_chainId")

    existing = _existing_deployment(args, w3, chain_id, params)
    if existing is None:
        _check_score_commit_window(w3, params)
        network, token, block, tx = deploy_network(w3, account, params)
        existing = Deployment(
            chain_id=chain_id,
            network=network,
            token=token,
            block=block,
            deployer=account.address,
            params=params,
            rpc_url=args.rpc_url,
            tx={"network": tx},
        )
        existing.save(args.out)
        print(f"deployed TesseraNetwork at {network} (token {token}) in block {block}", file=sys.stderr)
    else:
        print(f"TesseraNetwork already deployed at {existing.network}: skipped", file=sys.stderr)

    _fund(args, Chain(w3, existing, account), existing)
    print(args.out)
    return 0


def _existing_deployment(args: argparse.Namespace, w3: Any, chain_id: int, params: Any) -> Any:
    """The deployment in ``--out`` if there is one, checked against the chain (same chain id, code at its
    network address); None when there is no file yet."""
    from protocol.chain.transport import retrying

    if not args.out.exists():
        return None
    existing = Deployment.load(args.out)
    if existing.chain_id != chain_id:
        raise DeploymentError(
            f"{args.out} is for chain {existing.chain_id}, {args.rpc_url} is chain {chain_id}"
        )
    at = to_checksum_address(existing.network)
    code = retrying(lambda: w3.eth.get_code(at), "eth_getCode")
    if len(code) == 0:
        raise DeploymentError(
            f"{args.out} names network {at} but chain {chain_id} has no code there "
            "(a reset devnet?): move the file away to deploy afresh"
        )
    if existing.params != params:
        print(f"note: {args.out} exists; keeping its deployed parameters", file=sys.stderr)
    return existing


def _fund(args: argparse.Namespace, chain: Any, deployment: Any) -> None:
    """Sends each ``--fund ADDR=WEI`` not yet at its balance and records the transfers in ``--out``."""
    changed = False
    for item in args.fund:
        addr, _, wei = item.partition("=")
        try:
            target, amount = to_checksum_address(addr), int(wei)
        except ValueError as exc:
            raise DeploymentError(f"--fund expects ADDR=WEI, got {item!r}") from exc
        if chain.balance_of(target) >= amount:
            print(f"{target} already funded: skipped", file=sys.stderr)
            continue
        res = chain.transfer(target, amount)
        deployment = replace(deployment, tx={**deployment.tx, f"fund:{target}": res.tx_hash})
        changed = True
        print(f"funded {target} with {amount} wei", file=sys.stderr)
    if changed:
        deployment.save(args.out)
