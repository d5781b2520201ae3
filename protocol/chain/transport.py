"""The plumbing of the :class:`protocol.chain.Chain` client: connecting to a JSON-RPC node (its chain id
and the network contract checked), contract reads retried on connection errors, and transactions
simulated, signed, sent and waited for (a revert decoded into its typed error before anything is sent;
a transaction the node forgets raises :class:`TransactionDropped`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Self, TypeVar, cast

import requests
from eth_account.signers.local import LocalAccount
from eth_utils import to_checksum_address
from hexbytes import HexBytes
from web3 import Web3
from web3.exceptions import ContractLogicError, TransactionNotFound, Web3RPCError
from web3.types import RPCEndpoint

from protocol.chain.abi import artifacts, decode_revert
from protocol.chain.endpoint import http_web3
from protocol.chain.errors import (
    ChainConnectionError,
    ChainError,
    NoAccountError,
    NonceTaken,
    NotDeployedError,
    TransactionDropped,
    TransactionFailed,
    decoding,
)
from protocol.chain.events import EVENT_TYPES, ChainEvent, decode_event
from protocol.chain.nonces import GAP_CHECK_S, SentTransactions, empty_transaction
from protocol.chain.values import TxResult
from protocol.node.traffic import TrafficLedger
from protocol.rounds.deployment import Deployment

log = logging.getLogger(__name__)
T = TypeVar("T")


#: Seconds a sent transaction may stay unknown to the node before it counts as dropped.
DROPPED_AFTER_S = 3.0
#: Seconds between looks for a sent transaction's receipt (0.2 s asked 5-10 times a block), the
#: first; the wait doubles up to ``RECEIPT_POLL_MAX_S`` (a 2-s block was 3-4 looks a transaction).
RECEIPT_POLL_S = 0.5
RECEIPT_POLL_MAX_S = 2.0
#: The first receipt look of a transaction waits this fraction of the time the last one took to be found
#: mined (a chain that mines at once keeps looking at once; a decayed wait also learns a faster chain).
MINED_AFTER_DECAY = 0.9
#: Seconds a receipt may be missing (and two looks) before the node is asked whether it still knows the
#: transaction, and between such questions (it was asked at every receipt poll: a quarter of a validator's
#: requests).
KNOWN_CHECK_S = 1.0
#: Seconds the fee fields are reused between transactions (web3 read the tip and the latest block for each).
FEE_TTL_S = 10.0
#: How often a transaction whose nonce another sender of the key took is re-signed with a fresh nonce.
NONCE_RACE_TRIES = 4
#: What nodes answer (lower-cased) for a nonce already mined or pending: anvil and geth say "nonce too low"
#: and "replacement transaction underpriced", others "already imported" or "nonce has already been used".
NONCE_TAKEN_MESSAGES = (
    "nonce too low",
    "replacement transaction underpriced",
    "already imported",
    "nonce has already been used",
)


def retrying(
    fn: Callable[[], T], what: str, attempts: int = 5, base_delay: float = 0.25, not_found: bool = False
) -> T:
    """Calls ``fn``, retrying connection errors with exponential backoff (``not_found``: web3's
    ``TransactionNotFound`` becomes None)."""
    delay = base_delay
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except TransactionNotFound:
            if not not_found:
                raise
            return None  # type: ignore[return-value]
        except (requests.ConnectionError, requests.Timeout, ConnectionError) as exc:
            if attempt == attempts:
                raise ChainConnectionError(
                    f"{what}: RPC unreachable after {attempts} attempts: {exc}"
                ) from exc
            log.warning(
                "%s: connection error (%s), retry %d/%d in %.2fs", what, exc, attempt, attempts, delay
            )
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


def b32(value: bytes | str) -> bytes:
    """``value`` (bytes or 0x-hex) as exactly 32 bytes, the contract's ``bytes32``; any other length is refused."""
    if isinstance(value, str):
        value = bytes.fromhex(value.removeprefix("0x"))
    if len(value) != 32:
        raise ChainError(f"expected 32 bytes, got {len(value)}")
    return value


def check_rpc_url(url: str | None) -> str:
    """``url`` if it is an ``http(s)://host...`` JSON-RPC URL; else a :class:`ChainError` saying what to write."""
    if not url:
        raise ChainError("no RPC URL: pass --rpc-url or set rpc_url in the deployment file")
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest or rest.startswith("/"):
        raise ChainError(f"RPC URL {url!r} must look like http://HOST:PORT or https://HOST/PATH")
    return url


class ChainTransport:
    """A connection to one deployment, optionally with a signing account: the plumbing under the typed
    reads (``protocol.chain.reads``) and transactions (``protocol.chain.client``)."""

    def __init__(self, w3: Web3, deployment: Deployment, account: LocalAccount | None = None) -> None:
        self.w3 = w3
        self.deployment = deployment
        self.account = account
        arts = artifacts()
        self.network = w3.eth.contract(
            address=to_checksum_address(deployment.network), abi=arts["TesseraNetwork"]["abi"]
        )
        self.token = w3.eth.contract(
            address=to_checksum_address(deployment.token), abi=arts["TesseraToken"]["abi"]
        )
        self.chain_id = deployment.chain_id
        self.network_address: str = self.network.address
        self._next_nonce: int | None = None
        """The signing account's next nonce, counted here after each sent transaction (None: ask the node)."""
        self._fees: tuple[float, dict[str, int]] | None = None
        self._mined_after = 0.0
        """Seconds before the first receipt look: the last transaction's wait for its receipt, decayed."""
        self._tx_lock = threading.Lock()
        self._sent = SentTransactions()

    @classmethod
    def connect(
        cls,
        deployment: Deployment,
        account: LocalAccount | None = None,
        rpc_url: str | None = None,
        timeout: float = 30,
        traffic: TrafficLedger | None = None,
    ) -> Self:
        """Connects to ``rpc_url`` (default: the deployment's), checks the chain id and that the network
        contract exists there (a wrong file or a restarted dev chain is one clear error, not a
        ``BadFunctionCallOutput`` at the first read)."""
        url = check_rpc_url(rpc_url or deployment.rpc_url)
        w3 = http_web3(url, timeout, traffic)
        with decoding("eth_chainId"):
            got = retrying(lambda: int(w3.eth.chain_id), "eth_chainId")
        if got != deployment.chain_id:
            raise ChainError(f"{url} is chain {got}, the deployment is on chain {deployment.chain_id}")
        network = to_checksum_address(deployment.network)
        with decoding("eth_getCode"):
            code = retrying(lambda: bytes(w3.eth.get_code(network)), "eth_getCode")
        if not code:
            raise NotDeployedError(
                f"no contract at {network} on chain {got} ({url}): deploy first (`tessera contracts deploy`), "
                "or use the deployment file of this chain (a restarted dev chain forgets its contracts)"
            )
        return cls(w3, deployment, account)

    # ------------------------------------------------------------------ plumbing

    @property
    def address(self) -> str:
        """The signing account's address."""
        if self.account is None:
            raise NoAccountError("this client has no signing account")
        return str(self.account.address)

    def block_number(self) -> int:
        """Latest block number."""
        with decoding("eth_blockNumber"):
            return retrying(lambda: int(self.w3.eth.block_number), "eth_blockNumber")

    def wait_for_block(self, block: int, poll: float = 0.5, timeout: float | None = None) -> int:
        """Blocks until the chain reaches ``block`` (e.g. ``round_state().deadline + 1``); returns the
        current block number. Raises :class:`ChainError` after ``timeout`` seconds."""
        start = time.monotonic()
        while True:
            now = self.block_number()
            if now >= block:
                return now
            if timeout is not None and time.monotonic() - start > timeout:
                raise ChainError(f"block {block} not reached within {timeout:.0f} s (at {now})")
            time.sleep(poll)

    def _call(self, fn_name: str, *args: Any) -> Any:
        fn = getattr(self.network.functions, fn_name)(*args)
        with decoding(fn_name):
            try:
                return retrying(lambda: fn.call(), fn_name)
            except ContractLogicError as exc:
                raise decode_revert(fn_name, exc.data) from None

    def _transact(self, contract: Any, fn_name: str, *args: Any) -> TxResult:
        acct = self.account
        if acct is None:
            raise NoAccountError(f"{fn_name} needs a signing account")
        fn = getattr(contract.functions, fn_name)(*args)
        try:
            gas = retrying(lambda: fn.estimate_gas({"from": acct.address}), fn_name)
        except ContractLogicError as exc:
            raise decode_revert(fn_name, exc.data) from None
        with self._tx_lock:  # one nonce per transaction, counted here (a request per transaction)
            for attempt in range(NONCE_RACE_TRIES):
                nonce, signed = self._sign(fn, fn_name, acct, gas)
                self._next_nonce = None  # until this one is sent: a failed send asks the node again
                try:
                    tx_hash = self._send(fn_name, signed)
                except NonceTaken:
                    # another process signs with this key (an operator's `tessera account claim` beside
                    # the running node) and took this nonce first: the node's pending count is the truth
                    if attempt + 1 == NONCE_RACE_TRIES:
                        raise
                    log.info(
                        "%s: nonce %d taken by another sender of this key; asking the node again",
                        fn_name,
                        nonce,
                    )
                    continue
                self._next_nonce = nonce + 1
                self._sent.remember(nonce, tx_hash)
                break
        try:
            receipt = self._wait_receipt(fn_name, tx_hash)
        except ChainError:
            # dropped, or never mined (a chain restarted from an older state keeps a nonce it is past
            # queued forever): the node's count is the truth again, or every later transaction queues too
            self._next_nonce = None
            raise
        return self._result(fn, fn_name, acct, tx_hash, receipt)

    def _sign(self, fn: Any, fn_name: str, acct: LocalAccount, gas: int) -> tuple[int, Any]:
        """The call signed with the next nonce (the count kept here, else the node's pending count)."""
        nonce = self._next_nonce
        if nonce is None:
            nonce = retrying(lambda: self.w3.eth.get_transaction_count(acct.address, "pending"), "nonce")
        fields = {
            "from": acct.address,
            "nonce": nonce,
            "gas": int(gas * 1.25) + 20_000,
            "chainId": self.chain_id,
            **self._fee_fields(),
        }
        tx = retrying(lambda: fn.build_transaction(fields), fn_name)
        return nonce, acct.sign_transaction(tx)

    def _fill_nonce_gap(self, fn_name: str, nonce: int) -> None:
        """Fill the nonces below ``nonce`` the chain lost (``protocol.chain.nonces``) with empty
        transactions, so the one at ``nonce`` can be mined."""
        acct = self.account
        assert acct is not None
        latest = int(retrying(lambda: self.w3.eth.get_transaction_count(acct.address, "latest"), "nonce"))

        def known(h: bytes) -> bool:
            got = retrying(lambda: self.w3.eth.get_transaction(HexBytes(h)), fn_name, not_found=True)
            return got is not None

        with self._tx_lock:
            for n in self._sent.lost_below(nonce, latest, known):
                log.warning("%s: nonce %d was lost when the chain went back; an empty transaction takes it "
                            "so nonce %d can be mined", fn_name, n, nonce)  # fmt: skip
                fields = empty_transaction(acct.address, n, self.chain_id, self._fee_fields())
                signed = acct.sign_transaction(fields)
                try:
                    self._sent.remember(n, self._send(fn_name, signed))
                except NonceTaken:  # taken after all (another sender of the key)
                    return

    def forget_nonce(self) -> None:
        """Ask the node for the account's nonce before the next transaction: the chain went back (restarted
        from an older state, or reorged), and a count kept here would queue every later transaction behind
        a nonce the chain no longer reaches."""
        with self._tx_lock:
            self._next_nonce = None

    def _fee_fields(self) -> dict[str, int]:
        """EIP-1559 fee fields, read at most every :data:`FEE_TTL_S` (web3 read the tip and the latest
        block before every transaction): the tip the node suggests and 3x the base fee plus it (web3's own
        rule is 2x; 3x covers the base fee's rise over the reuse). Empty on a chain without a base fee
        (web3 then picks a gas price)."""
        now = time.monotonic()
        if self._fees is not None and now - self._fees[0] < FEE_TTL_S:
            return self._fees[1]
        # the next block's base fee and the tip in one batch (the latest block was 2.2 kB a read)
        got: Any = retrying(
            lambda: cast(Any, self.w3.provider).make_batch_request(
                [
                    (RPCEndpoint("eth_feeHistory"), [1, "latest", []]),
                    (RPCEndpoint("eth_maxPriorityFeePerGas"), []),
                ]
            ),
            "fees",
        )
        try:
            base: Any = max(int(b, 16) for b in got[0]["result"]["baseFeePerGas"])
            tip = int(got[1]["result"], 16)
        except (KeyError, IndexError, TypeError, ValueError):  # no such methods (a chain without a base fee)
            base = retrying(lambda: self.w3.eth.get_block("latest"), "fees").get("baseFeePerGas")
            tip = int(retrying(lambda: self.w3.eth.max_priority_fee, "fees")) if base is not None else 0
        fees = {} if base is None else {"maxPriorityFeePerGas": tip, "maxFeePerGas": 3 * int(base) + tip}
        self._fees = (now, fees)
        return fees

    def _send(self, fn_name: str, signed: Any) -> bytes:
        """Send a signed transaction (a retried send of one the node already has is fine); its hash."""

        def send() -> bytes:
            try:
                return bytes(self.w3.eth.send_raw_transaction(signed.raw_transaction))
            except Web3RPCError as exc:  # a retried send of the same transaction
                if "already known" in str(exc) or "AlreadyKnown" in str(exc):
                    return bytes(signed.hash)
                if any(m in str(exc).lower() for m in NONCE_TAKEN_MESSAGES):
                    raise NonceTaken(f"{fn_name}: nonce taken: {exc}") from exc
                raise ChainError(f"{fn_name}: transaction rejected: {exc}") from exc

        return retrying(send, fn_name)

    def _result(self, fn: Any, fn_name: str, acct: LocalAccount, tx_hash: bytes, receipt: Any) -> TxResult:
        """The mined transaction's result; a reverted one is decoded into its typed error."""
        if receipt["status"] != 1:
            try:
                fn.call({"from": acct.address}, block_identifier=receipt["blockNumber"])
            except ContractLogicError as exc:
                raise decode_revert(fn_name, exc.data) from None
            raise TransactionFailed(
                f"{fn_name}: transaction 0x{tx_hash.hex()} failed (gas used {receipt['gasUsed']})"
            )
        return TxResult(
            tx_hash="0x" + tx_hash.hex(),
            block_number=int(receipt["blockNumber"]),
            gas_used=int(receipt["gasUsed"]),
            events=tuple(self._receipt_events(receipt)),
        )

    def _wait_receipt(self, fn_name: str, tx_hash: bytes, timeout: float = 120.0) -> Any:
        """The receipt of a sent transaction. Raises :class:`TransactionDropped` when the node no longer
        knows the transaction (the chain restarted from an older state, or reorged it away): waiting out
        the timeout would only delay the caller, who must re-read the chain and decide again."""
        start = time.monotonic()
        unknown_since: float | None = None
        checked, gap_checked, wait, misses = 0.0, start, RECEIPT_POLL_S / 2, 0
        # the first look waits about as long as the last transaction took to be mined (on 2-s
        # blocks the look at once and the one after half a second found nothing, 2 of 3 receipt polls)
        time.sleep(min(self._mined_after, RECEIPT_POLL_MAX_S))
        while True:
            wait = min(wait * 2, RECEIPT_POLL_MAX_S)
            got = retrying(
                lambda: self.w3.eth.get_transaction_receipt(HexBytes(tx_hash)), fn_name, not_found=True
            )
            if got is not None:
                self._mined_after = MINED_AFTER_DECAY * (time.monotonic() - start)
                return got
            now, misses = time.monotonic(), misses + 1
            if misses < 2 or now - start < KNOWN_CHECK_S or now - checked < KNOWN_CHECK_S:
                time.sleep(wait)
                continue
            checked = now
            known = retrying(lambda: self.w3.eth.get_transaction(HexBytes(tx_hash)), fn_name, not_found=True)
            if known is None:
                unknown_since = unknown_since or now
                if now - unknown_since > DROPPED_AFTER_S:
                    log.warning(
                        "%s: transaction 0x%s dropped by the node (chain restarted or reorged); the caller "
                        "will re-read the chain and resend if still due",
                        fn_name,
                        tx_hash.hex(),
                    )
                    raise TransactionDropped(f"{fn_name}: transaction 0x{tx_hash.hex()} dropped by the node")
            else:
                unknown_since = None
                if known.get("blockNumber") is None and now - gap_checked >= GAP_CHECK_S:
                    gap_checked = now
                    self._fill_nonce_gap(fn_name, int(known["nonce"]))
            if now - start > timeout:
                raise ChainError(f"{fn_name}: transaction 0x{tx_hash.hex()} not mined in {timeout:.0f} s")
            time.sleep(wait)

    def _receipt_events(self, receipt: Any) -> list[ChainEvent]:
        out: list[ChainEvent] = []
        for log_ in receipt["logs"]:
            if to_checksum_address(log_["address"]) != self.network_address:
                continue
            for name in EVENT_TYPES:
                try:
                    ev = getattr(self.network.events, name)().process_log(log_)
                except Exception:  # not this event's signature
                    continue
                out.append(decode_event(name, ev))
                break
        return out
