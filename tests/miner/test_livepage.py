"""Issue 16: a miner serves a live page at ``GET /`` (as the validator does): its address, URL, behaviour,
round and phase, and its recent rounds, every value escaped."""

from __future__ import annotations

from pathlib import Path

import httpx

from miner.livepage import MAX_ROUNDS, render_live_page
from miner.state import MinerRoundRecord
from tests.support.bare_miner import start_bare_miner

KEY = "0x" + f"{52:064x}"


def test_the_page_escapes_every_value_and_shows_the_rounds() -> None:
    hostile = "<script>alert('x')</script>"
    page = render_live_page(
        {
            "address": "0xabc",
            "url": 'http://m"><img src=x onerror=alert(1)>',
            "behaviour": "honest",
            "round": 7,
            "phase": "serving",
            "rounds_done": 3,
            "last_error": hostile,
            "rounds": {
                6: {
                    "status": "served",
                    "update_bytes": 1234,
                    "loss_first": 5.5,
                    "loss_last": 4.25,
                    "tokens": 640,
                },
                5: {"status": "abandoned", "reason": hostile},
                4: {"status": "served", "reward": "1500000000000000000", "consensus_score": 9000},
                3: "not a record",
            },
        }
    )
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "0xabc" in page and "serving" in page and "honest" in page
    body = page.split("<tbody>")[1]
    assert body.index("<td>6</td>") < body.index("<td>5</td>") < body.index("<td>4</td>")  # newest first
    assert "1234" in body and "5.5000" in body and "4.2500" in body and "640" in body
    assert "1.5000" in body and "9000" in body  # reward in TSR, consensus score
    assert "<td>3</td>" not in body
    for link in ("/status", "/metrics", "/docs", "/traffic"):
        assert f'href="{link}"' in page
    assert 'http-equiv="refresh"' in page


def test_the_page_is_bounded() -> None:
    rounds = {r: {"status": "served", "reason": "x" * 100_000} for r in range(1, 101)}
    page = render_live_page({"address": "0xabc", "last_error": "e" * 100_000, "rounds": rounds})
    body = page.split("<tbody>")[1]
    assert body.count("<tr>") == MAX_ROUNDS
    assert "<td>100</td>" in body and f"<td>{100 - MAX_ROUNDS}</td>" not in body
    assert len(page) < 50_000


def test_a_running_miner_serves_its_live_page(tmp_path: Path) -> None:
    m = start_bare_miner(tmp_path, KEY)
    try:
        m.state.prepare(
            1, MinerRoundRecord(assign_seed="00" * 32, registry=[m.address], update_bytes=4321), {}
        )
        m.state.set_status(1, "served")
        m.step()
        resp = httpx.get(f"{m.url}/", timeout=10)
        assert resp.status_code == 200, resp.text
        assert resp.headers["content-type"].startswith("text/html")
        assert m.address in resp.text and m.url in resp.text
        body = resp.text.split("<tbody>")[1]
        assert "<td>1</td>" in body and "served" in body and "4321" in body
        spec = httpx.get(f"{m.url}/openapi.json", timeout=10).json()
        assert spec["paths"]["/"]["get"]["summary"] == "Live page of this miner"
    finally:
        m.stop()
