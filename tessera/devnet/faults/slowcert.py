"""``slow-certificate`` (issue 35): every certificate lands :data:`HOLD_S` seconds late, on 2-s blocks with
wall-clock phases, and no round may be lost.

Each validator reaches the chain through a :class:`~tessera.devnet.proxy.FaultProxy` in ``rule`` mode
whose rule, :class:`CertifyHold`, decodes every ``eth_sendRawTransaction``, and holds a transaction that
calls one of TesseraNetwork's ``certify*`` functions (:func:`certify_selectors`, from the ABI in
``protocol/contracts.json``): it answers with the transaction's hash at once, as a node answers a
transaction it pools, tells anyone who asks about that hash (``eth_getTransactionByHash``) that it is
pending, and sends it on to anvil :data:`HOLD_S` seconds later. (Holding the request itself would run
into the nodes' 30-s RPC timeout and their retries.) The hold is in from the start, so every certificate
of the run is late, the join round's too; the miners must train ahead of it (``miner.commit``'s
``work_ahead``) and commit once it lands.

The checks beside the money checks: every miner committed in every round (:func:`no_round_lost`), and
every certificate of the run was held (:func:`every_certificate_held`); the figures give each round's
wait from finalization to certificate.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import rlp
from eth_account import Account
from eth_account.typed_transactions import TypedTransaction
from eth_utils import keccak
from hexbytes import HexBytes

from tessera.devnet.faults.base import FaultContext, Scenario
from tessera.devnet.faults.checks import Check, Payouts, make_check
from tessera.devnet.network import Devnet
from tessera.devnet.proxy import ProxyMode

HOLD_S = 30.0
"""Seconds each certify transaction is held before it is sent on."""
SLOW_CERTIFICATE_WINDOWS = (30, 10, 40, 8)
"""Phase windows in 2-s blocks: a 60-s commit window (as on issue 35's stand-in testnet, where a 36-s
certificate cost every miner the round), 20 s to announce, 80 s to verify 3 miners on 2 validators, 16 s
to reveal: a 176-s round."""


@dataclass
class HeldTx:
    """One certify transaction the rule held."""

    hash: str
    """0x-hex, as the node answers it."""
    raw: str
    """The signed transaction, 0x-hex."""
    view: dict[str, Any]
    """What ``eth_getTransactionByHash`` answers while it is held (a pending transaction)."""
    held_at: float
    sent_at: float | None = None
    answer: str = ""
    """The node's answer when it was sent on (``result`` or ``error``), or the send's failure."""


def decode_tx(raw_hex: str) -> tuple[bytes, dict[str, Any]] | None:
    """(the calldata's selector, the pending-transaction view) of a signed transaction, typed (EIP-2718)
    or legacy; None if it does not decode."""
    try:
        raw = bytes.fromhex(raw_hex.removeprefix("0x"))
        if raw and raw[0] < 0x80:
            d = TypedTransaction.from_bytes(HexBytes(raw)).as_dict()
            to, data, kind = d.get("to"), d["data"], d["type"]
            nonce, gas, value = d["nonce"], d["gas"], d["value"]
        else:
            nonce_b, _price, gas_b, to, value_b, data = rlp.decode(raw)[:6]
            nonce, gas, value, kind = (int.from_bytes(b, "big") for b in (nonce_b, gas_b, value_b, b""))
        sender = Account.recover_transaction(raw)
    except Exception:  # anything that is not a signed transaction passes through
        return None
    view = {
        "hash": "0x" + keccak(raw).hex(),
        "from": sender,
        "to": "0x" + bytes(to).hex() if to else None,
        "nonce": hex(nonce),
        "gas": hex(gas),
        "value": hex(value),
        "input": "0x" + bytes(data).hex(),
        "type": hex(kind),
        "blockHash": None,
        "blockNumber": None,
        "transactionIndex": None,
    }
    return bytes(data[:4]), view


def certify_selectors() -> frozenset[bytes]:
    """The 4-byte selectors of TesseraNetwork's ``certify*`` functions, from ``protocol/contracts.json``."""
    from protocol.chain.abi import abi_type, artifacts  # on the tessera --help path: web3 waits

    out = set()
    for entry in artifacts()["TesseraNetwork"]["abi"]:
        if entry.get("type") == "function" and str(entry["name"]).startswith("certify"):
            sig = f"{entry['name']}({','.join(abi_type(i) for i in entry['inputs'])})"
            out.add(keccak(text=sig)[:4])
    return frozenset(out)


def _reply(req: dict[str, Any], result: Any) -> bytes:
    """A JSON-RPC answer to ``req``."""
    return json.dumps({"jsonrpc": "2.0", "id": req.get("id"), "result": result}).encode()


class CertifyHold:
    """A validator's RPC proxy rule (``rule`` mode): a certify transaction is answered with its hash,
    shown as pending while held, and sent on ``hold_s`` seconds later with ``send`` (the proxy's
    :meth:`~tessera.devnet.proxy.FaultProxy.post`); every other request passes."""

    def __init__(self, selectors: frozenset[bytes], hold_s: float, send: Any) -> None:
        self.selectors = selectors
        self.hold_s = hold_s
        self.send = send
        self.held: dict[str, HeldTx] = {}
        """Every certify transaction held, by hash (those sent on too)."""
        self._lock = threading.Lock()

    def __call__(self, body: bytes) -> bytes | None:
        """The answer to a JSON-RPC request ``body``, or None to forward it."""
        try:
            req = json.loads(body)
        except ValueError:
            return None
        params = req.get("params") if isinstance(req, dict) else None
        if not isinstance(params, list) or not params or not isinstance(params[0], str):
            return None  # a batch (the fee reads) or a call without a string argument
        if req.get("method") == "eth_sendRawTransaction":
            got = decode_tx(params[0])
            if got is None or got[0] not in self.selectors:
                return None
            return _reply(req, self.hold(params[0], got[1]))
        if req.get("method") == "eth_getTransactionByHash":
            with self._lock:
                tx = self.held.get(params[0].lower())
            if tx is not None and tx.sent_at is None:
                return _reply(req, tx.view)
        return None

    def hold(self, raw: str, view: dict[str, Any]) -> str:
        """Hold ``raw`` (once: a resend of a held transaction is answered again); its hash."""
        h = str(view["hash"])
        with self._lock:
            if h in self.held:
                return h
            self.held[h] = HeldTx(h, raw, view, time.time())
        timer = threading.Timer(self.hold_s, self.send_on, args=(h,))
        timer.daemon = True
        timer.start()
        return h

    def send_on(self, tx_hash: str) -> None:
        """Send the held transaction ``tx_hash`` to the node now."""
        tx = self.held[tx_hash]
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_sendRawTransaction", "params": [tx.raw]})
        try:
            got = json.loads(self.send(body.encode()))
            tx.answer = json.dumps(got.get("result", got.get("error")))
        except (OSError, ValueError) as exc:
            tx.answer = f"not sent: {type(exc).__name__}: {exc}"
        tx.sent_at = time.time()


@dataclass
class SlowCertificate(Scenario):
    """Every validator's certify transactions held :data:`HOLD_S` seconds at its chain RPC, from the start,
    on 2-s blocks and wall-clock phases with a 60-s commit window; every miner must commit in every round."""

    name: str = "slow-certificate"
    summary: str = f"every certify transaction held {HOLD_S:.0f}s at the validators' RPC proxies (2-s blocks)"
    target: str = "validators"
    points: tuple[str, ...] = ("commit",)
    log_patterns: tuple[tuple[str, str], ...] = (("miner*", r"training ahead of the certificate"),)
    block_time: float = 2.0
    fast_forward: bool = False
    windows: tuple[int, int, int, int] | None = SLOW_CERTIFICATE_WINDOWS
    holds: dict[str, CertifyHold] = field(default_factory=dict, init=False, repr=False, compare=False)

    def set_up(self, net: Devnet, seed: int) -> None:
        """Every validator's chain RPC behind a proxy holding its certify transactions."""
        selectors = certify_selectors()
        for i in range(net.cfg.validators):
            name = f"validator{i}"
            proxy = self.front(net, name, "rpc", key=name)
            self.holds[name] = proxy.rule = CertifyHold(selectors, HOLD_S, proxy.post)
            proxy.set_mode(ProxyMode.RULE)

    def inject(self, ctx: FaultContext, round: int, point: str, block: int) -> None:
        """Nothing to put in (the hold is in from the start): note what it held so far."""
        held = {name: len(rule.held) for name, rule in self.holds.items()}
        ctx.note(
            f"certify transactions held {HOLD_S:.0f}s since the start; at round {round} {point}, block "
            f"{block}, held so far: {held}"
        )
        ctx.restored = True  # lasts the whole scenario: nothing to lift

    def extra_checks(self, ctx: FaultContext, paid: Payouts) -> list[Check]:
        """No round lost, and every certificate held."""
        return [
            no_round_lost(ctx.net, ctx.fault_round, ctx.last_round),
            every_certificate_held(ctx.net, self.holds, ctx.last_round),
        ]

    def checks(self, ctx: FaultContext) -> tuple[list[Check], dict[str, Any]]:
        """The common checks and figures, and each round's certificate wait."""
        checks, figures = super().checks(ctx)
        figures["certificate_waits"] = certificate_waits(ctx.net, self.holds, ctx.last_round)
        figures["held_certify_transactions"] = {
            name: [
                {"hash": tx.hash, "held_s": round(tx.sent_at - tx.held_at, 1) if tx.sent_at else None,
                 "answer": tx.answer[:120]}
                for tx in rule.held.values()
            ]
            for name, rule in self.holds.items()
        }  # fmt: skip
        return checks, figures


def no_round_lost(net: Devnet, first: int, last: int) -> Check:
    """Every miner committed in every round from ``first`` to ``last``."""
    miners = {n.address.lower(): name for name, n in net.nodes.items() if n.role == "miner"}
    lost = []
    for r in range(first, last + 1):
        committed = {e.miner.lower() for e in net.chain.committed_miners(r)}
        lost += [f"{name} in round {r}" for a, name in sorted(miners.items()) if a not in committed]
    total = len(miners) * (last - first + 1)
    return make_check(
        "no_round_lost",
        not lost,
        f"miner-rounds committed {total - len(lost)}/{total}"
        + (f"; lost: {', '.join(lost)}" if lost else ""),
    )


def every_certificate_held(net: Devnet, holds: dict[str, CertifyHold], last: int) -> Check:
    """Every certificate of rounds 1..``last`` came from a transaction a proxy held (so the scenario
    delayed every one of them)."""
    held = {h for rule in holds.values() for h in rule.held}
    events = [e for e in net.chain.events("CheckpointCertified") if int(e.round) <= last]
    bad = [
        f"round {e.round} certified by a transaction not held" for e in events if _hex(e.tx_hash) not in held
    ]
    bad += [
        f"round {r} not certified" for r in sorted(set(range(1, last + 1)) - {int(e.round) for e in events})
    ]
    return make_check(
        "every_certificate_held",
        not bad,
        "; ".join(bad) or f"{len(events)} certificates, each from a transaction held {HOLD_S:.0f}s",
    )


def certificate_waits(net: Devnet, holds: dict[str, CertifyHold], last: int) -> dict[str, Any]:
    """Per round: seconds from the round's finalization to its certificate (block timestamps) and how
    long the certifying transaction was held."""
    held = {h: tx for rule in holds.values() for h, tx in rule.held.items()}
    finalized = {int(e.round): e.block_number for e in net.chain.events("RoundFinalized")}
    out: dict[str, Any] = {}
    for e in net.chain.events("CheckpointCertified"):
        r = int(e.round)
        if r > last or r not in finalized:
            continue
        tx = held.get(_hex(e.tx_hash))
        out[str(r)] = {
            "finalized_to_certified_s": _timestamp(net, e.block_number) - _timestamp(net, finalized[r]),
            "held_s": round(tx.sent_at - tx.held_at, 1) if tx is not None and tx.sent_at else None,
        }
    return out


def _hex(tx_hash: Any) -> str:
    """A transaction hash as lower-case 0x-hex."""
    h = tx_hash.hex() if isinstance(tx_hash, bytes) else str(tx_hash)
    return ("0x" + h.removeprefix("0x")).lower()


def _timestamp(net: Devnet, block: int) -> int:
    """The timestamp of ``block``."""
    return int(net.chain.w3.eth.get_block(block)["timestamp"])
