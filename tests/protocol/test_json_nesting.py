"""F1 (docs/security.md): deeply nested JSON must be refused with a typed error, never crash the process.

``py_ecc`` raises the recursion limit to 100000 at import; with it, CPython's C JSON decoder overflowed the
C stack (SIGSEGV, exit 139) on ``[`` x 200000. The limit is now kept, and every parser of untrusted JSON
runs :func:`protocol.wire.canonical.check_json_depth` first.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import httpx
import pytest

from protocol.wire import canonical
from protocol.wire.canonical import (
    MAX_JSON_DEPTH,
    CanonicalJSONError,
    JSONNestingError,
    check_json_depth,
    json_depth,
    loads_canonical,
)
from validator.state import RoundRecord

DEEP = b"[" * 200_000 + b"]" * 200_000


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def test_json_depth_counts_brackets_outside_strings() -> None:
    assert json_depth(b"1") == 0
    assert json_depth(b"[]") == 1
    assert json_depth(b'{"a":[1,{"b":2}]}') == 3
    assert json_depth(b'["[[[[", "\\"[[", {"k]": "{"}]') == 2
    assert json_depth('["]]]]", [[]]]') == 3
    assert json_depth(DEEP) == 200_000


def test_check_json_depth_limit() -> None:
    check_json_depth(_nested(MAX_JSON_DEPTH))
    with pytest.raises(JSONNestingError):
        check_json_depth(_nested(MAX_JSON_DEPTH + 1))
    assert issubclass(JSONNestingError, CanonicalJSONError)


def test_loads_canonical_refuses_deep_nesting() -> None:
    assert loads_canonical(_nested(MAX_JSON_DEPTH)) is not None
    with pytest.raises(JSONNestingError):
        loads_canonical(DEEP)


def test_recursion_limit_survives_py_ecc_import() -> None:
    code = textwrap.dedent(
        """
        import sys
        before = sys.getrecursionlimit()
        import protocol.chain, protocol.wire.bls, validator.node, py_ecc.bls
        assert sys.getrecursionlimit() == before, sys.getrecursionlimit()
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize(
    "call",
    [
        "from protocol.wire.tensorblob import decode_tensors as f; f(struct.pack('<Q', len(h)) + h)",
        "from protocol.wire.canonical import loads_canonical as f; f(h)",
        "from protocol.wire.records import decode_record as f; f(h[:20000])",
        "from protocol.wire.update import decode_update as f, MAGIC as M;"
        " f(M + struct.pack('<I', len(h)) + h + struct.pack('<Q', 0))",
    ],
)
def test_deep_json_is_a_typed_error_not_a_segfault(call: str) -> None:
    """The reproducer of the finding, in a fresh interpreter with the validator node imported."""
    code = textwrap.dedent(
        f"""
        import struct, validator.node
        from protocol.errors import ProtocolError
        h = b"[" * 200000 + b"]" * 200000
        try:
            {call}
        except ProtocolError:
            pass
        else:
            raise SystemExit("accepted")
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]


def test_get_capped_refuses_oversize_signature_answers() -> None:
    from protocol.p2p.blobs import BlobTooLargeError, TransferError
    from protocol.p2p.transfer import get_capped

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/big":
            return httpx.Response(200, content=b"x" * 5000)
        if request.url.path == "/missing":
            return httpx.Response(404)
        return httpx.Response(200, content=b'{"ok":1}')

    client = httpx.Client(transport=httpx.MockTransport(handler))
    assert get_capped("http://peer/ok", max_bytes=100, timeout=1.0, client=client) == b'{"ok":1}'
    with pytest.raises(BlobTooLargeError):
        get_capped("http://peer/big", max_bytes=100, timeout=1.0, client=client)
    with pytest.raises(TransferError):
        get_capped("http://peer/missing", max_bytes=100, timeout=1.0, client=client)


def test_certify_skips_deep_and_oversize_peer_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Checkpoints.certify`` reads peers' signatures through the size cap and the depth guard."""
    from validator import checkpoints as vcert
    from validator import connections as vconn

    seen: list[str] = []

    def fake_get_capped(url: str, *, max_bytes: int, timeout: float) -> bytes:
        seen.append(url)
        assert max_bytes == vcert.MAX_SIGNATURE_RESPONSE_BYTES
        return DEEP

    monkeypatch.setattr(vconn, "get_capped", fake_get_capped)

    class _Rec:
        url = "http://peer"
        role = "validator"
        address = "0x" + "22" * 20

    class _Disc:
        def find(self, *a: object, **k: object) -> list[_Rec]:
            return [_Rec()]

    class _State:
        def round(self, p: int) -> RoundRecord:
            return RoundRecord(signature="0x" + "00" * 96)

    class _Cfg:
        peer_urls: tuple[str, ...] = ()
        fetch_timeout = 1.0

    class _Coord:
        address = "0x" + "11" * 20

        def validators(self) -> list[str]:
            return ["0x" + "11" * 20, "0x" + "22" * 20, "0x" + "33" * 20]

    from types import SimpleNamespace

    runtime = SimpleNamespace(url="http://me", phase="")
    conn = vconn.Connections(
        _Cfg(),
        None,
        _Coord(),
        _Disc(),
        _State(),
        None,
        None,
        runtime,
        None,  # type: ignore[arg-type]
    )
    vcert.Checkpoints(conn, None).certify(1, "0x" + "ab" * 32)  # type: ignore[arg-type]
    assert seen == ["http://peer/signatures/1"]
    assert "1/3" in runtime.phase


def test_guard_is_linear_time() -> None:
    import time

    t = time.perf_counter()
    canonical.json_depth(b'["' + b"a" * 4_000_000 + b'"]' + DEEP)
    assert time.perf_counter() - t < 5.0
