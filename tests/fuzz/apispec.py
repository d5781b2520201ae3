"""Schemathesis against the real nodes' HTTP APIs: a miner and a validator started as in production.

Both nodes are built and started with their own ``start()`` (``MinerNode`` / ``ValidatorNode`` on an
in-memory chain), so the OpenAPI documents and the routes are exactly those the nodes serve, on a real
socket through uvicorn. Their state holds one round of records (a signature, verdicts, a held update),
so the routes answer 200 as well as 404/422.

Every generated request must pass schemathesis' checks (no 5xx, status code, content type, headers and
body conform to the spec, invalid data refused) and must not raise in the server (uvicorn logs an
unhandled exception; a handler on its logger records it with its traceback). A node that stops answering
``/health`` counts as crashed.

``run_campaign(inputs, seed)`` is the long run (``python -m tests.fuzz.campaign --target schemathesis``);
``tests/fuzz/test_schemathesis.py`` runs the same checks per operation under pytest.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .engine import Failure, Result

#: Validator key and two miners' keys (test-only values).
KEYS = ["0x" + f"{i:064x}" for i in range(41, 44)]
#: The round whose records the nodes hold.
ROUND = 1


@dataclass
class LiveNode:
    """A started node: its role, base URL, the node object, and path parameters naming what it holds."""

    role: str
    url: str
    node: Any
    held: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Operation path -> path parameters that name a held resource (so generation also reaches 200s)."""


class ServerErrors(logging.Handler):
    """Collects the unhandled exceptions the servers log (uvicorn logs them on ``uvicorn.error``)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            self.seen.append(record.exc_info[1])


@contextlib.contextmanager
def live_nodes(tmp: Path | None = None) -> Iterator[list[LiveNode]]:
    """Start a validator and a miner (their own ``start()``, port 0) holding one round of records."""
    import torch
    from eth_account import Account

    from miner.config import MinerConfig
    from miner.node import MinerNode
    from protocol.p2p.discovery import Discovery
    from protocol.rounds.memcoordinator import MemoryCoordinator, MemoryLedger
    from protocol.runspec import RunSpec
    from validator.config import ValidatorConfig
    from validator.node import ValidatorNode

    torch.set_num_threads(1)
    with contextlib.ExitStack() as stack:
        if tmp is None:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tessera-apispec-")))
        ledger = MemoryLedger(b"\x01" * 32)
        addr = [Account.from_key(k).address for k in KEYS]
        v = ValidatorNode(
            ValidatorConfig(data_dir=tmp / "v", threads=1),
            RunSpec(),
            MemoryCoordinator(ledger, addr[0]),
            Discovery(31337, KEYS[0]),
            KEYS[0],
        ).start()
        stack.callback(v.stop)
        m = MinerNode(
            MinerConfig(data_dir=tmp / "m", threads=1),
            RunSpec(),
            MemoryCoordinator(ledger, addr[1]),
            Discovery(31337, KEYS[1]),
        ).start()
        stack.callback(m.stop)
        yield [
            LiveNode("miner", m.url, m, _seed_miner(m, addr)),
            LiveNode("validator", v.url, v, _seed_validator(v, addr)),
        ]


def _seed_validator(v: Any, addr: list[str]) -> dict[str, dict[str, Any]]:
    """One round of a validator's records, written through its own state and blob store."""
    from protocol.p2p.blobs import sha256_digest

    update = v.public.put(b"TSRUPD\0\0" + bytes(range(256)), digest_fn=sha256_digest)
    from validator.context import Verdict

    verdict = Verdict(addr[1], ROUND, True, "ok", "", score=7000, digest="ab" * 32)
    v.state.put_verdict(ROUND, addr[1], verdict)
    refused = Verdict(addr[2], ROUND, False, "format", "BadMagic", provable=True, digest="ab" * 32)
    v.state.put_verdict(ROUND, addr[2], refused)
    with v.state.edit(ROUND) as rec:
        rec.merged = "0x" + "cd" * 32
        rec.signature = "0x" + "ef" * 65
        rec.consensus = {addr[1]: 7000, addr[2]: 0}
        rec.rewards = {addr[1]: str(10**20)}
        rec.updates = {addr[1]: update}
        rec.heldout_before, rec.heldout_after = 5.5, 5.25
        rec.certified = True
        rec.verify_seconds = 1.5
    return {"/blobs/{digest}": {"digest": update}, "/updates/{round}/{miner}": {"miner": addr[1]}}


def _seed_miner(m: Any, addr: list[str]) -> dict[str, dict[str, Any]]:
    """One served round in the miner's records and a blob in its public store."""
    from miner.state import MinerRoundRecord

    blob = m.public.put(b"\x00" * 1000 + bytes(range(256)))
    m.state.prepare(ROUND, MinerRoundRecord(assign_seed="00" * 32, registry=addr[1:]), {})
    with m.state.edit(ROUND) as rec:
        rec.status, rec.reward = "served", str(10**20)
    m.step()  # one look at the chain, as the node's loop takes at start: until then blobs answer 503
    return {"/blobs/{digest}": {"digest": blob}}


def load_schema(url: str) -> Any:
    """The node's OpenAPI document, loaded by schemathesis from the running server."""
    import schemathesis

    return schemathesis.openapi.from_url(f"{url}/openapi.json")


def healthy(url: str) -> bool:
    """Whether the node still answers ``/health`` with 200."""
    import httpx

    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _where(exc: BaseException) -> str:
    """The innermost frame in Tessera's code that the exception passed through (else the innermost)."""
    root = str(Path(__file__).resolve().parents[2]) + "/"
    tb = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in tb if f.filename.startswith(root) and "/.venv/" not in f.filename]
    f = (ours or tb)[-1] if (ours or tb) else None
    return f"{f.filename.removeprefix(root)}:{f.lineno}" if f else "?"


@dataclass
class SpecResult(Result):
    """A campaign's result plus the inputs each operation received (every one must be exercised)."""

    operations: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """JSON summary, with the per-operation counts."""
        return {**super().to_json(), "operations": dict(sorted(self.operations.items()))}


class _Campaign:
    """State of one campaign: counts, the server-error log handler and the HTTP session."""

    def __init__(
        self, inputs: int, progress: Callable[[Result], None] | None, time_limit: float | None
    ) -> None:
        import requests

        self.inputs = inputs
        self.progress = progress
        self.time_limit = time_limit
        self.res = SpecResult("schemathesis")
        self.errors = ServerErrors()
        self.session = requests.Session()
        self.t0 = time.perf_counter()
        self.nodes: list[LiveNode] = []

    def send(self, node: LiveNode, operation: Any, case: Any) -> None:
        """Send one case to the live node and record what went wrong, if anything."""
        from schemathesis.core.failures import FailureGroup

        res = self.res
        if self.done():
            return
        res.inputs += 1
        label = f"{node.role} {operation.label}"
        res.operations[label] = res.operations.get(label, 0) + 1
        before = len(self.errors.seen)
        try:
            resp = case.call_and_validate(base_url=node.url, session=self.session, timeout=10)
        except (Exception, FailureGroup) as exc:  # every failed check and transport error is a finding
            _record(res, _kind(exc), label, str(exc), case)
        else:
            if resp.status_code < 400:
                res.accepted += 1
            else:  # a refusal that conforms to the spec (404, 422, ...)
                res.refused += 1
                res.refused_by[str(resp.status_code)] = res.refused_by.get(str(resp.status_code), 0) + 1
        for raised in self.errors.seen[before:]:
            _record(res, type(raised).__name__, _where(raised), f"{node.role}: unhandled: {raised}", case)
        if res.inputs % 1000 == 0:
            res.seconds = time.perf_counter() - self.t0
            res.crashed_servers = sum(not healthy(n.url) for n in self.nodes)
            if self.progress is not None:
                self.progress(res)

    def done(self) -> bool:
        """Whether to stop sending: enough inputs, a crashed node, or out of time."""
        late = self.time_limit is not None and time.perf_counter() - self.t0 > self.time_limit
        return self.res.inputs >= self.inputs or bool(self.res.crashed_servers) or late

    def hypothesis_test(
        self, node: LiveNode, operation: Any, mode: Any, fixed: dict[str, Any] | None, batch: int, seed: int
    ) -> Callable[[], None]:
        """A Hypothesis test sending up to ``batch`` cases of ``operation`` in ``mode`` (with the path
        parameters ``fixed`` held constant, the others generated)."""
        from hypothesis import HealthCheck, Phase, given, settings
        from hypothesis import seed as with_seed

        @settings(
            max_examples=batch,
            deadline=None,
            database=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @with_seed(seed)
        @given(case=operation.as_strategy(mode, path_parameters=fixed))
        def test(case: Any) -> None:
            self.send(node, operation, case)

        return test


def run_campaign(
    inputs: int,
    seed: int = 0,
    progress: Callable[[Result], None] | None = None,
    time_limit: float | None = None,
    nodes: Callable[[], AbstractContextManager[list[LiveNode]]] = live_nodes,
) -> SpecResult:
    """Send ``inputs`` schemathesis cases (positive and negative) to live nodes (by default the miner and
    the validator of :func:`live_nodes`).

    Operations are visited in passes; each pass gives every (operation, mode) a Hypothesis run of up to
    ``batch`` examples under a new seed (Hypothesis stops early where the input space is small, e.g. an
    operation without parameters), until ``inputs`` requests were sent. Failures are recorded, not
    raised, so one finding does not end the campaign; each keeps a reproducing request (curl).
    """
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode

    run = _Campaign(inputs, progress, time_limit)
    res = run.res
    uv = logging.getLogger("uvicorn.error")
    try:
        with nodes() as live:
            # After the servers started: uvicorn's logging setup drops the handlers of its loggers.
            uv.addHandler(run.errors)
            run.nodes = live
            targets: list[tuple[LiveNode, Any, Any, dict[str, Any] | None]] = []
            for n in live:
                for op in load_schema(n.url).get_all_operations():
                    operation = op.ok()
                    targets += [(n, operation, mode, None) for mode in GenerationMode]
                    if operation.path in n.held:
                        targets.append((n, operation, GenerationMode.POSITIVE, n.held[operation.path]))
            batch = max(10, min(500, inputs // max(1, len(targets))))
            pass_no = 0
            while not run.done():
                pass_no += 1
                sent = res.inputs
                for t in list(targets):
                    n, operation, mode, fixed = t
                    try:
                        run.hypothesis_test(n, operation, mode, fixed, batch, seed * 1_000_003 + pass_no)()
                    except Unsatisfiable:
                        targets.remove(t)  # nothing to negate: an operation without parameters
                    if run.done():
                        break
                res.crashed_servers = sum(not healthy(n.url) for n in live)
                if res.inputs == sent:
                    break  # nothing left to generate
    finally:
        uv.removeHandler(run.errors)
        res.seconds = time.perf_counter() - run.t0
    return res


def _kind(exc: BaseException) -> str:
    """A failure's kind: the names of the failed schemathesis checks, else the exception type."""
    sub = getattr(exc, "exceptions", None)
    if sub:
        return "+".join(sorted({type(e).__name__ for e in sub}))
    return type(exc).__name__


def _record(res: Result, kind: str, where: str, message: str, case: Any) -> None:
    key = f"{kind}@{where}"
    if key in res.failures:
        res.failures[key].count += 1
        return
    try:
        repro = case.as_curl_command()
    except Exception:  # the reproduction is best effort; the failure itself is what counts
        repro = repr(case)
    res.failures[key] = Failure(kind, message[:600], where, 1, repro.encode()[:2048].hex())
