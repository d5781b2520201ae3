"""The validator's HTTP API beyond the common node routes: signatures, held updates, verdicts, the round
summary and the live page (OpenAPI at ``/docs``)."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException
from fastapi.responses import HTMLResponse, Response

from protocol.node.account import ChainAccount
from validator.parts import ValidatorParts
from validator.web import LIVE_PAGE


class ApiMixin(ValidatorParts):
    """Routes and the documents they serve."""

    def _add_routes(self, app: Any) -> None:
        @app.get("/signatures/{round}", summary="This validator's signature of theta_{round+1}'s digest")
        def signature(round: int) -> dict[str, Any]:
            rec = self.state.rounds().get(round)
            if rec is None or rec.signature is None:
                raise HTTPException(status_code=404, detail="not signed yet")
            return {"round": round, "digest": rec.merged, "signer": self.address, "signature": rec.signature}

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
            rec = self.state.rounds().get(round)
            digest = (rec.updates or {}).get(miner) if rec is not None else None
            if not digest or not self.public.has(digest):
                raise HTTPException(status_code=404, detail="not held")
            return Response(self.public.get(digest), media_type="application/octet-stream")

        @app.get("/verdicts/{round}", summary="Verdicts (with evidence) of a round")
        def verdicts(round: int) -> dict[str, Any]:
            rec = self.state.rounds().get(round)
            return {m: v.to_json() for m, v in rec.verdicts.items()} if rec is not None else {}

        @app.get("/rounds", summary="Per-round summary: scores, consensus, rewards, losses")
        def rounds() -> list[dict[str, Any]]:
            return self.summary()

        @app.get("/", response_class=HTMLResponse, summary="Live page of the network")
        def live() -> str:
            return LIVE_PAGE

        self.metrics.before_collect.append(self._refresh_account)

    def _account(self) -> ChainAccount | None:
        """This validator's account figures (created on first use; None on an in-memory coordinator)."""
        if "_chain_account" not in self.__dict__:
            self.__dict__["_chain_account"] = ChainAccount.of(self.coord, self.address, self.metrics)
        acc: ChainAccount | None = self.__dict__["_chain_account"]
        return acc

    def _refresh_account(self) -> None:
        """Read the account from the chain after the first ``/status`` or ``/metrics`` request of a round
        (a validator's figures change when a round is finalized, which opens the next, and when it claims),
        in the background: the request is answered at once with the figures of the block they name."""
        acc = self._account()
        if acc is not None:
            acc.refresh_soon(self._cache.round)

    def summary(self) -> list[dict[str, Any]]:
        """Per-round summary for the API and the live page."""
        out = []
        for r, rec in sorted(self.state.rounds().items()):
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
        """The /status document."""
        return {
            "role": "validator",
            "address": self.address,
            "url": self.url,
            "round": self._cache.round,
            "phase": self.phase,
            "last_error": self.last_error,
            "theta_round": self._theta.round if self._theta else None,
            "account": self._account_json(),
            "dht_refused_records": self.discovery.refused,
            "dht_maddrs": self.discovery.dht.visible_maddrs()
            if self.discovery.dht is not None and self.discovery.dht.running
            else [],
        }

    def _account_json(self) -> dict[str, Any] | None:
        self._refresh_account()
        acc = self._account()
        return acc.to_json() if acc is not None else None
