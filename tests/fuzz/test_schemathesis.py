"""Schemathesis against the OpenAPI documents of a real miner and a real validator (CI's short run).

Every operation of both nodes gets positive and negative cases: no 5xx, status codes, content types,
headers and bodies as the spec says, invalid input refused, nothing raised in the server (uvicorn's log
of unhandled exceptions is watched) and both nodes still answer ``/health``. The long run is
``python -m tests.fuzz.campaign --target schemathesis --inputs 100000``.

(schemathesis' own pytest integration, ``schemathesis.pytest.from_fixture``, fails under pytest 9 in
schemathesis 4.32.5, ``'Function' object has no attribute '_nodeid'``, and loading the schema at import
would start the nodes at collection; so the cases are drawn by ``tests.fuzz.apispec`` with the same
strategies and checks.)
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import HTTPException

from protocol.node.api import NodeMetrics, NodeServer, create_node_app
from protocol.p2p.blobs import BlobStore

from .apispec import LiveNode, live_nodes, load_schema, run_campaign

#: Cases per short run: every (operation, mode) of both nodes gets several (about 20 s on 2 busy cores).
SHORT_INPUTS = 400

#: Findings tolerated by the short run (each with its regression test below once fixed): none left.
KNOWN: set[str] = set()


@pytest.fixture(scope="module")
def nodes() -> Iterator[list[LiveNode]]:
    with live_nodes() as live:
        yield live


def test_every_operation_conforms_to_its_spec(nodes: list[LiveNode]) -> None:
    res = run_campaign(SHORT_INPUTS, seed=0, nodes=lambda: contextlib.nullcontext(nodes))
    assert res.inputs == SHORT_INPUTS
    assert res.crashed_servers == 0
    every = {f"{n.role} {op.ok().label}" for n in nodes for op in load_schema(n.url).get_all_operations()}
    assert len(every) >= 14  # miner: 5 operations, validator: 9
    assert set(res.operations) == every, "operations never exercised: " + ", ".join(
        every - set(res.operations)
    )
    new = {k: f for k, f in res.failures.items() if k not in KNOWN}
    assert not new, "\n\n".join(f"{k} x{f.count}:\n{f.message}" for k, f in new.items())
    assert res.refused > 0 and res.accepted > 0  # both 2xx and spec-conforming refusals were reached


def test_held_update_is_served_as_documented(nodes: list[LiveNode]) -> None:
    v = next(n for n in nodes if n.role == "validator")
    op = load_schema(v.url)["/updates/{round}/{miner}"]["GET"]
    case = op.Case(path_parameters={"round": 1, **v.held["/updates/{round}/{miner}"]})
    assert case.call(timeout=10).status_code == 200
    case.call_and_validate(timeout=10)


def test_a_lookup_does_not_create_a_round(nodes: list[LiveNode]) -> None:
    import httpx

    v = next(n for n in nodes if n.role == "validator")
    before = [r["round"] for r in httpx.get(f"{v.url}/rounds", timeout=10).json()]
    assert httpx.get(f"{v.url}/updates/987654/0xabc", timeout=10).status_code == 404
    after = [r["round"] for r in httpx.get(f"{v.url}/rounds", timeout=10).json()]
    assert after == before


@contextlib.contextmanager
def _buggy_node() -> Iterator[list[LiveNode]]:
    """The common node API plus a route with a planted bug (a KeyError for every even round)."""
    with tempfile.TemporaryDirectory() as tmp:
        app = create_node_app(
            role="test", status=lambda: {}, store=BlobStore(Path(tmp)), metrics=NodeMetrics.create("test")
        )

        @app.get("/planted/{round}")
        def planted(round: int) -> dict[str, Any]:
            if round < 0:
                raise HTTPException(status_code=404, detail="no such round")
            held: dict[int, int] = {}
            return {"value": held[round] if round % 2 == 0 else round}

        server = NodeServer(app).start()
        try:
            yield [LiveNode("test", server.url, server)]
        finally:
            server.stop()


def test_the_campaign_reports_an_unhandled_exception_and_the_5xx() -> None:
    res = run_campaign(300, seed=0, nodes=_buggy_node)
    assert res.crashed_servers == 0
    raised = [f for f in res.failures.values() if f.kind == "KeyError"]
    assert raised and raised[0].where.startswith("tests/fuzz/test_schemathesis.py:")
    assert any(
        "ServerError" in f.kind and f.where == "test GET /planted/{round}" for f in res.failures.values()
    )
