"""Where a miner's theta_r comes from: held on disk, the genesis, rebuilt, or fetched (in that order).

A checkpoint is named by the digest the chain certified; every source is checked against it. Rebuilding
(``miner.rebuild``) costs a few kB of other miners' updates instead of the whole model; a
fetch from a validator or a peer that announces the digest is the fallback.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from torch import Tensor

from miner.errors import CheckpointUnavailableError
from miner.rebuild import accepted, rebuild_checkpoint
from miner.state import MinerState
from protocol.node.api import NodeMetrics
from protocol.p2p.blobs import TransferError
from protocol.p2p.discovery import Discovery
from protocol.p2p.transfer import FetchPolicy, fetch_blob
from protocol.rounds.coordinator import Coordinator
from protocol.runspec import RunSpec
from protocol.wire.commitments import update_commitment
from protocol.wire.tensorblob import decode_tensors, encode_tensors, tensor_blob_digest, tensors_digest

log = logging.getLogger(__name__)


class CheckpointSource:
    """theta_r's tensors (``param/*``, ``momentum/*``) by certified digest, stored once obtained."""

    def __init__(
        self,
        spec: RunSpec,
        coord: Coordinator,
        discovery: Discovery,
        state: MinerState,
        fetch_policy: FetchPolicy,
        metrics: NodeMetrics,
    ) -> None:
        self.spec = spec
        self.coord = coord
        self.discovery = discovery
        self.state = state
        self.fetch_policy = fetch_policy
        self.metrics = metrics
        self.rebuilt = 0
        """Checkpoints this process rebuilt (each is used only if its digest is the certified one)."""

    def get(self, round: int, hexd: str) -> dict[str, Tensor]:
        """The checkpoint ``hexd`` (``0x`` + hex) that round ``round`` trains from;
        :class:`CheckpointUnavailableError` when no source has it."""
        held = self.held(hexd)
        if held is not None:
            return held
        rebuilt = self.rebuild(round, hexd)
        return rebuilt if rebuilt is not None else self.fetch(round, hexd)

    def held(self, hexd: str) -> dict[str, Tensor] | None:
        """A checkpoint this miner holds (stored, or the genesis) by its digest, else None."""
        if self.state.blobs.has(hexd):
            return decode_tensors(self.state.blobs.get(hexd))
        genesis = {f"param/{k}": v for k, v in self.spec.genesis_params().items()}
        return genesis if tensors_digest(genesis) == hexd else None

    def rebuild(self, round: int, hexd: str) -> dict[str, Tensor] | None:
        """theta_round rebuilt from theta_{round-1} (held), round-1's consensus and its accepted updates, if
        its digest is the certified ``hexd``; None: fetch it."""
        got = self.rebuild_uncertified(round)
        if got is None or got[1] != hexd:
            log.info("round %d: theta_r not rebuilt as the certified %s; fetching it", round, hexd[:18])
            return None
        log.info("round %d: theta_r rebuilt from the accepted updates, no checkpoint fetched", round)
        return got[0]

    def rebuild_uncertified(self, round: int) -> tuple[dict[str, Tensor], str] | None:
        """theta_round and its digest, rebuilt as the validators merge it once round-1 is finalized, before
        (or without) its certificate; stored by its own digest. None when theta_{round-1}, round-1's
        settlement or an accepted update is missing. Nothing trained from it may be committed until the
        chain certifies the same digest."""
        p = round - 1
        prev = self.state.record(p)
        if prev is not None and prev.checkpoint is not None:
            held_digest = prev.checkpoint.removeprefix("0x")
        else:  # a round it did not train (the join round): theta_{round-1} as the chain certified it
            certified = self.coord.checkpoint(p)
            if certified is None:
                return None
            held_digest = certified.hex()
        settlement = self.coord.settlement(p)
        theta = self.held("0x" + held_digest)
        if settlement is None or theta is None:
            return None
        updates = self.accepted_updates(p, settlement.consensus)
        got = rebuild_checkpoint(self.spec, theta, settlement.consensus, updates)
        if got is None:
            return None
        tensors, hexd = got
        self.state.blobs.put(encode_tensors(tensors), hexd, digest_fn=tensor_blob_digest)
        self.rebuilt += 1
        return tensors, hexd

    def accepted_updates(self, round: int, consensus: Mapping[str, int]) -> dict[str, bytes]:
        """``round``'s accepted updates, each fetched by the digest its miner announced and kept only if it
        matches that miner's on-chain commitment (a few kB each)."""
        commitments = {m.lower(): c for m, c in self.coord.update_commitments(round).items()}
        want = [m for m, _ in accepted(consensus)]
        records = {r.address.lower(): r for r in self.discovery.find(round, want=want) if r.role == "miner"}
        out: dict[str, bytes] = {}
        for miner, _score in accepted(consensus):
            rec = records.get(miner.lower())
            digest = rec.digest_of("update") if rec is not None else None
            commitment = commitments.get(miner.lower())
            if digest is None or commitment is None:
                continue
            raw = bytes.fromhex(digest.removeprefix("0x"))
            if update_commitment(self.coord.chain_id, self.coord.contract, round, miner, raw) != commitment:
                continue
            if self.state.blobs.has(digest):  # this miner's own update
                out[miner] = self.state.blobs.get(digest)
                continue
            try:
                # from the miner that announced it (a record in hand: no new pull of the round's records)
                urls = self.discovery.urls_for(round, "update", digest, address=miner)
                out[miner] = fetch_blob(urls, digest, policy=self.fetch_policy)
            except TransferError as exc:
                log.info("round %d: update of %s not fetched for the rebuild: %s", round, miner[:10], exc)
        return out

    def fetch(self, round: int, hexd: str) -> dict[str, Tensor]:
        """The checkpoint from a node that announces it, checked against its digest, then stored."""
        urls = self.discovery.urls_for(round, "checkpoint", hexd)
        if not urls:
            raise CheckpointUnavailableError(f"no peer announces checkpoint {hexd[:18]} of round {round}")
        try:
            data = fetch_blob(urls, hexd, policy=self.fetch_policy, digest_fn=tensor_blob_digest)
        except TransferError as exc:
            raise CheckpointUnavailableError(f"checkpoint {hexd[:18]}: {exc}") from exc
        self.metrics.bytes_received.labels(kind="checkpoint").inc(len(data))
        self.state.blobs.put(data, hexd, digest_fn=tensor_blob_digest)
        return decode_tensors(data)
