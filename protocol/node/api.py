"""The HTTP API every node serves (miner and validator alike), built by one factory.

Routes: ``GET /health``, ``GET /status`` (round, phase, what the node did), ``GET /metrics`` (Prometheus),
``GET /blobs/{digest}`` (bulk bytes by digest, streamed), ``GET /traffic`` (the node's traffic ledger:
bytes by round and kind, :mod:`protocol.node.traffic`), and FastAPI's OpenAPI docs at ``/docs`` and
``/openapi.json``. A role adds its own routes on the returned app. :class:`NodeServer` runs the app with
uvicorn in a background thread on a given or a free port.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

import uvicorn
from fastapi import FastAPI, HTTPException
from fastapi import Path as PathParam
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from swagger_ui_bundle import swagger_ui_path

from protocol.errors import ProtocolError
from protocol.node.roundreport import RoundReport
from protocol.node.traffic import SNIFF_BYTES, Kind, TrafficLedger, TrafficMiddleware, blob_kind
from protocol.p2p.blobs import BadDigestError, BlobStore, check_digest_str


class NodeNotReadyError(ProtocolError):
    """Raised by a blob ``fallback`` while the node has not caught up since it started: answered 503 with
    ``Retry-After``, so a peer retries instead of taking a 404 ("not served here") as final."""


class NodeServerError(ProtocolError):
    """The node's HTTP server could not start."""


#: What ``protocol.p2p.transfer.check_digest_str`` accepts, as an OpenAPI (ECMA) pattern, so the spec says what
#: a digest is and a malformed one is refused by validation (422) like any other bad parameter. (Validation
#: uses pydantic's Rust regex, where ``$`` does not match before a trailing newline.)
DIGEST_PATTERN = r"^(0x)?[0-9a-f]{16,128}$"

#: The body of every error answer (``HTTPException``'s ``{"detail": ...}``).
_ERROR_BODY = {
    "application/json": {
        "schema": {
            "type": "object",
            "properties": {"detail": {"type": "string"}},
            "required": ["detail"],
        }
    }
}


@dataclass
class NodeMetrics:
    """The Prometheus metrics every node exports, on a registry of its own."""

    registry: CollectorRegistry
    round: Gauge
    rounds: Counter
    bytes_sent: Counter
    bytes_received: Counter
    phase_seconds: Histogram
    verifications: Counter
    account: Gauge
    """This node's account as the chain holds it (``protocol.node.account``), in tokens by ``figure``."""
    account_block: Gauge
    errors: Counter
    traffic: Counter
    rpc_requests: Counter
    before_collect: list[Callable[[], None]] = field(default_factory=list)
    """Run at each scrape before the metrics are collected (a node refreshes its account figures)."""
    round_report: RoundReport = field(default_factory=lambda: RoundReport("node"))
    """The last settled round's figures and its log line (``protocol.node.roundreport``; ``/status``)."""

    @classmethod
    def create(cls, role: str) -> NodeMetrics:
        """Fresh metrics named ``tessera_{role}_*``."""
        reg = CollectorRegistry()
        before: list[Callable[[], None]] = []
        reg.register(_BeforeCollect(before))  # type: ignore[arg-type]
        p = f"tessera_{role}"
        return cls(
            registry=reg,
            before_collect=before,
            round_report=RoundReport(role),
            round=Gauge(f"{p}_round", "Current round", registry=reg),
            rounds=Counter(f"{p}_rounds", "Rounds completed", registry=reg),
            bytes_sent=Counter(f"{p}_bytes_sent", "Bytes served over HTTP", ["kind"], registry=reg),
            bytes_received=Counter(f"{p}_bytes_received", "Bytes fetched over HTTP", ["kind"], registry=reg),
            phase_seconds=Histogram(
                f"{p}_phase_seconds",
                "Wall seconds per phase",
                ["phase"],
                buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
                registry=reg,
            ),
            verifications=Counter(f"{p}_verifications", "Verification outcomes", ["outcome"], registry=reg),
            account=Gauge(
                f"{p}_account_tokens",
                "This node's account read from the chain, in tokens (exact wei in /status): figure=stake "
                "(bonded), owed (rewards not yet claimed), claimed (rewards claimed so far)",
                ["figure"],
                registry=reg,
            ),
            account_block=Gauge(f"{p}_account_block", "Block the account figures were read at", registry=reg),
            errors=Counter(f"{p}_errors", "Errors by type", ["type"], registry=reg),
            rpc_requests=Counter(
                f"{p}_rpc_requests",
                "JSON-RPC requests to the chain endpoint by method (eth_call:<function> for contract reads)",
                ["method"],
                registry=reg,
            ),
            traffic=Counter(
                f"{p}_traffic_bytes",
                "Bytes moved over HTTP and JSON-RPC by kind; field: sent, received, sent_overhead "
                "(headers), received_overhead",
                ["kind", "field"],
                registry=reg,
            ),
        )


class _BeforeCollect:
    """A collector that yields nothing and runs hooks first (registered before the node's metrics, so a
    hook that refreshes a gauge does so before the gauge is collected)."""

    def __init__(self, hooks: list[Callable[[], None]]) -> None:
        self.hooks = hooks

    def collect(self) -> list[Any]:
        for hook in list(self.hooks):
            hook()
        return []


def create_node_app(
    *,
    role: str,
    status: Callable[[], dict[str, Any]],
    store: BlobStore,
    metrics: NodeMetrics,
    version: str = "0.1.0",
    fallback: Callable[[str], bytes | None] | None = None,
    traffic: TrafficLedger | None = None,
) -> FastAPI:
    """Build the common node API; the caller may add routes to the returned app.

    ``fallback(digest)`` produces blobs not in ``store`` on demand (a miner's transcript states).
    ``traffic``: count every request and answer there (and in the ``traffic_bytes`` metric), and serve it
    at ``GET /traffic``.
    """
    app = FastAPI(
        title=f"Tessera {role}",
        version=version,
        description=f"The {role} node's API: health, status, metrics and blobs by digest.",
        docs_url=None,  # served below from bundled assets: FastAPI's loads them from a CDN (blank offline)
        redoc_url=None,
    )
    _offline_docs(app)
    started = time.time()

    @app.get("/health", summary="Liveness")
    def health() -> dict[str, Any]:
        return {"ok": True, "role": role, "uptime_s": round(time.time() - started, 3)}

    @app.get("/status", summary="Round, phase and what the node did")
    def get_status() -> dict[str, Any]:
        # the last settled round's one-line report, the same figures as the node's INFO line
        return {**status(), "round_report": metrics.round_report.to_json()}

    @app.get("/metrics", summary="Prometheus metrics", response_class=Response)
    def get_metrics() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    _mount_blobs(app, store, metrics, fallback)
    if traffic is not None:
        _count_traffic(app, traffic, store, metrics, has_fallback=fallback is not None)
    _document_misses(app)
    return app


def _mount_blobs(
    app: FastAPI, store: BlobStore, metrics: NodeMetrics, fallback: Callable[[str], bytes | None] | None
) -> None:
    """``GET /blobs/{digest}``: a blob of ``store`` streamed, or one ``fallback`` produces on demand; 400 for
    a malformed digest, 404 when not served here, 503 while the node is restoring its round."""

    @app.get(
        "/blobs/{digest}",
        summary="A blob by digest",
        response_class=StreamingResponse,
        responses={
            200: {
                "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
            },
            404: {"description": "not served here"},
            400: {"description": "not a digest"},
            503: {"description": "the node is starting and has not caught up yet; retry"},
        },
    )
    def get_blob(
        digest: Annotated[str, PathParam(pattern=DIGEST_PATTERN, description="lower-case hex, 0x optional")],
    ) -> StreamingResponse:
        try:
            check_digest_str(digest)
            if not store.has(digest):
                data = fallback(digest) if fallback is not None else None
                if data is None:
                    raise HTTPException(status_code=404, detail="not found")
                metrics.bytes_sent.labels(kind="blob").inc(len(data))
                return StreamingResponse(
                    iter([data]),
                    media_type="application/octet-stream",
                    headers={"content-length": str(len(data))},
                )
            size = store.size(digest)
        except BadDigestError as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from exc
        except NodeNotReadyError as exc:
            raise HTTPException(status_code=503, detail=str(exc), headers={"Retry-After": "1"}) from exc
        metrics.bytes_sent.labels(kind="blob").inc(size)
        return StreamingResponse(
            store.iter_chunks(digest),
            media_type="application/octet-stream",
            headers={"content-length": str(size)},
        )


def _count_traffic(
    app: FastAPI, ledger: TrafficLedger, store: BlobStore, metrics: NodeMetrics, *, has_fallback: bool
) -> None:
    """Mount the ledger's middleware and ``GET /traffic``; feed the Prometheus counter."""

    def kind_of_blob(digest: str) -> Kind:
        if store.has(digest):
            with open(store.path(digest), "rb") as fh:
                return blob_kind(fh.read(SNIFF_BYTES))
        return Kind.STATE if has_fallback else Kind.OTHER  # a miner's fallback serves transcript states

    ledger.on_add = lambda kind, field, n: metrics.traffic.labels(kind=kind.value, field=field).inc(n)
    ledger.on_call = lambda label: metrics.rpc_requests.labels(method=label).inc()
    app.add_middleware(TrafficMiddleware, ledger=ledger, blob=kind_of_blob)

    @app.get("/traffic", summary="Bytes this node moved, by round and kind (ledger)")
    def get_traffic() -> dict[str, dict[str, dict[str, int]]]:
        """``{round: {kind: {sent, received, sent_overhead, received_overhead}}}``: HTTP this node served
        (counted once, by the server) and its own JSON-RPC with the chain."""
        return ledger.to_json()

    @app.get("/traffic/client", summary="HTTP this node made as a client, by round and kind")
    def get_client_traffic() -> dict[str, dict[str, dict[str, int]]]:
        """``{round: {kind: {sent, received}}}``: the fetches and posts this node made (each is in its
        server's ``/traffic`` too), headers included."""
        return ledger.client_json()

    @app.get("/traffic/node", summary="Every byte this node moved, by round: its bandwidth")
    def get_node_traffic() -> dict[str, dict[str, int]]:
        """``{round: {sent, received}}``: served, fetched and posted HTTP, JSON-RPC and DHT, headers
        included: what a node's link must carry."""
        return ledger.node_json()

    @app.get("/traffic/rpc", summary="JSON-RPC requests this node sent, by round and method")
    def get_rpc_calls() -> dict[str, dict[str, int]]:
        """``{round: {method: requests}}``; a contract read is ``eth_call:<function>``."""
        return ledger.calls_json()

    @app.get("/traffic/rpc-bytes", summary="JSON-RPC bytes this node moved, by round and method")
    def get_rpc_call_bytes() -> dict[str, dict[str, int]]:
        """``{round: {method: bytes}}``, bodies and headers both ways (the ``/traffic/rpc`` labels)."""
        return ledger.call_bytes_json()


#: Where the bundled Swagger UI assets are served (package ``swagger-ui-bundle``).
DOCS_ASSETS = "/docs-assets"


def _offline_docs(app: FastAPI) -> None:
    """``/docs``: Swagger UI from assets this node serves itself, so the page works without the internet."""
    app.mount(DOCS_ASSETS, StaticFiles(directory=swagger_ui_path), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} API",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png",
        )


def _document_misses(app: FastAPI) -> None:
    """Document a 404 (and the error body) on every operation with a path parameter, roles' routes included.

    Such a route looks up what the path names (a blob, a round's record) and answers 404 when this node
    does not hold it; without this the spec lists only 200/422 and a client (or schemathesis) cannot tell
    a miss from a bug. The spec is built lazily on first request, after the role added its routes.
    """
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = build()
            for item in spec.get("paths", {}).values():
                for op in item.values():
                    responses = op.get("responses", {})
                    if any(p.get("in") == "path" for p in op.get("parameters", [])):
                        responses.setdefault("404", {"description": "not held by this node"})
                    for code in ("400", "404"):
                        if code in responses:
                            responses[code].setdefault("content", _ERROR_BODY)
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


class NodeServer:
    """Serve an app with uvicorn in a daemon thread; ``port=0`` picks a free port."""

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = app
        self.host = host
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((host, port))
        except OSError as exc:
            self._sock.close()
            raise NodeServerError(f"cannot listen on {host}:{port}: {exc}") from exc
        self.port: int = self._sock.getsockname()[1]
        cfg = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(cfg)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True, name=f"http-{self.port}"
        )

    @property
    def url(self) -> str:
        """Base URL of the server."""
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> NodeServer:
        """Start serving and wait until the server accepts requests."""
        self._thread.start()
        deadline = time.time() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.time() > deadline:
                raise NodeServerError(f"HTTP server on {self.url} did not start within {timeout}s")
            time.sleep(0.02)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._sock.close()
