"""``tessera account``: the money side of running a node (status, claim, unbond, withdraw).

Rewards are credited on-chain at ``finalize`` and stay there until the account pulls them (``claim``);
stake leaves in two steps, ``unbond`` (starts the unbonding delay) then ``withdraw`` (after it ends).
Every figure is read from the chain, in wei and in tokens (18 decimals). The key comes from an encrypted
``--keystore`` or ``--key-env NAME`` (a variable holding the 0x key), as for the nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from eth_utils import to_checksum_address

from protocol.rounds.deployment import Deployment
from protocol.wire.keys import load_account
from tessera.errors import TesseraError

WEI_PER_TOKEN = 10**18


def register(subparsers: Any) -> None:
    """Add ``tessera account``."""
    parser = subparsers.add_parser(
        "account",
        help="stake and rewards of a miner or validator: status, claim, unbond, withdraw",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="account_command", metavar="ACTION")
    actions = {
        "status": ("role, stake, rewards owed and claimed, token balance, unbonding (read-only)", _status),
        "claim": ("transfer the rewards owed to this account to its wallet", _claim),
        "unbond": ("start unbonding stake (--amount TOKENS or --all)", _unbond),
        "withdraw": ("withdraw stake whose unbonding delay has ended", _withdraw),
    }
    for name, (help_text, handler) in actions.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument(
            "--deployment", type=Path, default=Path("deployment.json"), help="deployment file of the run"
        )
        p.add_argument("--rpc-url", default=None, help="JSON-RPC endpoint (default: the deployment's)")
        key = p.add_mutually_exclusive_group(required=name != "status")
        key.add_argument("--keystore", type=Path, help="encrypted keystore JSON of the account")
        key.add_argument("--key-env", help="name of an environment variable holding the account's 0x key")
        p.add_argument(
            "--password-env", default="TESSERA_KEYSTORE_PASSWORD", help="variable with the keystore password"
        )
        if name == "status":
            p.add_argument("--address", help="account to show (default: the key's address)")
        if name == "unbond":
            amount = p.add_mutually_exclusive_group(required=True)
            amount.add_argument("--amount", help="tokens to unbond (decimal, e.g. 12.5)")
            amount.add_argument("--all", action="store_true", help="unbond the whole active stake")
        p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
        p.set_defaults(handler=handler)
    parser.set_defaults(handler=lambda args: (parser.print_help(), 1)[1])


def tokens(wei: int) -> str:
    """``wei`` as a decimal token amount without trailing zeros (``1500000000000000000`` -> ``1.5``)."""
    whole, frac = divmod(wei, WEI_PER_TOKEN)
    text = f"{whole}.{frac:018d}".rstrip("0").rstrip(".")
    return text


def parse_tokens(text: str) -> int:
    """A decimal token amount as wei; :class:`TesseraError` unless it is positive with <= 18 decimals."""
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise TesseraError(f"--amount {text!r} is not a number of tokens") from None
    wei = value * WEI_PER_TOKEN
    if not value.is_finite() or value <= 0 or wei != wei.to_integral_value():
        raise TesseraError(f"--amount {text!r} must be positive with at most 18 decimals")
    return int(wei)


def _connect(args: argparse.Namespace, need_key: bool) -> Any:
    from protocol.chain import Chain

    deployment = Deployment.load(args.deployment)
    account = None
    if args.keystore is not None and args.password_env not in os.environ and not sys.stdin.isatty():
        # getpass without a terminal reads stdin and ends in a traceback (EOFError) when there is none
        raise TesseraError(
            f"keystore {args.keystore} needs its password in ${args.password_env} (no terminal)"
        )
    if need_key or args.keystore is not None or args.key_env is not None:
        account = load_account(keystore=args.keystore, key_env=args.key_env, password_env=args.password_env)
    return Chain.connect(deployment, account, rpc_url=args.rpc_url)


def account_status(chain: Any, address: str) -> dict[str, Any]:
    """What the chain holds for ``address``: role, stake, owed rewards, rewards claimed so far, balance,
    unbonding (the same reads as a node's account figures, :func:`protocol.node.api.read_account`)."""
    from protocol.node.account import claimed_between, read_account

    out = read_account(chain, address)
    del out["last_commit_round"]
    out["claimed_wei"] = claimed_between(chain, address, chain.deployment.block, out["block"])
    return out


def _print(out: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(out, sort_keys=True))
        return
    for k, v in out.items():
        if k.endswith("_wei"):
            print(f"{k[:-4]:>20}: {tokens(v)} ({v} wei)")
        else:
            print(f"{k:>20}: {v}")


def _status(args: argparse.Namespace) -> int:
    chain = _connect(args, need_key=False)
    address = args.address or (chain.address if chain.account is not None else None)
    if address is None:
        raise TesseraError("give --address, or a key (--keystore / --key-env) to show its account")
    _print(account_status(chain, to_checksum_address(address)), args.json)
    return 0


def _claim(args: argparse.Namespace) -> int:
    from protocol.chain import Claimed, NothingToWithdraw

    chain = _connect(args, need_key=True)
    # owed counts only pay already swept out of the vesting slots: a slot that vested since (K rounds after
    # its round) is swept by claim() itself, so the contract, not owed, decides whether there is anything
    try:
        tx = chain.claim()
    except NothingToWithdraw:
        unvested = chain.unvested_of(chain.address)
        raise TesseraError(
            vesting_note(chain.address, unvested, chain.params().vesting_rounds, chain.round_state().round)
        ) from None
    amount = sum(e.amount for e in tx.events if isinstance(e, Claimed))
    _print(
        {"address": chain.address, "claimed_wei": amount, "tx": tx.tx_hash, "block": tx.block_number},
        args.json,
    )
    return 0


def vesting_note(address: str, unvested: int, vesting_rounds: int, current_round: int) -> str:
    """Why a claim found nothing, in numbers: what is still vesting and when a round's pay vests."""
    head = f"{address} has no rewards to claim (owed 0)"
    if unvested == 0:
        return head
    first = max(current_round - vesting_rounds, 1)
    return (
        f"{head}; {tokens(unvested)} tokens still vesting: a round's pay vests when the round "
        f"{vesting_rounds} after it is finalized (round {current_round} is open now, so pay of round {first} "
        f"and later has not vested; claim again after round {current_round} is finalized)"
    )


def _unbond(args: argparse.Namespace) -> int:
    from protocol.chain import UnbondRequested

    chain = _connect(args, need_key=True)
    amount = chain.account_info(chain.address).stake if args.all else parse_tokens(args.amount)
    tx = chain.request_unbond(amount)
    ev = next(e for e in tx.events if isinstance(e, UnbondRequested))
    _print(
        {
            "address": chain.address,
            "unbonded_wei": ev.amount,
            "unbonding_wei": ev.unbonding,
            "unbonding_end_block": ev.end,
            "tx": tx.tx_hash,
        },
        args.json,
    )
    return 0


def _withdraw(args: argparse.Namespace) -> int:
    from protocol.chain import Withdrawn

    chain = _connect(args, need_key=True)
    tx = chain.withdraw()
    amount = sum(e.amount for e in tx.events if isinstance(e, Withdrawn))
    _print(
        {"address": chain.address, "withdrawn_wei": amount, "tx": tx.tx_hash, "block": tx.block_number},
        args.json,
    )
    return 0
