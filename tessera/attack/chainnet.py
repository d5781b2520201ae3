"""A scenario's chain: a fresh anvil with freshly deployed ``TesseraNetwork``, seen as the harness's ledger.

Every scenario gets its own anvil (``protocol.rounds.anvil.Anvil``, ``--hardfork prague``, automine: each
transaction is a block) and its own deployment, made, funded and fast-forwarded with the devnet's code
(``tessera.devnet.network.deploy_contracts`` / ``fast_forward_phase`` / ``anvil_rpc``). The nodes talk to
it through ``protocol.chain.coordinator.ChainCoordinator``: commits, reveals, settlement, certification and
slashing (propose + 2/3 stake vote) are the contract's.

:class:`AnvilLedger` exposes, read from the chain (state and event logs), what the harness and the
runner read of :class:`protocol.rounds.memcoordinator.MemoryLedger`: ``round``, ``phase``, ``checkpoints``,
``rounds[r].commits / reveals / settlement``, ``slashed`` and ``mine``.

Round 1 opens in the contract's constructor, before anyone can register, so it has no miners: it is a
warm-up round (validators only). Scenario round ``r`` is chain round ``r + OFFSET``; the view shifts.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eth_account import Account
from eth_utils import to_checksum_address

from protocol.chain import Chain
from protocol.chain.coordinator import ChainCoordinator
from protocol.rounds.anvil import Anvil
from protocol.rounds.coordinator import Settlement
from protocol.rounds.deployment import Deployment
from protocol.rounds.phases import Phase
from tessera.devnet.chainops import anvil_rpc, deploy_contracts, fast_forward_phase

WEI = 10**18
#: Chain rounds before scenario round 1 (the constructor's round 1, which no miner can join).
OFFSET = 1
_DEPLOYER = "0x" + (0xD00D).to_bytes(32, "big").hex()


@dataclass
class ChainRound:
    """One round as the runner reads it (the shape of ``MemoryLedger.rounds[r]``)."""

    commits: dict[str, bytes] = field(default_factory=dict)
    reveals: dict[str, list[int]] = field(default_factory=dict)
    settlement: Any = None


@dataclass
class LedgerSnapshot:
    """What the runner reads of a finished scenario's chain, kept after anvil is stopped."""

    rounds: dict[int, ChainRound]
    slashed: dict[str, int]
    checkpoints: dict[int, bytes]
    slash_proposals: dict[bytes, bool] = field(default_factory=dict)
    """Evidence hash of every slash proposal -> whether it executed."""
    kind: str = "anvil"
    audits: dict[tuple[int, str], bool] = field(default_factory=dict)
    """(scenario round, miner) -> whether the round's seed drew it for an audit (``auditDraw``)."""
    proposals: list[dict[str, Any]] = field(default_factory=list)
    """Every slash proposal as the events tell it: target, proposer, (scenario) round, whether it is an
    unanswered audit, whether it executed, the stake it took and the pay it forfeited (tokens in wei)."""


class AnvilLedger:
    """A fresh anvil and deployment for one scenario, read as a ledger (see the module doc)."""

    kind = "anvil"

    def __init__(
        self,
        accounts: list[tuple[str, int]],
        genesis: str,
        *,
        phase_blocks: int = 40,
        emission: int = 1000 * WEI,
        validator_share_bps: int = 1000,
        workdir: Path | None = None,
        audit_params: dict[str, int] | None = None,
    ) -> None:
        """``accounts``: (private key, tokens to fund) per participant; ``genesis``: theta_1's digest;
        ``audit_params``: ``audit_rate_bps``, ``committee_size``, ``vesting_rounds`` of the deployment
        (default: q = 1, every validator, and ``NetworkParams``' vesting)."""
        self._tmp = tempfile.TemporaryDirectory(prefix="tessera-attack-chain-") if workdir is None else None
        wd = Path(self._tmp.name) if self._tmp is not None else Path(str(workdir))
        self.anvil = Anvil(accounts=2).start()
        self.rpc_url = self.anvil.rpc_url
        try:
            for key, _ in [(_DEPLOYER, 0), *accounts]:
                anvil_rpc(self.rpc_url, "anvil_setBalance", [Account.from_key(key).address, hex(10**24)])
            path = wd / "deployment.json"
            params = {
                "genesis_checkpoint": genesis,
                "min_miner_stake": WEI,
                "min_validator_stake": WEI,
                "commit_blocks": phase_blocks,
                "reveal_blocks": phase_blocks,
                "score_commit_blocks": phase_blocks,
                "score_reveal_blocks": phase_blocks,
                "emission_per_round": emission,
                "validator_share_bps": validator_share_bps,
                "slash_bps": 1000,
                "audit_rate_bps": 10_000,
                "committee_size": 0,
                **(audit_params or {}),
            }
            fund = {Account.from_key(k).address: tokens * WEI for k, tokens in accounts}
            deploy_contracts(self.rpc_url, _DEPLOYER, path, params, fund)
            self.deployment = Deployment.load(path)
            self.chain = Chain.connect(self.deployment, rpc_url=self.rpc_url)
        except BaseException:
            self.close()
            raise
        self.chain_id = self.chain.chain_id
        self.contract = self.chain.network_address

    # -- nodes -----------------------------------------------------------------------------------------
    def coordinator(self, private_key: str) -> Any:
        """The node's real chain coordinator, signing with ``private_key``."""
        chain = Chain.connect(self.deployment, Account.from_key(private_key), rpc_url=self.rpc_url)
        return ChainCoordinator(chain, private_key)

    def fast_forward(self, validators: int, miners: set[str], served: Any) -> bool:
        """The devnet's pacing: mine the rest of a phase once every node has done its part."""
        return fast_forward_phase(self.chain, self.rpc_url, validators, miners, served)

    def mine(self, n: int = 1) -> None:
        """Mine ``n`` empty blocks."""
        anvil_rpc(self.rpc_url, "anvil_mine", [hex(n)])

    def close(self) -> None:
        """Stop anvil and remove the work directory."""
        self.anvil.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    def snapshot(self) -> LedgerSnapshot:
        """The rounds, slashes and checkpoints as they are now."""
        return LedgerSnapshot(
            self.rounds, self.slashed, self.checkpoints, self.slash_proposals,
            audits=self.audits, proposals=self.proposals,
        )  # fmt: skip

    # -- the ledger view (scenario rounds) -------------------------------------------------------------
    @property
    def block(self) -> int:
        """Latest block."""
        return int(self.chain.block_number())

    @property
    def round(self) -> int:
        """The scenario round (chain round - OFFSET)."""
        return int(self.chain.round_state().round) - OFFSET

    @property
    def phase(self) -> Any:
        """The current phase (``protocol.rounds.coordinator.Phase``)."""
        return Phase(int(self.chain.round_state().phase))

    @property
    def checkpoints(self) -> dict[int, bytes]:
        """Certified checkpoints by scenario round (1: the checkpoint scenario round 1 starts from)."""
        top = int(self.chain.round_state().round) + 1
        out = {}
        for cr in range(1 + OFFSET, top + 1):
            cp = bytes(self.chain.checkpoint(cr))
            if cp != b"\0" * 32:
                out[cr - OFFSET] = cp
        return out

    @property
    def rounds(self) -> dict[int, ChainRound]:
        """Commitments, revealed scores and settlement of every scenario round, from the event logs."""
        out: dict[int, ChainRound] = {}
        last = int(self.chain.round_state().round)
        fin = {int(e.round) for e in self.chain.events("RoundFinalized")}
        mr = self.chain.events("MinerRewarded")
        vr = self.chain.events("ValidatorRewarded")
        commits = self.chain.events("UpdateCommitted")
        reveals = self.chain.events("ScoresRevealed")
        for cr in range(1 + OFFSET, last + 1):
            rd = ChainRound()
            for e in commits:
                if int(e.round) == cr:
                    rd.commits[to_checksum_address(e.miner)] = bytes(e.commitment)
            for e in reveals:
                if int(e.round) == cr:
                    rd.reveals[to_checksum_address(e.validator)] = [int(x) for x in e.scores]
            if cr in fin:
                rd.settlement = Settlement(
                    consensus={to_checksum_address(e.miner): int(e.consensus) for e in mr if e.round == cr},
                    miner_rewards={to_checksum_address(e.miner): int(e.amount) for e in mr if e.round == cr},
                    validator_rewards={
                        to_checksum_address(e.validator): int(e.amount) for e in vr if e.round == cr
                    },
                )
            out[cr - OFFSET] = rd
        return out

    @property
    def slashed(self) -> dict[str, int]:
        """Executed slashes per address (the contract's ``Slashed`` events)."""
        out: dict[str, int] = {}
        for e in self.chain.events("Slashed"):
            a = to_checksum_address(e.target)
            out[a] = out.get(a, 0) + 1
        return out

    @property
    def slash_proposals(self) -> dict[bytes, bool]:
        """Every slash proposal's evidence hash, and whether it executed (``SlashProposed``, ``Slashed``):
        a proposal that never executes is the issue-10 symptom (6 proposals, 2 slashes)."""
        done = {bytes(e.evidence) for e in self.chain.events("Slashed")}
        return {bytes(e.evidence): bytes(e.evidence) in done for e in self.chain.events("SlashProposed")}

    @property
    def audits(self) -> dict[tuple[int, str], bool]:
        """(scenario round, miner) -> audited, for every committed miner of a round whose seed is fixed."""
        out: dict[tuple[int, str], bool] = {}
        by_round: dict[int, list[str]] = {}
        for e in self.chain.events("UpdateCommitted"):
            by_round.setdefault(int(e.round), []).append(to_checksum_address(e.miner))
        for cr, miners in sorted(by_round.items()):
            if self.chain.seed(cr) == b"\0" * 32:
                continue
            for m, d in zip(miners, self.chain.round_draws(cr, miners), strict=True):
                out[(cr - OFFSET, m)] = bool(d.audited)
        return out

    @property
    def proposals(self) -> list[dict[str, Any]]:
        """Every slash proposal with its outcome, from ``SlashProposed``, ``Slashed``, ``Forfeited`` and, for
        one closed without a slash, ``SlashRejected`` / ``ReportExpired`` (the pay it released)."""
        slashed = {bytes(e.evidence): int(e.amount) for e in self.chain.events("Slashed")}
        rejected = {bytes(e.evidence): int(e.released) for e in self.chain.events("SlashRejected")}
        expired = {bytes(e.evidence): int(e.released) for e in self.chain.events("ReportExpired")}
        forfeited: dict[bytes, int] = {}
        for e in self.chain.events("Forfeited"):
            forfeited[bytes(e.evidence)] = forfeited.get(bytes(e.evidence), 0) + int(e.amount)
        out = []
        for e in self.chain.events("SlashProposed"):
            ev, target, rnd = bytes(e.evidence), to_checksum_address(e.target), int(e.round)
            out.append({
                "evidence": ev.hex(), "target": target, "proposer": to_checksum_address(e.proposer),
                "round": rnd - OFFSET, "unanswered": ev == self.unanswered_evidence(target, rnd),
                "executed": ev in slashed, "stake_taken": slashed.get(ev, 0), "forfeited": forfeited.get(ev, 0),
                "rejected": ev in rejected, "expired": ev in expired,
                "released": rejected.get(ev, 0) + expired.get(ev, 0),
            })  # fmt: skip
        return out

    def unanswered_evidence(self, miner: str, chain_round: int) -> bytes:
        """The contract's ``unansweredEvidence(miner, round)``."""
        return bytes(self.chain.network.functions.unansweredEvidence(miner, chain_round).call())
