"""The fuzz targets: one per boundary where untrusted bytes enter a Tessera node.

- ``update``     ``protocol.wire.update.decode_update`` (bytes from any miner);
- ``record``     ``protocol.wire.records.decode_record`` (DHT values from any peer);
- ``http``       a node's HTTP API over a real socket, requests generated from its OpenAPI spec plus raw
                 malformed HTTP; a 5xx or a dead server is a failure;
- ``config``     ``miner.config.load_miner_config`` / ``validator.config.load_validator_config`` on
                 TOML files and environments, ``protocol.runspec.RunSpec.load`` on run files,
                 ``protocol.rounds.deployment.Deployment.load`` on deployment files;
- ``chain``      the chain client's decoding of JSON-RPC results (when ``protocol.chain`` exists).

Each target's ``allowed`` tuple is the typed error root of the code under test.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import random
import socket
import struct
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .engine import Target, mutate_bytes, mutate_json, random_json

# ----------------------------------------------------------------------------------------------- update


def _valid_updates() -> list[bytes]:
    import torch

    from protocol.wire import update as wire
    from protocol.wire import updateheader
    from training.codecs import encode
    from training.config import CodecConfig, ModelConfig
    from training.model import build_model, module_params, param_state

    out = []
    cfg = ModelConfig(mode="moe", d_model=16, n_heads=2, n_layers=1, d_ff=16, seq_len=8, n_experts=2, top_k=1)
    params = module_params(param_state(build_model(cfg)), ["moe.0.expert.1", "head"])
    g = torch.Generator().manual_seed(0)
    for codec in (
        CodecConfig(chunk=64, topk=4, bits=2),
        CodecConfig(chunk=64, topk=8, bits=8),
        CodecConfig(name="dense"),
    ):
        tensors = {n: encode(torch.randn(p.shape, generator=g), codec) for n, p in params.items()}
        fields = updateheader.HeaderFields(
            round=3, miner="0x" + "ab" * 20, modules=["moe.0.expert.1", "head"], codec=codec,
            base_checkpoint=b"\x11" * 32, transcript_interval=2, transcript_steps=[0, 2],
            transcript_parts=[(b"\x01" * 32, b"\x05" * 32), (b"\x02" * 32, b"\x06" * 32)], tokens=512,
            ef_after=b"\x03" * 32, ef_source=None if codec.name == "dense" else (2, b"\x04" * 32),
        )  # fmt: skip
        out.append(wire.encode_update(wire.make_update(fields, tensors)))
    return out


def _split_update(data: bytes) -> tuple[bytes, bytes]:
    (hlen,) = struct.unpack_from("<I", data, 8)
    return data[12 : 12 + hlen], data[12 + hlen + 8 :]


def _frame(header: bytes, payload: bytes) -> bytes:
    from protocol.wire.update import MAGIC

    return MAGIC + struct.pack("<I", len(header)) + header + struct.pack("<Q", len(payload)) + payload


#: Parameter names a crafted update may declare (real names of the model, so ``module_of`` accepts them).
_CRAFT_MODULES = ["embed", "head", "trunk.0", "moe.0.expert.1"]
#: Largest payload a crafted update is built with (bigger ones are refused by size before anything else).
_CRAFT_MAX_PAYLOAD = 4 << 20


def _random_codec(rng: random.Random) -> Any:
    from training.config import CodecConfig

    if rng.random() < 0.3:
        return CodecConfig(
            chunk=4096,
            topk=rng.choice([1, 2, 32, 256, 1024, 4096]),
            bits=rng.choice([2, 4, 8, 32]),
            transform="dct",
        )
    name = rng.choice(["topk", "topk", "dense"])
    chunk = rng.choice([4096, 64, 1 << rng.randint(1, 28), rng.randint(1, 1 << 20)])
    topk = rng.choice([1, 2, 32, chunk, rng.randint(1, chunk)]) if name == "topk" else min(32, chunk)
    return CodecConfig(name=name, chunk=chunk, topk=min(topk, chunk), bits=rng.choice([2, 4, 8, 32]))


class UpdateTarget(Target):
    """``decode_update`` at its default caps on havoc'd bytes, mutated headers and mutated raw
    payloads; with ``costly`` > 0, that share of inputs are well-formed updates crafted for random codecs
    and parameter shapes (``tests.support.bombs``), the declared decodes up to the largest the header allows
    (issue 11: chunks as large as their parameter, DCT tiles, generic index widths)."""

    name = "update"
    costly = 0.0

    def setup(self) -> None:
        from protocol.errors import ProtocolError

        self.allowed = (ProtocolError,)
        self.seeds = _valid_updates()

    def warm_up(self) -> None:
        from protocol.wire.update import decode_update
        from tests.support.bombs import crafted_update, head
        from training.config import CodecConfig

        for codec in (
            CodecConfig(transform="dct", chunk=4096, topk=2),
            CodecConfig(transform="dct", chunk=4096, topk=2, bits=32),
        ):
            decode_update(crafted_update(head(64), codec))  # the DCT bases are computed once
        for data in self.seeds:
            decode_update(data)

    def _crafted(self, rng: random.Random) -> bytes:
        from tests.support.bombs import crafted_update, model_params
        from training.codecs import field_specs

        for _ in range(20):
            codec = _random_codec(rng)
            modules = sorted(rng.sample(_CRAFT_MODULES, rng.randint(1, 3)))
            dims = {
                d: rng.choice([rng.randint(1, 1 << 6), 1 << rng.randint(3, 22), rng.randint(1, 1 << 22)])
                for d in ("vocab", "seq_len", "d_ff", "n_experts")
            }
            params = model_params(modules, d_model=rng.choice([1, 2, 16, 64]), **dims)
            payload = sum(
                math.prod(shape) * dtype.itemsize
                for s in params.values()
                for dtype, shape in field_specs(s, codec).values()
            )
            if payload <= _CRAFT_MAX_PAYLOAD:
                return crafted_update(params, codec)
        return rng.choice(self.seeds)

    def generate(self, rng: random.Random) -> bytes:
        from protocol.wire.canonical import dumps_canonical

        if self.costly and rng.random() < self.costly:
            return self._crafted(rng)
        data = rng.choice(self.seeds)
        header, payload = _split_update(data)
        op = rng.random()
        if op < 0.35:
            return mutate_bytes(data, rng)
        if op < 0.65:
            doc = mutate_json(json.loads(header), rng)
            try:
                hb = dumps_canonical(doc)
            except Exception:
                hb = json.dumps(doc).encode()
            return _frame(hb, payload)
        if op < 0.9:  # the header intact around a mutated raw payload (its fields' bytes, or its size)
            return _frame(header, mutate_bytes(payload, rng, rng.randint(1, 4)))
        # a valid frame around a mutated payload/header with consistent lengths
        return _frame(mutate_bytes(header, rng, 2), mutate_bytes(payload, rng, 2))

    def check(self, data: bytes) -> None:
        from protocol.wire.update import decode_update
        from protocol.wire.updatecost import UpdateCaps

        decode_update(data, UpdateCaps())  # the defaults: what a node without the run's model applies

    def _header(self, data: bytes) -> Any:
        from protocol.wire.canonical import loads_canonical
        from protocol.wire.updatecost import UpdateCaps
        from protocol.wire.updateheader import parse_header

        try:
            header, _ = _split_update(data)
            return parse_header(loads_canonical(header), UpdateCaps())
        except Exception:
            return None

    def declared_bytes(self, data: bytes) -> int | None:
        from protocol.wire.updatecost import decode_cost

        h = self._header(data)
        return None if h is None else decode_cost(h.params, h.codec).decoded_bytes

    def describe(self, data: bytes) -> str:
        from protocol.wire.updatecost import decode_cost

        h = self._header(data)
        if h is None:
            return ""
        c = h.codec
        cost = decode_cost(h.params, c)
        shapes = ",".join(f"{n}{list(s)}" for n, s in h.params)
        return (
            f"codec {c.name} chunk={c.chunk} topk={c.topk} bits={c.bits} {c.transform}; {shapes}; "
            f"declared {cost.decoded_bytes} B, estimated peak {cost.peak_bytes} B, {cost.work / 1e9:.3f} s"
        )


# ----------------------------------------------------------------------------------------------- record

NOW = 1_800_000_000


def _odd_url(rng: random.Random) -> str:
    scheme = rng.choice(["http", "https", "HTTP", "ftp", "file", "javascript", "", "http:", "h"])
    host = rng.choice(
        ["127.0.0.1", "h", "node.example", "[::1]", "[::1", "999.1.1.1", "", "-h", "h_1", "a" * 70]
    )
    port = rng.choice(["", ":80", ":abc", ":80:90", ":0", ":65536", ":-1", ":+80", ":", ": 80", ":8000"])
    path = rng.choice(["", "/", "/x", "/%zz", "/a b", "?q", "#f", "/" + "x" * 300])
    url = f"{scheme}://{host}{port}{path}" if rng.random() < 0.9 else f"{host}{port}"
    if rng.random() < 0.4:
        i = rng.randint(0, len(url))
        url = url[:i] + rng.choice(["\x00", "\x08", "\x7f", " ", "\t", "\n", "\u00e9", "@", "u:p@"]) + url[i:]
    return url


class RecordTarget(Target):
    """``decode_record`` on havoc'd bytes, mutated documents, deep nesting and odd JSON tokens."""

    name = "record"
    memory = "tracemalloc"  # pure Python (json, eth_account): traced allocations are the decoder's own

    def setup(self) -> None:
        from protocol.wire.records import RecordError, Served, make_record

        self.allowed = (RecordError,)
        key = "0x" + "42" * 32
        self.seeds = [
            make_record(key, chain_id=31337, role="miner", round=3, url="http://127.0.0.1:8000", now=NOW).encode(),
            make_record(
                key, chain_id=31337, role="validator", round=7, url="https://node.example:443/x",
                serves=[Served("update", "ab" * 32, 1234), Served("checkpoint", "0x" + "cd" * 32, 0)], now=NOW,
            ).encode(),
        ]  # fmt: skip

    def generate(self, rng: random.Random) -> bytes:
        data = rng.choice(self.seeds)
        op = rng.random()
        if op < 0.1:  # the URL: issue 11's odd ports, control bytes, schemes, hosts
            doc = json.loads(data)
            doc["url"] = _odd_url(rng)
            return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        if op < 0.4:
            return mutate_bytes(data, rng)
        if op < 0.85:
            doc = mutate_json(json.loads(data), rng)
            return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        if op < 0.92:
            depth = rng.choice([50, 500, 1000, 2000])
            return b"[" * depth + b"]" * depth
        token = rng.choice([b"NaN", b"Infinity", b"-Infinity", b"1e999", b"1.5", b"9" * 5000, b'"\\ud800"'])
        text = data.decode()
        key = rng.choice(["chain_id", "round", "expires", "v", "size"])
        i = text.find(f'"{key}":')
        if i < 0:
            return data
        j = i + len(key) + 3
        k = j
        while k < len(text) and text[k] not in ",}":
            k += 1
        return text[:j].encode() + token + text[k:].encode()

    def warm_up(self) -> None:
        from protocol.wire.records import decode_record

        for data in self.seeds:  # lazy imports and caches of eth_account, not billed to an input
            decode_record(data, now=NOW + 10)

    def check(self, data: bytes) -> None:
        from protocol.wire.records import decode_record

        decode_record(data, now=NOW + 10)


# ------------------------------------------------------------------------------------------------- http


class HttpTarget(Target):
    """A node's HTTP API on a real socket: spec-driven requests and raw malformed HTTP.

    The app is the common node API (``protocol.node.api.create_node_app``) with blobs in its store. A
    response >= 500 is a failure; so is a server that stops answering ``/health``.
    """

    name = "http"

    class ServerError(Exception):
        """The server answered 5xx."""

    def setup(self) -> None:
        import httpx

        from protocol.node.api import NodeMetrics, NodeServer, create_node_app
        from protocol.p2p.blobs import BlobStore

        self.allowed = ()
        self._tmp = tempfile.TemporaryDirectory()
        store = BlobStore(Path(self._tmp.name) / "blobs")
        self.digests = [store.put(os.urandom(n)) for n in (0, 10, 5000)]
        app = create_node_app(
            role="miner", status=lambda: {"round": 1}, store=store, metrics=NodeMetrics.create("miner")
        )
        self.server = NodeServer(app).start()
        self.client = httpx.Client(base_url=self.server.url, timeout=10.0)
        spec = self.client.get("/openapi.json").json()
        self.ops: list[tuple[str, str, list[dict[str, Any]]]] = []
        for path, item in spec["paths"].items():
            for method, op in item.items():
                self.ops.append((method.upper(), path, op.get("parameters", [])))

    def teardown(self) -> None:
        self.client.close()
        self.server.stop()
        self._tmp.cleanup()

    def _value(self, rng: random.Random) -> str:
        r = rng.random()
        if r < 0.2:
            return rng.choice(self.digests) if self.digests[0] else "0x" + "ab" * 32
        if r < 0.4:
            return rng.choice(["0x" + "ab" * 32, "ab" * 8, "AB" * 32, "0x", "", "..", "%00", "-1", "9" * 40])
        if r < 0.7:
            return quote(rng.randbytes(rng.randint(1, 64)).decode("latin-1"), safe="")
        return quote(str(random_json(rng)), safe="")

    def generate(self, rng: random.Random) -> bytes:
        if rng.random() < 0.05:
            raw = rng.choice(
                [
                    b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
                    b"GET /blobs/" + b"a" * 70000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
                    b"POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\nabc",
                    b"GET / HTTP/1.1\r\n" + b"X: " + b"y" * 20000 + b"\r\n\r\n",
                    b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03",
                    b"GET /health HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
                ]
            )
            return b"RAW" + mutate_bytes(raw, rng, 2) if rng.random() < 0.5 else b"RAW" + raw
        method, path, params = rng.choice(self.ops)
        if rng.random() < 0.1:
            method = rng.choice(["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"])
        url = path
        query = []
        for p in params:
            if p.get("in") == "path":
                url = url.replace("{" + p["name"] + "}", self._value(rng))
            elif p.get("in") == "query" and rng.random() < 0.7:
                query.append(f"{p['name']}={self._value(rng)}")
        for _ in range(rng.randint(0, 2)):
            query.append(f"{self._value(rng)}={self._value(rng)}")
        if rng.random() < 0.05:
            url = "/" + self._value(rng)
        target = url + ("?" + "&".join(query) if query else "")
        return json.dumps({"method": method, "url": target}).encode()

    def check(self, data: bytes) -> None:
        if data.startswith(b"RAW"):
            with socket.create_connection(("127.0.0.1", self.server.port), timeout=0.5) as s:
                s.sendall(data[3:])
                try:
                    s.recv(4096)
                except (TimeoutError, ConnectionError):
                    pass
            return
        req = json.loads(data)
        try:
            resp = self.client.request(req["method"], req["url"])
        except Exception as exc:
            import httpx

            if isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol):
                return  # the client refused to send it
            raise
        if resp.status_code >= 500:
            raise HttpTarget.ServerError(f"{req['method']} {req['url'][:80]} -> {resp.status_code}")

    def crashed(self) -> bool:
        try:
            return self.client.get("/health", timeout=5).status_code != 200
        except Exception:
            return True


# ----------------------------------------------------------------------------------------------- config


def _valid_toml(table: str) -> dict[str, Any]:
    if table == "miner":
        return {
            "miner": {
                "run_file": "run.json",
                "rpc_url": "http://127.0.0.1:8545",
                "port": 0,
                "dht_peers": ["/ip4/127.0.0.1/tcp/1"],
                "stake": 100,
                "behaviour": "honest",
                "poll_interval": 0.5,
                "tee": "none",
            }
        }
    return {"validator": {"rpc_url": "http://127.0.0.1:8545", "port": 0}}


class ConfigTarget(Target):
    """Config TOML + environment, run specs and deployment files, written to disk and loaded."""

    name = "config"

    def setup(self) -> None:
        from protocol.errors import ProtocolError

        allowed: list[type[BaseException]] = [ProtocolError]
        for mod, cls in (("miner.errors", "MinerError"), ("validator.errors", "ValidatorError")):
            try:
                allowed.append(getattr(importlib.import_module(mod), cls))
            except (ImportError, AttributeError):
                pass
        self.allowed = tuple(allowed)
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self._tmp.name)
        from protocol.runspec import RunSpec

        self.runspec = RunSpec().to_json()
        self.deployment: dict[str, Any] | None = None
        try:
            from dataclasses import asdict

            from protocol.rounds.deployment import NetworkParams

            self.deployment = {
                "version": 1,
                "chain_id": 31337,
                "rpc_url": "http://127.0.0.1:8545",
                "network": "0x" + "11" * 20,
                "token": "0x" + "22" * 20,
                "block": 1,
                "deployer": "0x" + "33" * 20,
                "tx": {"network": "0x" + "44" * 32},
                "params": {
                    k: (v.hex() if isinstance(v, bytes) else v) for k, v in asdict(NetworkParams()).items()
                },
            }
        except ImportError:
            pass
        self.loaders: list[str] = ["runspec"]
        if self.deployment is not None:
            self.loaders.append("deployment")
        for mod in ("miner.config", "validator.config"):
            try:
                importlib.import_module(mod)
                self.loaders.append(mod.split(".")[0])
            except ImportError:
                pass

    def teardown(self) -> None:
        self._tmp.cleanup()

    def generate(self, rng: random.Random) -> bytes:
        import tomli_w

        kind = rng.choice(self.loaders)
        if kind in ("miner", "validator"):
            doc = _valid_toml(kind)
            env: dict[str, str] = {}
            r = rng.random()
            if r < 0.5:
                doc = mutate_json(doc, rng)
            if r < 0.25 or r > 0.9:
                env[
                    f"TESSERA_{kind.upper()}_{rng.choice(['PORT', 'STAKE', 'DHT', 'DATA_DIR', 'TEE', 'X'])}"
                ] = rng.choice(["", "0", "yes", "-1", "1e9", "nan", "a,b,,c", "\x00", "9" * 5000])
            try:
                text = tomli_w.dumps(_tomlable(doc)).encode()
            except Exception:
                text = b"[" + kind.encode() + b"]\nport = 1\n"
            if 0.5 <= r < 0.8:
                text = mutate_bytes(text, rng)
            return json.dumps({"kind": kind, "env": env}).encode() + b"\n" + text
        base = self.runspec if kind == "runspec" else self.deployment
        r = rng.random()
        if r < 0.5:
            body = json.dumps(mutate_json(base, rng)).encode()
        elif r < 0.85:
            body = mutate_bytes(json.dumps(base).encode(), rng)
        elif r < 0.93:
            depth = rng.choice([100, 2000, 100000])
            body = b"[" * depth + b"]" * depth
        else:
            body = rng.choice([b"[]", b"null", b"1", b'"x"', b"\xff\xfe", b"{}", b"NaN"])
        return json.dumps({"kind": kind, "env": {}}).encode() + b"\n" + body

    def check(self, data: bytes) -> None:
        meta_line, _, body = data.partition(b"\n")
        meta = json.loads(meta_line)
        path = self.dir / "input"
        path.write_bytes(body)
        kind = meta["kind"]
        if kind == "runspec":
            from protocol.runspec import RunSpec

            RunSpec.load(path)
        elif kind == "deployment":
            from protocol.rounds.deployment import Deployment

            Deployment.load(path)
        elif kind == "miner":
            from miner.config import load_miner_config

            load_miner_config(toml_path=path, env=meta["env"])
        else:
            from validator.config import load_validator_config

            load_validator_config(toml_path=path, env=meta["env"])


def _tomlable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _tomlable(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_tomlable(v) for v in x if v is not None]
    if isinstance(x, int) and not isinstance(x, bool) and not -(2**63) <= x < 2**63:
        return str(x)
    return x


TARGETS: dict[str, type[Target]] = {
    "update": UpdateTarget,
    "record": RecordTarget,
    "http": HttpTarget,
    "config": ConfigTarget,
}


# ------------------------------------------------------------------------------------------------ chain


def _word(v: int) -> str:
    return f"{v:064x}"


class ChainTarget(Target):
    """``protocol.chain.Chain`` reads against a JSON-RPC provider that answers with malformed results.

    Each input is one read (``round_state``, ``account_info``, ``seed``, ``slash_proposal``, ``events``,
    ``block_number``) and the scripted RPC responses it gets: valid ABI words havoc'd at the hex level,
    replaced by random JSON, JSON-RPC error objects (reverts with junk data), or mutated log lists.
    """

    name = "chain"

    def setup(self) -> None:
        from web3 import Web3
        from web3.providers.base import BaseProvider

        from protocol.chain import Chain
        from protocol.errors import ProtocolError
        from protocol.rounds.deployment import Deployment, NetworkParams

        self.allowed = (ProtocolError,)
        target = self

        class Scripted(BaseProvider):
            def make_request(self, method: Any, params: Any) -> Any:
                if method == "eth_chainId":
                    return {"jsonrpc": "2.0", "id": 1, "result": "0x7a69"}
                resp = target.script.pop(0) if target.script else {"result": "0x"}
                if not isinstance(resp, dict):
                    return resp
                return {"jsonrpc": "2.0", "id": 1, **resp}

        self.script: list[Any] = []
        self.network = "0x" + "11" * 20
        dep = Deployment(31337, self.network, "0x" + "22" * 20, 1, "0x" + "33" * 20, NetworkParams())
        self.chain = Chain(Web3(Scripted()), dep)
        from eth_utils import keccak

        self.topic_commit = "0x" + keccak(b"UpdateCommitted(uint256,address,bytes32)").hex()
        self.valid: dict[str, list[Any]] = {
            "round_state": [  # status(): the round state, deadline, checkpoint, both seeds, block
                {"result": "0x" + "".join(_word(v) for v in (3, 1, 100, 4, 2, 0, 110, 7, 8, 9, 105))},
            ],
            "account_info": [{"result": "0x" + "".join(_word(v) for v in (10**20, 5, 3, 1, 0))}],
            "seed": [{"result": "0x" + "ab" * 32}],
            # SlashProposal: target, votedStake, executed, rejected, unanswered, round, held, proposer, rejected
            "slash_proposal": [
                {"result": "0x" + "".join(_word(v) for v in (0x33, 7, 1, 0, 0, 2, 0, 0x44, 0))}
            ],
            "block_number": [{"result": "0x10"}],
            "events": [
                {
                    "result": [
                        {
                            "address": self.network,
                            "topics": [self.topic_commit, "0x" + _word(1), "0x" + "00" * 12 + "44" * 20],
                            "data": "0x" + "cd" * 32,
                            "blockNumber": "0x5",
                            "blockHash": "0x" + "ee" * 32,
                            "transactionHash": "0x" + "ff" * 32,
                            "transactionIndex": "0x0",
                            "logIndex": "0x0",
                            "removed": False,
                        }
                    ]
                }
            ],
        }

    def generate(self, rng: random.Random) -> bytes:
        op = rng.choice([*self.valid, "revert"])
        if op == "revert":
            data = rng.choice(["0x", "0x" + rng.randbytes(rng.randint(0, 80)).hex(), "junk", 5, None])
            if rng.random() < 0.5:
                from protocol.chain.abi import _error_table

                sel = rng.choice(list(_error_table()))
                data = "0x" + sel.hex() + rng.randbytes(rng.choice([0, 31, 32, 64, 96])).hex()
            return json.dumps({"op": op, "data": data}).encode()
        script = json.loads(json.dumps(self.valid[op]))
        i = rng.randrange(len(script))
        r = rng.random()
        if r < 0.35 and isinstance(script[i].get("result"), str):
            script[i]["result"] = mutate_bytes(script[i]["result"].encode(), rng, 3).decode("latin-1")
        elif r < 0.55:
            script[i] = mutate_json(script[i], rng)
        elif r < 0.75:
            junk = "0x" + rng.randbytes(rng.choice([0, 4, 36, 68, 100])).hex()
            script[i] = {
                "error": {
                    "code": rng.choice([3, -32000, -32603]),
                    "message": "execution reverted",
                    "data": junk,
                }
            }
        elif r < 0.85:
            script[i] = random_json(rng)
        else:
            script[i] = {"result": random_json(rng)}
        return json.dumps({"op": op, "script": script}).encode()

    def check(self, data: bytes) -> None:
        from protocol.chain.abi import decode_revert

        req = json.loads(data)
        op = req["op"]
        if op == "revert":
            err = decode_revert("fuzz", req["data"])
            str(err)
            return
        self.script = list(req["script"])
        c = self.chain
        if op == "round_state":
            c.round_state()
        elif op == "account_info":
            c.account_info("0x" + "44" * 20)
        elif op == "seed":
            c.seed(3)
        elif op == "slash_proposal":
            c.slash_proposal(b"\x01" * 32)
        elif op == "block_number":
            c.block_number()
        else:
            c.committed_miners(1)


TARGETS["chain"] = ChainTarget
