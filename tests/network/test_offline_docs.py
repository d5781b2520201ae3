"""``/docs`` works without the internet: the Swagger UI assets come from the node itself (issue 16: the
page loaded them from a CDN and was blank offline)."""

from __future__ import annotations

from pathlib import Path

import httpx

from protocol.node.api import NodeMetrics, NodeServer, create_node_app
from protocol.p2p.blobs import BlobStore


def test_docs_page_and_its_assets_are_served_by_the_node(tmp_path: Path) -> None:
    app = create_node_app(
        role="miner", status=dict, store=BlobStore(tmp_path), metrics=NodeMetrics.create("t")
    )
    server = NodeServer(app).start()
    try:
        page = httpx.get(f"{server.url}/docs", timeout=10)
        assert page.status_code == 200 and "cdn." not in page.text
        for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
            assert f"/docs-assets/{asset}" in page.text
            got = httpx.get(f"{server.url}/docs-assets/{asset}", timeout=10)
            assert got.status_code == 200 and len(got.content) > 10_000, asset
        spec = httpx.get(f"{server.url}/openapi.json", timeout=10).json()
        assert "/blobs/{digest}" in spec["paths"] and "/docs" not in spec["paths"]
    finally:
        server.stop()
