"""The reads of the :class:`protocol.chain.Chain` client: the contract's views as typed values
(``protocol.chain.values``), event queries, and the update commitment computed locally."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

from eth_utils import to_checksum_address
from web3.exceptions import ContractLogicError

from protocol.chain.abi import decode_revert
from protocol.chain.errors import ChainError, MalformedResponseError, decoding
from protocol.chain.events import EVENT_TYPES, ScoresRevealed, UpdateCommitted, decode_event
from protocol.chain.transport import ChainTransport, b32, retrying
from protocol.chain.values import AccountInfo, ChainStatus, ContractRound, Role, ScoreEntry, UnbondingInfo
from protocol.rounds.audits import AuditDraw, audit_draw
from protocol.rounds.deployment import NetworkParams
from protocol.rounds.phases import Phase
from protocol.wire import bls
from protocol.wire.commitments import update_commitment

#: Blocks below the newest block this client had seen when it last ran an event query that the next run of
#: the same query reads again (each run read from the deployment block): a reorg shallower than
#: this replaces what it changed, and a provider's node a few blocks behind misses nothing. A chain seen
#: going back (a block read lower than one read before) has every query read from the deployment again.
LOG_OVERLAP_BLOCKS = 12
#: Event queries whose logs a client keeps (the oldest dropped first): a few per round.
LOG_QUERIES_KEPT = 64


class ChainReads(ChainTransport):
    """Typed reads of the network and token contracts."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head = -1
        """The newest block a read of this client saw (-1: none yet)."""
        self._logs: dict[str, tuple[int, list[Any]]] = {}
        """Per event query: the block its logs are complete to, and the logs (raw, in chain order)."""
        self._logs_epoch = 0  # bumped when the chain is seen going back: a query in flight keeps nothing
        self._logs_lock = threading.Lock()

    def saw_block(self, block: int) -> int:
        """Note ``block`` as read from the chain; one lower than the newest seen means the chain went back
        (restarted from an older state, or reorged), so the kept event logs are dropped. Returns ``block``."""
        with self._logs_lock:
            if block < self._head:
                self._logs.clear()
                self._logs_epoch += 1
            self._head = block
        return block

    def block_number(self) -> int:
        """Latest block number."""
        return self.saw_block(super().block_number())

    # ------------------------------------------------------------------ reads

    def batch(
        self, calls: Sequence[tuple[Any, str, tuple[Any, ...]]], block: int | str = "latest"
    ) -> list[Any]:
        """The results of several contract reads ``(contract, function, args)`` at ``block``, in one JSON-RPC
        batch request (one HTTP exchange, its headers once, instead of one per read)."""
        if not calls:
            return []

        def go() -> list[Any]:
            with self.w3.batch_requests() as batch:
                for contract, fn_name, args in calls:
                    batch.add(getattr(contract.functions, fn_name)(*args).call(block_identifier=block))
                return list(batch.execute())

        names = ",".join(sorted({c[1] for c in calls}))
        with decoding(f"batch {names}"):
            try:
                return retrying(go, f"batch {names}")
            except ContractLogicError as exc:
                raise decode_revert(names, exc.data) from None

    def params(self) -> NetworkParams:
        """The deployment's parameters (as recorded in the deployment file)."""
        return self.deployment.params

    def round_state(self) -> ContractRound:
        """The current round, phase and deadline."""
        return self.status().round

    def status(self) -> ChainStatus:
        """The round state, its deadline, checkpoint and seeds, and the block they were read at: one
        ``eth_call`` (a node's poll; it was six requests, most of a node's JSON-RPC traffic)."""
        (r, phase, start, commits, seed_reveals, score_reveals), deadline, cp, seed, assign, block = (
            self._call("status")
        )
        with decoding("status"):
            return ChainStatus(
                ContractRound(
                    int(r),
                    Phase(phase),
                    int(start),
                    int(commits),
                    int(seed_reveals),
                    int(score_reveals),
                    int(deadline),
                ),
                checkpoint=bytes(cp),
                seed=bytes(seed),
                assign_seed=bytes(assign),
                block=self.saw_block(int(block)),
            )

    def account_info(self, address: str) -> AccountInfo:
        """Stake, owed rewards, last committed round, role and validator index of ``address``."""
        stake, owed, last, role, idx = self._call("accountOf", to_checksum_address(address))
        with decoding("accountOf"):
            return AccountInfo(int(stake), int(owed), int(last), Role(role), int(idx))

    def account_at(self, address: str, block: int) -> tuple[AccountInfo, UnbondingInfo, int, int]:
        """(account, unbonding, token balance, unvested pay) of ``address`` at ``block``: one batch request
        (four requests a read, several reads a round, were a third of a miner's requests)."""
        a = to_checksum_address(address)
        (stake, owed, last, role, idx), (amount, end), balance, unvested = self.batch(
            [
                (self.network, "accountOf", (a,)),
                (self.network, "unbondingOf", (a,)),
                (self.token, "balanceOf", (a,)),
                (self.network, "unvestedOf", (a,)),
            ],
            block,
        )
        with decoding("accountOf"):
            info = AccountInfo(int(stake), int(owed), int(last), Role(role), int(idx))
        return info, UnbondingInfo(int(amount), int(end)), int(balance), int(unvested)

    def unbonding(self, address: str) -> UnbondingInfo:
        """Unbonding amount and the first block it can be withdrawn."""
        amount, end = self._call("unbondingOf", to_checksum_address(address))
        return UnbondingInfo(int(amount), int(end))

    def seed(self, round: int) -> bytes:
        """The round's seed (32 zero bytes until the Reveal phase is advanced)."""
        return bytes(self._call("seeds", round))

    def checkpoint(self, round: int) -> bytes:
        """Certified checkpoint digest of ``round`` (theta_round; round 1 is the genesis checkpoint)."""
        return bytes(self._call("checkpoints", round))

    def checkpoint_message(self, round: int, digest: bytes) -> bytes:
        """The 32 bytes validators sign to certify ``digest`` after ``round``."""
        return bytes(self._call("checkpointMessage", round, b32(digest)))

    def validators(self) -> list[str]:
        """Registered validators in index order (the certificate bitmap order)."""
        n = int(self._call("validatorCount"))
        return [str(v) for v in self.batch([(self.network, "validators", (i,)) for i in range(n)])]

    def bls_key_of(self, validator: str) -> bytes:
        """The validator's registered BLS public key (48 bytes compressed)."""
        words = self._call("blsKeyOf", to_checksum_address(validator))
        try:
            return bls.g1_from_eip2537(b"".join(bytes(w) for w in words))
        except (bls.BlsError, TypeError) as exc:
            raise MalformedResponseError(f"blsKeyOf({validator}): {exc}") from exc

    def score_entry(self, round: int, validator: str) -> ScoreEntry:
        """A validator's score commitment/reveal for ``round``."""
        c, h, w, rev = self._call("scoreEntry", round, to_checksum_address(validator))
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
        t, v, e, *_rest = self._call("slashProposal", b32(evidence))
        return str(t), int(v), bool(e)

    def audit_draw(self, round: int, miner: str) -> AuditDraw:
        """The contract's ``auditDraw(round, miner)`` (``protocol.rounds.audits.audit_draw`` recomputes it
        locally from the seed, ``drawSize(round)`` and the run's q and c)."""
        audited, committee = self._call("auditDraw", round, to_checksum_address(miner))
        return AuditDraw(bool(audited), int(committee))

    def round_draws(self, round: int, miners: list[str]) -> list[AuditDraw]:
        """Every miner's audit draw of ``round``, computed locally from three reads (seed, draw size, q/c)."""
        seed, n = self.batch([(self.network, "seeds", (round,)), (self.network, "drawSize", (round,))])
        seed, n, p = bytes(seed), int(n), self.params()
        return [audit_draw(seed, m, n, p.audit_rate_bps, p.committee_size) for m in miners]

    def unvested_of(self, address: str) -> int:
        """Miner pay of ``address`` that has not vested yet."""
        return int(self._call("unvestedOf", to_checksum_address(address)))

    def commitment_for(self, round: int, miner: str, update_digest: bytes) -> bytes:
        """The update commitment (computed locally; equals the contract's ``commitmentFor``)."""
        return update_commitment(self.chain_id, self.network_address, round, miner, b32(update_digest))

    def events(
        self, name: str, from_block: int | None = None, to_block: int | str = "latest", **filters: Any
    ) -> list[Any]:
        """Decoded events ``name`` (a key of :data:`EVENT_TYPES`) matching indexed ``filters``."""
        if name not in EVENT_TYPES:
            raise ChainError(f"unknown event {name!r}; known: {sorted(EVENT_TYPES)}")
        start = self.deployment.block if from_block is None else from_block
        event = getattr(self.network.events, name)
        with decoding(f"{name} logs"):
            logs = retrying(
                lambda: event.get_logs(from_block=start, to_block=to_block, argument_filters=filters or None),
                name,
            )
            return [decode_event(name, ev) for ev in logs]

    def round_events(self, names: list[str], round: int, account: str | None = None) -> list[Any]:
        """Decoded events of every one of ``names`` (each with the round as its first indexed argument and,
        given ``account``, that address as its second) in one ``eth_getLogs`` (a query per event
        name was most of a node's log queries), in chain order."""
        events = {}
        for name in names:
            if name not in EVENT_TYPES:
                raise ChainError(f"unknown event {name!r}; known: {sorted(EVENT_TYPES)}")
            ev = getattr(self.network.events, name)()
            events[str(ev.topic).lower()] = (name, ev)
        topics: list[Any] = [list(events), "0x" + round.to_bytes(32, "big").hex()]
        if account is not None:
            topics.append("0x" + bytes.fromhex(to_checksum_address(account)[2:]).rjust(32, b"\0").hex())
        with decoding(f"{','.join(names)} logs"):
            logs = self._logs_since_deployment(topics, ",".join(names))
            out = []
            for log_ in logs:
                name, ev = events["0x" + bytes(log_["topics"][0]).hex()]
                out.append(decode_event(name, ev.process_log(log_)))
            return out

    def _logs_since_deployment(self, topics: list[Any], what: str) -> list[Any]:
        """The network contract's logs matching ``topics`` since the deployment block, in chain order: read
        from :data:`LOG_OVERLAP_BLOCKS` below the newest block seen at the last run of the same query (the
        logs before that are kept here), not from the deployment block every time."""
        key = json.dumps(topics)
        with self._logs_lock:
            held, head, epoch = self._logs.get(key), self._head, self._logs_epoch
        start = self.deployment.block
        if held is not None:
            start = max(start, held[0] - LOG_OVERLAP_BLOCKS + 1)
        query: Any = {
            "address": self.network.address,
            "fromBlock": start,
            "toBlock": "latest",
            "topics": topics,
        }
        got = list(retrying(lambda: self.w3.eth.get_logs(query), what))
        logs = [log_ for log_ in (held[1] if held else []) if int(log_["blockNumber"]) < start] + got
        with self._logs_lock:
            if head >= start and epoch == self._logs_epoch:  # complete to ``head``, which it has read past
                self._logs.pop(key, None)
                self._logs[key] = (head, logs)
                while len(self._logs) > LOG_QUERIES_KEPT:
                    del self._logs[next(iter(self._logs))]
        return logs

    def committed_miners(self, round: int) -> list[UpdateCommitted]:
        """Update commitments of ``round``, in ascending miner address order (the score vector order)."""
        evs: list[UpdateCommitted] = self.round_events(["UpdateCommitted"], round)
        return sorted(evs, key=lambda e: int(e.miner, 16))

    def revealed_scores(self, round: int) -> list[ScoresRevealed]:
        """Revealed score vectors of ``round``, in ascending validator address order."""
        evs: list[ScoresRevealed] = self.round_events(["ScoresRevealed"], round)
        return sorted(evs, key=lambda e: int(e.validator, 16))
