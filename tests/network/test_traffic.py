"""Issue 13: the traffic ledger counts what crosses the wire, by round and kind, and agrees with the sizes
of what was served (real HTTP between a real node and a real client; a real JSON-RPC exchange)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request

from protocol.chain.endpoint import http_web3
from protocol.node.api import NodeServer
from protocol.node.traffic import (
    OPERATOR_QUERY,
    Kind,
    TrafficLedger,
    blob_kind,
    path_kind,
    rpc_label,
)
from protocol.node.trafficsums import bits_per_param_step, merge_ledgers, total_bytes
from protocol.p2p.blobs import sha256_digest
from protocol.p2p.transfer import FetchPolicy, fetch_blob
from protocol.wire.tensorblob import encode_tensors, tensor_blob_digest
from tests.support.bare_miner import start_bare_miner
from tests.support.rounds import MINERS, Round, make_round

KEY = "0x" + f"{52:064x}"


@pytest.fixture(scope="module")
def rnd() -> Round:
    return make_round()


def test_blob_kinds_are_told_from_the_real_artifacts(rnd: Round) -> None:
    built: Any = rnd.build(MINERS[0])
    state = next(iter(built.states.values()))
    residual = {k: v for k, v in built.ef_state.items() if k.startswith("ef/")}
    assert residual, "the miner keeps an error-feedback residual"
    checkpoint = {f"param/{k}": v for k, v in rnd.checkpoint.items()}
    assert blob_kind(built.update) is Kind.UPDATE
    assert blob_kind(encode_tensors(state)) is Kind.STATE
    assert blob_kind(encode_tensors(residual)) is Kind.RESIDUAL
    assert blob_kind(encode_tensors(built.transcript())) is Kind.TRANSCRIPT
    assert blob_kind(encode_tensors(checkpoint)) is Kind.CHECKPOINT
    assert blob_kind(b'{"quote": "..."}') is Kind.EVIDENCE
    assert blob_kind(b"") is Kind.OTHER
    for path, kind in [
        ("/updates/3/0xab", Kind.UPDATE),
        ("/signatures/3", Kind.SIGNATURE),
        ("/verdicts/3", Kind.VERDICT),
        ("/records/3", Kind.RECORD),
        ("/status", Kind.API),
        ("/metrics", Kind.API),
    ]:
        assert path_kind(path) is kind, path


def test_the_ledger_sums_per_round_and_stays_bounded() -> None:
    led = TrafficLedger(keep_rounds=3)
    for r in range(1, 6):
        led.round = r
        led.add(Kind.UPDATE, sent=100 * r, sent_overhead=10)
        led.add(Kind.UPDATE, received=7)
    led.add(Kind.RPC, round=5, sent=1, received=2)
    got = led.to_json()
    assert list(got) == ["3", "4", "5"], "only the last keep_rounds rounds are kept"
    assert got["5"]["update"] == {"sent": 500, "received": 7, "sent_overhead": 10, "received_overhead": 0}
    assert total_bytes(got["5"]["rpc"]) == 3
    merged = merge_ledgers([got, got])
    assert merged[4] == {"update": 2 * 417}
    with pytest.raises(ValueError, match="unknown traffic fields"):
        led.add(Kind.UPDATE, bytes=1)
    # 4 miners x 136,320 trained params x H = 60 moving 37 MB: the 9.1 bits per param per step
    assert bits_per_param_step(37_000_000, 4 * 136_320, 60) == pytest.approx(9.05, abs=0.01)


def test_a_node_counts_what_it_serves_to_the_byte(tmp_path: Path, rnd: Round) -> None:
    led = TrafficLedger()
    m = start_bare_miner(tmp_path, KEY, led)
    try:
        led.round = 7
        built: Any = rnd.build(MINERS[1])
        update = m.public.put(built.update, digest_fn=sha256_digest)
        ckpt = encode_tensors({f"param/{k}": v for k, v in rnd.checkpoint.items()})
        ckpt_digest = m.public.put(ckpt, digest_fn=tensor_blob_digest)
        policy = FetchPolicy(timeout=10, attempts=1)
        assert fetch_blob(m.url, update, policy=policy) == built.update
        assert fetch_blob(m.url, ckpt_digest, policy=policy, digest_fn=tensor_blob_digest) == ckpt
        assert httpx.get(f"{m.url}/status", timeout=5).status_code == 200
        row = led.to_json()["7"]
        assert row["update"]["sent"] == len(built.update), "the body served, to the byte"
        assert row["checkpoint"]["sent"] == len(ckpt)
        for kind in ("update", "checkpoint"):
            assert 50 < row[kind]["sent_overhead"] < 1000, "status line and headers, once"
            assert 50 < row[kind]["received_overhead"] < 1000, "request line and headers, once"
            assert row[kind]["received"] == 0, "a GET has no body"
        assert row["api"]["sent"] > 0
        api_before = row["api"]["sent"]
        # an operator's read of the same checkpoint (tessera model export, the devnet's samples) is API
        got = httpx.get(f"{m.url}/blobs/{ckpt_digest}?{OPERATOR_QUERY}", timeout=5)
        assert got.content == ckpt
        deadline = time.monotonic() + 5  # the server counts an exchange once its response has gone out
        while led.to_json()["7"]["api"]["sent"] < api_before + len(ckpt) and time.monotonic() < deadline:
            time.sleep(0.05)
        row = led.to_json()["7"]
        assert row["checkpoint"]["sent"] == len(ckpt) and row["api"]["sent"] >= api_before + len(ckpt)
        served = httpx.get(f"{m.url}/traffic", timeout=5).json()
        assert served["7"]["update"]["sent"] == len(built.update)
        metrics = httpx.get(f"{m.url}/metrics", timeout=5).text
        assert (
            f'tessera_miner_traffic_bytes_total{{field="sent",kind="update"}} {float(len(built.update))}'
            in metrics
        )
    finally:
        m.stop()


def test_json_rpc_bytes_are_counted_both_ways() -> None:
    seen: list[int] = []
    answer = b'{"jsonrpc":"2.0","id":0,"result":"0x7a69"}'
    app = FastAPI()

    @app.post("/")
    async def rpc(request: Request) -> Any:
        from fastapi.responses import Response

        seen.append(len(await request.body()))
        return Response(answer, media_type="application/json")

    server = NodeServer(app).start()
    try:
        led = TrafficLedger()
        led.round = 3
        assert http_web3(server.url, 5, led).eth.chain_id == 31337
        rpc = led.to_json()["3"]["rpc"]
        assert rpc["sent"] == sum(seen) > 0, "every request body, as the endpoint received it"
        assert rpc["received"] == len(answer) * len(seen)
        assert rpc["sent_overhead"] > 0 and rpc["received_overhead"] > 0
        assert led.calls_json() == {"3": {"eth_chainId": len(seen)}}
    finally:
        server.stop()


def test_json_rpc_requests_are_counted_by_method_and_contract_function() -> None:
    names = {"0x12345678": "status"}
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "eth_call",
        "params": [{"to": "0x00", "data": "0x12345678ab"}],
    }
    assert rpc_label(json.dumps(call), names) == "eth_call:status"
    call["params"] = [{"to": "0x00", "data": "0xdeadbeef"}]
    assert rpc_label(json.dumps(call).encode(), names) == "eth_call:0xdeadbeef", (
        "unknown selectors stay visible"
    )
    gas = {"jsonrpc": "2.0", "id": 2, "method": "eth_estimateGas", "params": [{"input": "0x12345678"}]}
    assert rpc_label(json.dumps(gas), names) == "eth_estimateGas:status"
    assert (
        rpc_label('{"jsonrpc":"2.0","id":3,"method":"eth_blockNumber","params":[]}', names)
        == "eth_blockNumber"
    )
    assert rpc_label("[]", names) == "batch"
    seed, rev = "0x" + "aa" * 32, "0x" + "bb" * 32  # a log query is labelled by its events (topic 0)
    logs = {"method": "eth_getLogs", "params": [{"topics": [[rev, seed], "0x" + "00" * 32]}]}
    topics = {**names, seed: "SeedCommitted", rev: "SeedRevealed"}
    assert rpc_label(json.dumps(logs), topics) == "eth_getLogs:SeedCommitted,SeedRevealed"
    logs["params"] = [{"topics": [seed]}]
    assert rpc_label(json.dumps(logs), topics) == "eth_getLogs:SeedCommitted"
    logs["params"] = [{"fromBlock": 0}]
    assert rpc_label(json.dumps(logs), topics) == "eth_getLogs"
    for junk in (b"", b"\xff", "null", '{"method": 5}', '{"id": 1}', None):
        assert rpc_label(junk, names) == "?"
    assert rpc_label(json.dumps({"method": "x" * 1000}), names) == "x" * 64, "a label is bounded"

    led = TrafficLedger(keep_rounds=2)
    seen: list[str] = []
    led.on_call = seen.append
    for r in (1, 2, 2, 3):
        led.round = r
        led.add_call("eth_call:status")
    assert led.calls_json() == {"2": {"eth_call:status": 2}, "3": {"eth_call:status": 1}}, (
        "bounded like the bytes"
    )
    assert seen == ["eth_call:status"] * 4


def test_the_devnet_report_counts_protocol_bytes_per_trained_parameter_and_step() -> None:
    from tessera.devnet.report import traffic_figures

    kinds = {"update": 8_000, "state": 3_000_000, "rpc": 500_000, "api": 9_999_999}
    miners = [{"trained_params": 136_320, "inner_steps": 60}] * 4
    fig = traffic_figures(kinds, miners)
    assert fig["traffic_protocol_bytes"] == 3_508_000, "operators' reads (api) are listed, not counted"
    assert fig["traffic_bytes"]["api"] == 9_999_999
    assert fig["traffic_bits_per_param_step_total"] == pytest.approx(8 * 3_508_000 / (4 * 136_320 * 60), 1e-5)
    assert set(fig["traffic_bits_per_param_step"]) == {"update", "state", "rpc"}
    assert "traffic_bits_per_param_step_total" not in traffic_figures(kinds, []), "no miner trained"
    newer = traffic_figures({**kinds, "gossip": 1_000}, miners)  # a kind from a newer node's ledger
    assert newer["traffic_protocol_bytes"] == 3_509_000 and newer["traffic_unknown_kinds"] == ["gossip"]
