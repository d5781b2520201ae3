"""The validator's HTTP API beyond the common node routes: signatures, held updates, verdicts, the round
summary, the live page and the miners' upload probe (``POST /link/probe``, ``protocol.p2p.linkprobe``;
OpenAPI at ``/docs``)."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException
from fastapi.responses import HTMLResponse, Response

from protocol.node.account import ChainAccount
from protocol.node.statusdoc import NodeStatus, ValidatorStatus
from protocol.p2p.linkprobe import mount_link_probe
from validator.checkpoints import Checkpoints
from validator.connections import Connections
from validator.intake import Intake
from validator.keyuse import KeyUse
from validator.web import LIVE_PAGE


class ValidatorApi:
    """Routes and the documents they serve, read from the state and from what ``intake`` and
    ``checkpoints`` hold now."""

    def __init__(self, conn: Connections, intake: Intake, checkpoints: Checkpoints) -> None:
        self.conn = conn
        self.intake = intake
        self.checkpoints = checkpoints
        self.account: ChainAccount | None = None
        """This validator's account figures (created on first use; None on an in-memory coordinator)."""
        self._account_read = False
        self.key_use = KeyUse(conn.coord, conn.state, conn.address)
        """Watches this key for a second validator on it (the node checks at each step; ``/status``
        ``key_in_use`` shows the conflict)."""

    def add_routes(self, app: Any) -> None:
        """The validator's routes on the node's app; the account is refreshed before each collection."""
        state, public, address = self.conn.state, self.conn.public, self.conn.address

        @app.get("/signatures/{round}", summary="This validator's signature of theta_{round+1}'s digest")
        def signature(round: int) -> dict[str, Any]:
            rec = state.rounds().get(round)
            if rec is None or rec.signature is None:
                raise HTTPException(status_code=404, detail="not signed yet")
            return {"round": round, "digest": rec.merged, "signer": address, "signature": rec.signature}

        @app.get(
            "/updates/{round}/{miner}",
            summary="The update this validator holds for a miner (bytes that matched its commitment)",
            response_class=Response,
            responses={
                200: {
                    "content": {
                        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
                    }
                }
            },
        )
        def held_update(round: int, miner: str) -> Any:
            # read without creating: a lookup of an unknown round must not add a record (state.json growth)
            rec = state.rounds().get(round)
            digest = (rec.updates or {}).get(miner) if rec is not None else None
            if not digest or not public.has(digest):
                raise HTTPException(status_code=404, detail="not held")
            return Response(public.get(digest), media_type="application/octet-stream")

        @app.get("/verdicts/{round}", summary="Verdicts (with evidence) of a round")
        def verdicts(round: int) -> dict[str, Any]:
            rec = state.rounds().get(round)
            return {m: v.to_json() for m, v in rec.verdicts.items()} if rec is not None else {}

        @app.get("/rounds", summary="Per-round summary: scores, consensus, rewards, losses")
        def rounds() -> list[dict[str, Any]]:
            return self.summary()

        @app.get("/", response_class=HTMLResponse, summary="Live page of the network")
        def live() -> str:
            return LIVE_PAGE

        mount_link_probe(app)  # a miner measures its upload here before it stakes
        self.conn.metrics.before_collect.append(self._refresh_account)

    def _account(self) -> ChainAccount | None:
        if not self._account_read:
            self.account = ChainAccount.of(self.conn.coord, self.conn.address, self.conn.metrics)
            self._account_read = True
        return self.account

    def _refresh_account(self) -> None:
        """Read the account from the chain after the first ``/status`` or ``/metrics`` request of a round
        (a validator's figures change when a round is finalized, which opens the next, and when it claims),
        in the background: the request is answered at once with the figures of the block they name."""
        acc = self._account()
        if acc is not None:
            acc.refresh_soon(self.intake.cache.round)

    def summary(self) -> list[dict[str, Any]]:
        """Per-round summary for the API and the live page."""
        out = []
        for r, rec in sorted(self.conn.state.rounds().items()):
            v = rec.verdicts
            out.append(
                {
                    "round": r,
                    "scores": {m: x.score for m, x in v.items()},
                    "stages": {m: x.stage for m, x in v.items()},
                    "consensus": rec.consensus or {},
                    "rewards": rec.rewards or {},
                    "heldout_before": rec.heldout_before,
                    "heldout_after": rec.heldout_after,
                    "checkpoint": rec.merged,
                    "certified": bool(rec.certified),
                    "verify_seconds": rec.verify_seconds,
                }
            )
        return out

    def status(self) -> dict[str, Any]:
        """The /status document (``protocol.node.statusdoc``)."""
        theta = self.checkpoints.theta
        return NodeStatus.read(
            self.conn,
            round=self.intake.cache.round,
            account=self._account_json(),
            key_in_use=self.key_use.conflict,
            part=ValidatorStatus(theta_round=theta.round if theta else None),
        ).to_json()

    def _account_json(self) -> dict[str, Any] | None:
        self._refresh_account()
        acc = self._account()
        return acc.to_json() if acc is not None else None
