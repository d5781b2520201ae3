"""The :class:`Chain` client: one deployment, one optional signing account, a typed method per
contract call, reads retried on connection errors."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import requests
from eth_account import Account
from eth_account.messages import encode_defunct
from eth_account.signers.local import LocalAccount
from eth_utils import to_checksum_address
from hexbytes import HexBytes
from web3 import Web3
from web3.exceptions import ContractLogicError, TransactionNotFound, Web3RPCError
from web3.types import RPCEndpoint

from protocol import bls
from protocol.chain.abi import artifacts, decode_revert
from protocol.chain.errors import (
    ChainConnectionError,
    ChainError,
    MalformedResponseError,
    NoAccountError,
    NotDeployedError,
    TransactionDropped,
    TransactionFailed,
    _decoding,
)
from protocol.chain.events import EVENT_TYPES, ChainEvent, ScoresRevealed, UpdateCommitted, _decode_event
from protocol.chain.values import AccountInfo, ContractRound, Role, ScoreEntry, TxResult, UnbondingInfo
from protocol.commitments import score_commitment, seed_commitment, update_commitment
from protocol.consensus import settle
from protocol.deployment import Deployment, NetworkParams
from protocol.phases import Phase
from protocol.traffic import TrafficLedger, rpc_session

log = logging.getLogger(__name__)
T = TypeVar("T")


#: Seconds a sent transaction may stay unknown to the node before it counts as dropped.
DROPPED_AFTER_S = 3.0


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


def _b32(value: bytes | str) -> bytes:
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


def http_web3(url: str, timeout: float = 30, traffic: TrafficLedger | None = None) -> Web3:
    """A ``Web3`` over HTTP that asks the node for its chain id once per process, not per request.

    web3's validation middleware reads ``eth_chainId`` before every ``eth_call`` and ``eth_estimateGas``:
    two extra round trips per contract read, 43% of a devnet's RPC bytes (issue 13). The chain id cannot
    change under a connection (``Chain.connect`` checks it against the deployment), so it is cached.
    With ``traffic``, every JSON-RPC exchange is counted there (issue 13's ledger).
    """
    provider = Web3.HTTPProvider(
        url,
        request_kwargs={"timeout": timeout},
        session=rpc_session(traffic) if traffic is not None else None,
        cache_allowed_requests=True,
        cacheable_requests={RPCEndpoint("eth_chainId")},
        request_cache_validation_threshold=None,  # no extra eth_chainId to pick a threshold
    )
    return Web3(provider)


class Chain:
    """A connection to one deployment, optionally with a signing account.

    All transaction methods return a :class:`TxResult` (decoded events included) or raise a
    :class:`ContractRevert` subclass before anything is sent (the call is simulated first).
    """

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

    @classmethod
    def connect(
        cls,
        deployment: Deployment,
        account: LocalAccount | None = None,
        rpc_url: str | None = None,
        timeout: float = 30,
        traffic: TrafficLedger | None = None,
    ) -> Chain:
        """Connects to ``rpc_url`` (default: the deployment's), checks the chain id and that the network
        contract exists there (a wrong file or a restarted dev chain is one clear error, not a
        ``BadFunctionCallOutput`` at the first read)."""
        url = check_rpc_url(rpc_url or deployment.rpc_url)
        w3 = http_web3(url, timeout, traffic)
        with _decoding("eth_chainId"):
            got = retrying(lambda: int(w3.eth.chain_id), "eth_chainId")
        if got != deployment.chain_id:
            raise ChainError(f"{url} is chain {got}, the deployment is on chain {deployment.chain_id}")
        network = to_checksum_address(deployment.network)
        with _decoding("eth_getCode"):
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
        with _decoding("eth_blockNumber"):
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
        with _decoding(fn_name):
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
        nonce = retrying(lambda: self.w3.eth.get_transaction_count(acct.address, "pending"), "nonce")
        tx = retrying(
            lambda: fn.build_transaction(
                {
                    "from": acct.address,
                    "nonce": nonce,
                    "gas": int(gas * 1.25) + 20_000,
                    "chainId": self.chain_id,
                }
            ),
            fn_name,
        )
        signed = acct.sign_transaction(tx)

        def send() -> bytes:
            try:
                return bytes(self.w3.eth.send_raw_transaction(signed.raw_transaction))
            except Web3RPCError as exc:  # a retried send of the same transaction
                if "already known" in str(exc) or "AlreadyKnown" in str(exc):
                    return bytes(signed.hash)
                raise ChainError(f"{fn_name}: transaction rejected: {exc}") from exc

        tx_hash = retrying(send, fn_name)
        receipt = self._wait_receipt(fn_name, tx_hash)
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
        while True:
            got = retrying(
                lambda: self.w3.eth.get_transaction_receipt(HexBytes(tx_hash)), fn_name, not_found=True
            )
            if got is not None:
                return got
            known = retrying(lambda: self.w3.eth.get_transaction(HexBytes(tx_hash)), fn_name, not_found=True)
            now = time.monotonic()
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
            if now - start > timeout:
                raise ChainError(f"{fn_name}: transaction 0x{tx_hash.hex()} not mined in {timeout:.0f} s")
            time.sleep(0.2)

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
                out.append(_decode_event(name, ev))
                break
        return out

    # ------------------------------------------------------------------ reads

    def params(self) -> NetworkParams:
        """The deployment's parameters (as recorded in the deployment file)."""
        return self.deployment.params

    def round_state(self) -> ContractRound:
        """The current round, phase and deadline."""
        r, phase, start, commits, seed_reveals, score_reveals = self._call("state")
        deadline = int(self._call("phaseDeadline"))
        with _decoding("state"):
            return ContractRound(
                int(r),
                Phase(phase),
                int(start),
                int(commits),
                int(seed_reveals),
                int(score_reveals),
                deadline,
            )

    def account_info(self, address: str) -> AccountInfo:
        """Stake, owed rewards, last committed round, role and validator index of ``address``."""
        stake, owed, last, role, idx = self._call("accountOf", to_checksum_address(address))
        with _decoding("accountOf"):
            return AccountInfo(int(stake), int(owed), int(last), Role(role), int(idx))

    def unbonding(self, address: str) -> UnbondingInfo:
        """Unbonding amount and the first block it can be withdrawn."""
        amount, end = self._call("unbondingOf", to_checksum_address(address))
        return UnbondingInfo(int(amount), int(end))

    def seed(self, round_: int) -> bytes:
        """The round's seed (32 zero bytes until the Reveal phase is advanced)."""
        return bytes(self._call("seeds", round_))

    def checkpoint(self, round_: int) -> bytes:
        """Certified checkpoint digest of ``round_`` (theta_round; round 1 is the genesis checkpoint)."""
        return bytes(self._call("checkpoints", round_))

    def checkpoint_message(self, round_: int, digest: bytes) -> bytes:
        """The 32 bytes validators sign to certify ``digest`` after ``round_``."""
        return bytes(self._call("checkpointMessage", round_, _b32(digest)))

    def validators(self) -> list[str]:
        """Registered validators in index order (the certificate bitmap order)."""
        n = int(self._call("validatorCount"))
        return [str(self._call("validators", i)) for i in range(n)]

    def bls_key_of(self, validator: str) -> bytes:
        """The validator's registered BLS public key (48 bytes compressed)."""
        words = self._call("blsKeyOf", to_checksum_address(validator))
        try:
            return bls.g1_from_eip2537(b"".join(bytes(w) for w in words))
        except (bls.BlsError, TypeError) as exc:
            raise MalformedResponseError(f"blsKeyOf({validator}): {exc}") from exc

    def score_entry(self, round_: int, validator: str) -> ScoreEntry:
        """A validator's score commitment/reveal for ``round_``."""
        c, h, w, rev = self._call("scoreEntry", round_, to_checksum_address(validator))
        return ScoreEntry(bytes(c), bytes(h), int(w), bool(rev))

    def pool(self) -> int:
        """Tokens left in the reward pool."""
        return int(self._call("pool"))

    def total_validator_stake(self) -> int:
        """Sum of active validator stakes (the quorum base)."""
        return int(self._call("totalValidatorStake"))

    def balance_of(self, address: str) -> int:
        """Token balance of ``address``."""
        return int(
            retrying(lambda: self.token.functions.balanceOf(to_checksum_address(address)).call(), "balanceOf")
        )

    def slash_proposal(self, evidence: bytes) -> tuple[str, int, bool]:
        """(target, voted stake, executed) of the proposal on ``evidence``."""
        t, v, e = self._call("slashProposal", _b32(evidence))
        return str(t), int(v), bool(e)

    def commitment_for(self, round_: int, miner: str, update_digest: bytes) -> bytes:
        """The update commitment (computed locally; equals the contract's ``commitmentFor``)."""
        return update_commitment(self.chain_id, self.network_address, round_, miner, _b32(update_digest))

    def events(
        self, name: str, from_block: int | None = None, to_block: int | str = "latest", **filters: Any
    ) -> list[Any]:
        """Decoded events ``name`` (a key of :data:`EVENT_TYPES`) matching indexed ``filters``."""
        if name not in EVENT_TYPES:
            raise ChainError(f"unknown event {name!r}; known: {sorted(EVENT_TYPES)}")
        start = self.deployment.block if from_block is None else from_block
        event = getattr(self.network.events, name)
        with _decoding(f"{name} logs"):
            logs = retrying(
                lambda: event.get_logs(from_block=start, to_block=to_block, argument_filters=filters or None),
                name,
            )
            return [_decode_event(name, ev) for ev in logs]

    def committed_miners(self, round_: int) -> list[UpdateCommitted]:
        """Update commitments of ``round_``, in ascending miner address order (the score vector order)."""
        evs: list[UpdateCommitted] = self.events("UpdateCommitted", round=round_)
        return sorted(evs, key=lambda e: int(e.miner, 16))

    def revealed_scores(self, round_: int) -> list[ScoresRevealed]:
        """Revealed score vectors of ``round_``, in ascending validator address order."""
        evs: list[ScoresRevealed] = self.events("ScoresRevealed", round=round_)
        return sorted(evs, key=lambda e: int(e.validator, 16))

    # ------------------------------------------------------------------ token and staking

    def approve(self, amount: int) -> TxResult:
        """Lets the network pull ``amount`` of the caller's tokens."""
        return self._transact(self.token, "approve", self.network_address, amount)

    def transfer(self, to: str, amount: int) -> TxResult:
        """Transfers tokens (e.g. stake from the deployer's genesis allocation)."""
        return self._transact(self.token, "transfer", to_checksum_address(to), amount)

    def _ensure_allowance(self, amount: int) -> None:
        owner = self.address
        allowance = int(
            retrying(lambda: self.token.functions.allowance(owner, self.network_address).call(), "allowance")
        )
        if allowance < amount:
            self.approve(amount)

    def register_miner(self, stake: int) -> TxResult:
        """Approves and registers the caller as a miner with ``stake``."""
        self._ensure_allowance(stake)
        return self._transact(self.network, "registerMiner", stake)

    def register_validator(self, stake: int, key: bls.BlsKeyPair) -> TxResult:
        """Approves and registers the caller as a validator with ``stake`` and BLS ``key`` (with PoP)."""
        self._ensure_allowance(stake)
        pk = bls.g1_words(key.public_key)
        pop_msg = bytes(self._call("popMessage", self.address, pk))
        pop = bls.g2_words(key.proof_of_possession(pop_msg))
        return self._transact(self.network, "registerValidator", stake, pk, pop)

    def add_stake(self, amount: int) -> TxResult:
        """Adds ``amount`` to the caller's active stake."""
        self._ensure_allowance(amount)
        return self._transact(self.network, "addStake", amount)

    def request_unbond(self, amount: int) -> TxResult:
        """Starts unbonding ``amount`` (withdrawable after ``unbonding_blocks``; slashable until then)."""
        return self._transact(self.network, "requestUnbond", amount)

    def withdraw(self) -> TxResult:
        """Withdraws unbonded stake after the delay."""
        return self._transact(self.network, "withdraw")

    # ------------------------------------------------------------------ miners

    def commit_update(self, round_: int, update_digest: bytes) -> TxResult:
        """Commits the caller's update digest to ``round_`` (sender-bound commitment)."""
        return self._transact(
            self.network, "commitUpdate", round_, self.commitment_for(round_, self.address, update_digest)
        )

    def commit_raw(self, round_: int, commitment: bytes) -> TxResult:
        """Commits an arbitrary 32-byte commitment (tests: a copied commitment)."""
        return self._transact(self.network, "commitUpdate", round_, _b32(commitment))

    def commit_and_claim(self, round_: int, update_digest: bytes) -> TxResult:
        """Commits to ``round_`` and claims all owed rewards in one transaction (cheapest per round)."""
        return self._transact(
            self.network, "commitAndClaim", round_, self.commitment_for(round_, self.address, update_digest)
        )

    def claim(self) -> TxResult:
        """Pays the caller its owed rewards (pull payment)."""
        return self._transact(self.network, "claim")

    # ------------------------------------------------------------------ validators

    def commit_seed(self, round_: int, secret: bytes) -> TxResult:
        """Commits a 32-byte seed share (Commit phase); keep ``secret`` to reveal it."""
        return self._transact(
            self.network, "commitSeed", round_, seed_commitment(_b32(secret), self.address, round_)
        )

    def reveal_seed(self, round_: int, secret: bytes) -> TxResult:
        """Reveals the seed share (Reveal phase)."""
        return self._transact(self.network, "revealSeed", round_, _b32(secret))

    def commit_scores(self, round_: int, scores: Sequence[int], salt: bytes) -> TxResult:
        """Commits a score vector (one score in [0, 10000] per committed miner, ascending address order)."""
        c = score_commitment(self.chain_id, self.network_address, round_, self.address, scores, _b32(salt))
        return self._transact(self.network, "commitScores", round_, c)

    def reveal_scores(self, round_: int, scores: Sequence[int], salt: bytes) -> TxResult:
        """Reveals the committed score vector with its salt (ScoreReveal phase)."""
        return self._transact(self.network, "revealScores", round_, list(scores), _b32(salt))

    # ------------------------------------------------------------------ phases and settlement

    def advance(self) -> TxResult:
        """Moves the round to its next phase (after the deadline; anyone)."""
        return self._transact(self.network, "advance")

    def finalize_round(self, round_: int) -> TxResult:
        """Settles ``round_``: reads commits and reveals from events, computes the medians with
        :func:`protocol.consensus.settle` and submits them (the contract checks them)."""
        miners = [e.miner for e in self.committed_miners(round_)]
        reveals = self.revealed_scores(round_)
        st = settle(
            [list(r.scores) for r in reveals], [r.weight for r in reveals], 0, 0, n_miners=len(miners)
        )
        return self._transact(
            self.network,
            "finalize",
            round_,
            [to_checksum_address(m) for m in miners],
            [to_checksum_address(r.validator) for r in reveals],
            [list(r.scores) for r in reveals],
            st.medians,
        )

    # ------------------------------------------------------------------ slashing

    def propose_slash(self, target: str, evidence: bytes) -> TxResult:
        """Proposes slashing ``target`` on ``evidence`` (a 32-byte hash, usable once) and votes for it."""
        return self._transact(self.network, "proposeSlash", to_checksum_address(target), _b32(evidence))

    def vote_slash(self, evidence: bytes) -> TxResult:
        """Votes for the open proposal on ``evidence``; executes at 2/3 of validator stake."""
        return self._transact(self.network, "voteSlash", _b32(evidence))

    # ------------------------------------------------------------------ checkpoints

    def sign_checkpoint_bls(self, key: bls.BlsKeyPair, round_: int, digest: bytes) -> bytes:
        """A validator's BLS signature of the checkpoint after ``round_``."""
        return key.sign(self.checkpoint_message(round_, digest))

    def sign_checkpoint_ecdsa(self, account: LocalAccount, round_: int, digest: bytes) -> bytes:
        """A validator's 65-byte EIP-191 signature of the checkpoint message (ECDSA variant)."""
        msg = self.checkpoint_message(round_, digest)
        return bytes(Account.sign_message(encode_defunct(primitive=msg), account.key).signature)

    def _bls_args(self, signatures: Mapping[str, bytes]) -> tuple[int, tuple[bytes, ...]]:
        signed = 0
        for v in signatures:
            info = self.account_info(v)
            if info.role != Role.VALIDATOR:
                raise ChainError(f"{v} is not a registered validator")
            signed |= 1 << info.validator_index
        n = int(self._call("validatorCount"))
        non_signers = ((1 << n) - 1) & ~signed
        return non_signers, bls.g2_words(bls.aggregate(list(signatures.values())))

    def certify_checkpoint(self, round_: int, digest: bytes, signatures: Mapping[str, bytes]) -> TxResult:
        """Certifies ``digest`` after ``round_`` with the aggregate of per-validator BLS signatures
        (``{validator address: signature}``); signers need 2/3 of the validator stake. The contract
        receives the bitmap of registered validators that did NOT sign."""
        non_signers, sig = self._bls_args(signatures)
        return self._transact(self.network, "certifyCheckpoint", round_, _b32(digest), non_signers, sig)

    def certify_checkpoint_ecdsa(
        self, round_: int, digest: bytes, signatures: Mapping[str, bytes]
    ) -> TxResult:
        """Certifies with one ECDSA signature per validator (sorted by address here)."""
        ordered = [signatures[a] for a in sorted(signatures, key=lambda a: int(a, 16))]
        return self._transact(self.network, "certifyCheckpointEcdsa", round_, _b32(digest), ordered)

    def estimate(self, fn_name: str, *args: Any) -> int:
        """Gas estimate of a network call from the signing account (benchmarks)."""
        fn = getattr(self.network.functions, fn_name)(*args)
        try:
            return int(fn.estimate_gas({"from": self.address}))
        except ContractLogicError as exc:
            raise decode_revert(fn_name, exc.data) from None

    def bls_certificate_args(self, signatures: Mapping[str, bytes]) -> tuple[int, tuple[bytes, ...]]:
        """(non-signer bitmap, aggregate signature words) for ``certifyCheckpoint``."""
        return self._bls_args(signatures)
