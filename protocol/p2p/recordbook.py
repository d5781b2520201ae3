"""Signed node records over HTTP: discovery that works when the DHT is poisoned anyway.

A stranger who runs the DHT nodes closest to a round key can answer every lookup with junk (readers
refuse it, but then find nothing). So records also travel over the nodes' own HTTP APIs: every node
keeps the records it has verified in a :class:`RecordBook`, serves them at ``GET /records/{round}`` and
accepts a pushed record at ``POST /records``; :class:`protocol.p2p.discovery.Discovery` pushes its own record
to the configured peer URLs and merges what those peers serve with what the DHT returns. Every record is
verified (:func:`protocol.wire.records.decode_record`) wherever it arrives, so no peer has to be trusted; a
peer can only withhold records, and the DHT and the other peers still carry them.

The book is bounded: at most :data:`MAX_PER_ROUND` signers per round (first come; a signer's newer record
replaces its older one) and :data:`KEEP_ROUNDS` rounds around the latest round the node worked on.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Request
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse, Response

from protocol.errors import ProtocolError
from protocol.p2p.blobs import NotModifiedError
from protocol.p2p.transfer import get_capped, new_client, stalled_recently
from protocol.wire.canonical import check_json_depth
from protocol.wire.records import MAX_RECORD_BYTES, NodeRecord, RecordError, decode_record

log = logging.getLogger(__name__)

#: Signers kept per round.
MAX_PER_ROUND = 256
#: Rounds kept behind the latest round this node worked on (and at most 2 ahead of it).
KEEP_ROUNDS = 8
#: Largest ``GET /records/{round}`` answer read from a peer.
MAX_RECORDS_RESPONSE = MAX_PER_ROUND * (MAX_RECORD_BYTES + 4) + 64


class RecordBookFullError(RecordError):
    """The book holds no room for this record (the round is full, or far from the rounds this node works on)."""


class RecordBook:
    """Verified records by round and signer, thread-safe and bounded."""

    def __init__(self, chain_id: int, *, accept: Callable[[str], bool] | None = None) -> None:
        self.chain_id = chain_id
        #: Optional filter on signers (e.g. registered on chain); None accepts any valid signer.
        self.accept = accept
        self.latest: int | None = None
        self._rounds: dict[int, dict[str, NodeRecord]] = {}
        self._lock = threading.Lock()

    def note_round(self, round: int) -> None:
        """The node works on ``round``: keep rounds near it, drop the others."""
        with self._lock:
            if self.latest is None or round > self.latest:
                self.latest = round
            for r in [r for r in self._rounds if r < self.latest - KEEP_ROUNDS]:
                del self._rounds[r]

    def add_bytes(self, data: bytes, *, now: float | None = None) -> NodeRecord:
        """Verify record bytes and keep the record; a :class:`RecordError` if refused."""
        rec = decode_record(data, now=now, chain_id=self.chain_id)
        self.add(rec)
        return rec

    def add(self, rec: NodeRecord) -> bool:
        """Keep a verified record; False if the book already holds a newer one of its signer and round."""
        if self.accept is not None and not self.accept(rec.address):
            raise RecordBookFullError(f"{rec.address} is not accepted here")
        with self._lock:
            if self.latest is not None and not self.latest - KEEP_ROUNDS <= rec.round <= self.latest + 2:
                raise RecordBookFullError(f"round {rec.round} is far from round {self.latest}")
            if self.latest is None and rec.round not in self._rounds and len(self._rounds) >= KEEP_ROUNDS:
                raise RecordBookFullError("no round known yet and the book is full")
            held = self._rounds.setdefault(rec.round, {})
            old = held.get(rec.address)
            if old is None and len(held) >= MAX_PER_ROUND:
                raise RecordBookFullError(f"round {rec.round} holds {MAX_PER_ROUND} signers")
            if old is not None and old.expires >= rec.expires:
                return old == rec
            held[rec.address] = rec
            return True

    def records(self, round: int, *, now: float | None = None) -> list[NodeRecord]:
        """The round's unexpired records, by signer."""
        t = time.time() if now is None else now
        with self._lock:
            held = list(self._rounds.get(round, {}).values())
        return sorted((r for r in held if r.expires > t), key=lambda r: r.address)


def mount_record_routes(app: FastAPI, book: RecordBook) -> None:
    """Add ``GET /records/{round}`` and ``POST /records`` for ``book`` to a node's app."""

    @app.get(
        "/records/{round}",
        summary="Signed node records this node verified for a round",
        response_model=dict[str, list[str]],
        responses={304: {"description": "Not modified: the answer the If-None-Match names is still current"}},
    )
    def get_records(round: Annotated[int, PathParam(ge=0, le=2**63 - 1)], request: Request) -> Response:
        """The records with their ``ETag``; a puller that names the current one (``If-None-Match``) gets a
        304 without them (most pulls repeat the last answer, a third of a validator's traffic)."""
        answer = JSONResponse({"records": [r.encode().decode("ascii") for r in book.records(round)]})
        tag = records_etag(bytes(answer.body))
        if request.headers.get("if-none-match") == tag:
            return Response(status_code=304, headers={"ETag": tag})
        answer.headers["ETag"] = tag
        return answer

    @app.post(
        "/records",
        summary="Push a signed node record (its canonical JSON bytes)",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"type": "object"}}},
            }
        },
        responses={
            413: {"description": "Body too large"},
            415: {"description": "Not application/json"},
            422: {"description": "Not a JSON object"},
        },
    )
    async def post_record(request: Request) -> dict[str, Any]:
        """Well-formed requests get 200 with ``accepted`` and, if false, the ``reason`` the record was refused
        (a push is a delivery: the content is the record's business); malformed requests get 4xx."""
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            raise HTTPException(415, "send the record as application/json")
        announced = request.headers.get("content-length", "")
        if announced.isdigit() and int(announced) > MAX_RECORD_BYTES:
            raise HTTPException(413, f"a record is at most {MAX_RECORD_BYTES} bytes")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_RECORD_BYTES:
                raise HTTPException(413, f"a record is at most {MAX_RECORD_BYTES} bytes")
        try:
            check_json_depth(bytes(body))
            doc = json.loads(bytes(body))
        except (ProtocolError, ValueError, RecursionError) as exc:
            raise HTTPException(422, f"not JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise HTTPException(422, "a record is a JSON object")
        try:
            rec = book.add_bytes(bytes(body))
        except RecordError as exc:
            return {"accepted": False, "reason": f"{type(exc).__name__}: {exc}"[:300]}
        return {"accepted": True, "round": rec.round, "address": rec.address}


def parse_records(body: bytes, chain_id: int, round: int) -> tuple[list[NodeRecord], int]:
    """Records of ``round`` in a ``GET /records/{round}`` answer, and how many entries were refused."""
    try:
        check_json_depth(body)
        doc = json.loads(body)
    except (ProtocolError, ValueError, RecursionError) as exc:
        raise RecordError(f"records answer is not JSON: {exc}") from exc
    items = doc.get("records") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise RecordError("records answer has no 'records' list")
    out: list[NodeRecord] = []
    refused = 0
    for item in items[:MAX_PER_ROUND]:
        try:
            if not isinstance(item, str):
                raise RecordError("record entry is not a string")
            rec = decode_record(item.encode("ascii"), chain_id=chain_id)
            if rec.round != round:
                raise RecordError(f"record of round {rec.round} served for round {round}")
            out.append(rec)
        except (RecordError, UnicodeEncodeError):
            refused += 1
    return out, refused + max(0, len(items) - MAX_PER_ROUND)


def records_etag(body: bytes) -> str:
    """The ``ETag`` of a ``GET /records/{round}`` answer: a digest of its bytes, so a puller computes the tag
    of what it got without the server keeping any state."""
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def fetch_records(
    url: str, chain_id: int, round: int, *, timeout: float, etag: str | None = None
) -> tuple[list[NodeRecord], int, str]:
    """``GET {url}/records/{round}``, bounded in bytes and wall time; records verified, refusals counted,
    and the answer's tag. With ``etag`` (the tag of the last answer): :class:`NotModifiedError` if the
    peer's answer is still that one."""
    body = get_capped(
        f"{url.rstrip('/')}/records/{round}",
        max_bytes=MAX_RECORDS_RESPONSE,
        timeout=timeout,
        headers={"If-None-Match": etag} if etag else None,
    )
    return (*parse_records(body, chain_id, round), records_etag(body))


def push_record(url: str, rec: NodeRecord, *, timeout: float) -> bool:
    """``POST {url}/records``; True if the peer accepted it. The client is closed at ``timeout`` seconds
    of wall time, so a peer that answers one byte at a time cannot hold the pushing thread."""
    client = new_client()
    timer = threading.Timer(timeout, client.close)
    timer.start()
    try:
        with client.stream(
            "POST",
            f"{url.rstrip('/')}/records",
            content=rec.encode(),
            headers={"content-type": "application/json"},
            timeout=timeout,
        ) as resp:
            return resp.status_code == 200  # the body is not read
    except Exception as exc:  # unreachable, refused, closed at the deadline: the next announce tries again
        log.debug("record push to %s failed: %s: %s", url, type(exc).__name__, exc)
        return False
    finally:
        timer.cancel()
        with contextlib.suppress(Exception):
            client.close()


class RecordExchange:
    """Pushes and pulls records to and from peers' HTTP APIs with a few worker threads."""

    def __init__(self, chain_id: int, *, timeout: float = 2.0, workers: int = 4) -> None:
        self.chain_id = chain_id
        self.timeout = timeout
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tessera-records")
        self.refused = 0
        self.errors = 0
        self._lock = threading.Lock()
        self._last: dict[tuple[str, int], tuple[str, list[NodeRecord]]] = {}
        """Each peer's last answer for a round: its tag and records (re-used when the peer answers 304)."""

    def push(self, urls: Iterable[str], rec: NodeRecord) -> None:
        """Push ``rec`` to every URL in the background (best effort: DHT and pulls also carry it)."""
        for url in dict.fromkeys(urls):
            self._pool.submit(push_record, url, rec, timeout=self.timeout)

    def pull(self, urls: Sequence[str], round: int) -> list[NodeRecord]:
        """The verified records the peers at ``urls`` serve for ``round``, fetched concurrently."""
        wanted = [u for u in dict.fromkeys(urls) if not stalled_recently(u)]
        with self._lock:  # several threads of a node look records up
            for key in [k for k in self._last if k[1] < round - KEEP_ROUNDS]:
                del self._last[key]
            last = {u: self._last.get((u, round)) for u in wanted}
        futures = [
            self._pool.submit(
                fetch_records, u, self.chain_id, round, timeout=self.timeout, etag=held[0] if held else None
            )
            for u, held in last.items()
        ]
        out: list[NodeRecord] = []
        for (url, held), fut in zip(last.items(), futures, strict=True):
            try:
                recs, refused, tag = fut.result(timeout=self.timeout + 1.0)
            except NotModifiedError:
                if held is not None:  # verified when they came, the peer still serves them: not expired here
                    now = time.time()
                    out.extend(r for r in held[1] if r.expires > now)
                continue
            except Exception as exc:  # TransferError, RecordError, or the pool's own timeout
                self.errors += 1
                log.debug(
                    "records of round %d not pulled from %s: %s: %s", round, url, type(exc).__name__, exc
                )
                continue
            with self._lock:
                self._last[(url, round)] = (tag, recs)
            self.refused += refused
            out.extend(recs)
        return out
