"""The deployment file: where a Tessera run's contracts live and with which parameters.

Written by ``tessera contracts deploy`` and read by every node. Loading is strict: unknown or missing
keys, wrong types and malformed addresses raise :class:`DeploymentError` with the offending field.

Example::

    {
      "version": 1,
      "chain_id": 31337,
      "rpc_url": "http://127.0.0.1:8545",
      "network": "0x...",          # TesseraNetwork
      "token": "0x...",            # TesseraToken (created by the network's constructor)
      "block": 1,                  # block of the network's deployment (start of event scans)
      "deployer": "0x...",
      "tx": {"network": "0x..."},  # transaction hashes of the deploy steps
      "params": {...}              # the constructor parameters (see NetworkParams)
    }
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from protocol.errors import ProtocolError
from protocol.wire.canonical import JSONFileError, read_json_file

DEPLOYMENT_VERSION = 1
_ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$")
_HASH = re.compile(r"^0x[0-9a-fA-F]{64}$")


class DeploymentError(ProtocolError):
    """A deployment file that is missing, unreadable or malformed."""


@dataclass(frozen=True)
class NetworkParams:
    """Constructor parameters of ``TesseraNetwork`` (immutable once deployed). Amounts are in wei."""

    min_miner_stake: int = 350_000 * 10**18
    """Minimum active stake to commit updates: 1,500 rounds of an honest miner's reward (200 tokens at the
    default emission and 4 miners), so that the deterrence formula audits 0.40% of (miner, round) pairs with
    committees of one (``protocol.rounds.auditspec``; docs/threat-model.md, "The default stake")."""
    min_validator_stake: int = 1_000 * 10**18
    """Minimum active stake to act as a validator."""
    unbonding_blocks: int = 50
    """Blocks from an unbonding request to the withdrawal (the stake stays slashable meanwhile)."""
    commit_blocks: int = 10
    """Length of the update Commit phase."""
    reveal_blocks: int = 5
    """Length of the Reveal phase (updates served, seed shares revealed)."""
    score_commit_blocks: int = 5
    """Length of the ScoreCommit phase (verification, score commitments)."""
    score_reveal_blocks: int = 5
    """Length of the ScoreReveal phase."""
    emission_per_round: int = 1_000 * 10**18
    """Tokens paid per finalized round while the pool lasts."""
    validator_share_bps: int = 2_000
    """Share of the emission paid to validators (basis points)."""
    slash_bps: int = 5_000
    """Fraction of (stake + unbonding) burned by one confirmed proof, and of a proposer's by a rejected one
    (basis points). With every default here (q = 1, every validator on the committee) the deterrence
    margin is far above 2 at the minimum stake; a run file's audit section lowers q to what the formula
    needs (docs/threat-model.md)."""
    pool_supply: int = 1_000_000 * 10**18
    """Tokens minted to the network as the reward pool."""
    genesis_supply: int = 100_000_000 * 10**18
    """Tokens minted to the deployer (stake to hand out: 300 miners at the minimum stake)."""
    genesis_checkpoint: str = "0x" + "00" * 32
    """Digest of theta_1 (hex, 32 bytes)."""
    audit_rate_bps: int = 10_000
    """q: probability (basis points) that a (miner, round) is audited, drawn from the round seed."""
    committee_size: int = 0
    """c: validators on each audit committee (0: every validator, as the nodes verify today)."""
    vesting_rounds: int = 2
    """K: a round's miner pay vests when round + K is finalized; forfeited if a proof is confirmed first."""

    def as_tuple(self) -> tuple[Any, ...]:
        """The ``Params`` struct for the constructor."""
        return (
            self.min_miner_stake,
            self.min_validator_stake,
            self.unbonding_blocks,
            self.commit_blocks,
            self.reveal_blocks,
            self.score_commit_blocks,
            self.score_reveal_blocks,
            self.emission_per_round,
            self.validator_share_bps,
            self.slash_bps,
            self.pool_supply,
            self.genesis_supply,
            bytes.fromhex(self.genesis_checkpoint[2:]),
            self.audit_rate_bps,
            self.committee_size,
            self.vesting_rounds,
        )

    def validate(self) -> None:
        """Checks ranges the contract would reject, with a clear message."""
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "genesis_checkpoint":
                if not isinstance(v, str) or not _HASH.match(v):
                    raise DeploymentError(f"params.genesis_checkpoint must be 0x + 64 hex digits, got {v!r}")
            elif not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise DeploymentError(f"params.{f.name} must be a non-negative integer, got {v!r}")
        if max(self.validator_share_bps, self.slash_bps, self.audit_rate_bps) > 10_000:
            raise DeploymentError(
                "params.validator_share_bps, params.slash_bps and params.audit_rate_bps must be <= 10000"
            )
        if self.committee_size > 256 or self.vesting_rounds >= 2**16:
            raise DeploymentError("params.committee_size must be <= 256 and vesting_rounds < 65536")
        if (
            min(self.commit_blocks, self.reveal_blocks, self.score_commit_blocks, self.score_reveal_blocks)
            == 0
        ):
            raise DeploymentError("every phase must last at least one block")
        if self.min_miner_stake == 0 or self.min_validator_stake == 0:
            raise DeploymentError("minimum stakes must be positive")
        if self.pool_supply + self.genesis_supply >= 2**96:
            raise DeploymentError("pool_supply + genesis_supply must fit in 96 bits")


@dataclass(frozen=True)
class Deployment:
    """A deployed Tessera run, as the nodes see it."""

    chain_id: int
    network: str
    token: str
    block: int
    deployer: str
    params: NetworkParams
    rpc_url: str = ""
    tx: dict[str, str] = field(default_factory=dict)
    version: int = DEPLOYMENT_VERSION

    def to_json(self) -> dict[str, Any]:
        """The JSON object written to the deployment file."""
        d = asdict(self)
        d["params"] = asdict(self.params)
        return d

    def save(self, path: Path) -> None:
        """Writes atomically (a crash never leaves a half-written file)."""
        save_json(path, self.to_json())

    @classmethod
    def from_json(cls, data: Any, source: str = "<deployment>") -> Deployment:
        """Strictly parses a deployment object."""
        if not isinstance(data, dict):
            raise DeploymentError(f"{source}: expected a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise DeploymentError(f"{source}: unknown keys {sorted(unknown)}")
        for key in ("chain_id", "network", "token", "block", "deployer", "params"):
            if key not in data:
                raise DeploymentError(f"{source}: missing key {key!r}")
        if data.get("version", DEPLOYMENT_VERSION) != DEPLOYMENT_VERSION:
            raise DeploymentError(f"{source}: unsupported version {data.get('version')!r}")
        for key in ("chain_id", "block"):
            if not isinstance(data[key], int) or isinstance(data[key], bool) or data[key] < 0:
                raise DeploymentError(f"{source}: {key} must be a non-negative integer")
        for key in ("network", "token", "deployer"):
            if not isinstance(data[key], str) or not _ADDRESS.match(data[key]):
                raise DeploymentError(f"{source}: {key} must be a 0x-prefixed 20-byte address")
        tx = data.get("tx", {})
        if not isinstance(tx, dict) or not all(isinstance(v, str) and _HASH.match(v) for v in tx.values()):
            raise DeploymentError(f"{source}: tx must map step names to transaction hashes")
        p = data["params"]
        if not isinstance(p, dict):
            raise DeploymentError(f"{source}: params must be an object")
        pknown = {f.name for f in fields(NetworkParams)}
        # files written before audits existed lack the audit and vesting parameters: their contract had none,
        # which is q = 1, every validator and no vesting
        p = {"audit_rate_bps": 10_000, "committee_size": 0, "vesting_rounds": 0, **p}
        if set(p) != pknown:
            missing, extra = pknown - set(p), set(p) - pknown
            raise DeploymentError(f"{source}: params missing {sorted(missing)}, unknown {sorted(extra)}")
        params = NetworkParams(**p)
        params.validate()
        rpc = data.get("rpc_url", "")
        if not isinstance(rpc, str):
            raise DeploymentError(f"{source}: rpc_url must be a string")
        return cls(
            chain_id=data["chain_id"],
            network=data["network"],
            token=data["token"],
            block=data["block"],
            deployer=data["deployer"],
            params=params,
            rpc_url=rpc,
            tx=dict(tx),
        )

    @classmethod
    def load(cls, path: Path | str) -> Deployment:
        """Reads and strictly parses a deployment file."""
        p = Path(path)
        try:
            data = read_json_file(p)
        except JSONFileError as exc:
            if exc.missing:
                raise DeploymentError(
                    f"deployment file {p} not found (run `tessera contracts deploy`)"
                ) from exc
            raise DeploymentError(f"cannot read deployment file {p}: {exc}") from exc
        return cls.from_json(data, str(p))


def save_json(path: Path, data: Any) -> None:
    """Atomically writes ``data`` as indented JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
