"""Coverage-guided campaigns with atheris (libFuzzer): ``python -m tests.fuzz.coverage --target record
--runs 200000 --max-time 300 [--seed 1] [--out FILE]``.

Targets: ``update`` (``decode_update`` at the default caps), ``record`` (``decode_record``) and
``dhtrecord`` (``protocol.p2p.dhtvalidator.check_dht_record``: what a storing DHT node runs on a stranger's
store; the input is a msgpack ``[subkey, value, expiration offset, key flag]``, or raw value bytes under
the honest subkey). The ``tessera`` modules are instrumented for coverage; libFuzzer starts from the
mutational targets' seeds. An input passes when it is accepted or refused with the boundary's typed error;
any other exception is counted (by type and innermost Tessera frame) with its input saved, and the
campaign goes on. At the end a JSON summary: inputs, accepted, refused, untyped exceptions, the worst wall
time per input and the process's peak resident set (libFuzzer prints its coverage, ``cov:``, on stderr).

atheris is not a project dependency (no wheel for this Python from the package index here for 3.1.0;
3.0.0 installs as a manylinux wheel: ``pip install atheris==3.0.0``); CI does not run these campaigns.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

NOW = 1_800_000_000
CHAIN = 31337


class _Stats:
    def __init__(self, target: str) -> None:
        self.target = target
        self.inputs = 0
        self.accepted = 0
        self.refused: Counter[str] = Counter()
        self.untyped: Counter[str] = Counter()
        self.worst_s = 0.0
        self.t0 = time.monotonic()
        self.saved: dict[str, str] = {}

    def summary(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "inputs": self.inputs,
            "accepted": self.accepted,
            "refused": sum(self.refused.values()),
            "refused_by": dict(self.refused.most_common(12)),
            "untyped_exceptions": sum(self.untyped.values()),
            "untyped_by": dict(self.untyped),
            "reproducers": self.saved,
            "worst_wall_s_per_input": round(self.worst_s, 4),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "seconds": round(time.monotonic() - self.t0, 1),
        }


def _where(exc: BaseException) -> str:
    tb = [f for f in traceback.extract_tb(exc.__traceback__) if "/.venv/" not in f.filename]
    f = tb[-1] if tb else None
    return f"{Path(f.filename).name}:{f.lineno}" if f else "?"


def _dht_input(data: bytes) -> Any:
    """The DHTRecord a stranger's store of ``data`` amounts to (see the module docstring)."""
    import msgpack
    from hivemind.dht.validation import DHTRecord

    from protocol.p2p.dhtvalidator import round_key_id

    honest_key = round_key_id(CHAIN, 3)
    try:
        sub, value, offset, flag = msgpack.unpackb(data, raw=False)
        exp = NOW + float(offset)
        key = honest_key if flag else bytes(20)
        return DHTRecord(key, bytes(sub), bytes(value), exp)
    except Exception:
        subkey = msgpack.packb("0x" + "00" * 20)
        return DHTRecord(honest_key, subkey, msgpack.packb(data, use_bin_type=True), NOW + 600.0)


def _setup(target: str) -> tuple[Any, tuple[type[BaseException], ...], list[bytes]]:
    """(check function, typed errors, seeds)."""
    import atheris

    with atheris.instrument_imports(include=["protocol", "training"]):  # instrumented as they load
        import protocol.p2p.dhtvalidator
        import protocol.wire.records
        import protocol.wire.update
    loaded = (protocol.p2p.dhtvalidator, protocol.wire.records, protocol.wire.update)
    print("instrumented:", ", ".join(m.__name__ for m in loaded), file=sys.stderr)
    from protocol.errors import ProtocolError
    from protocol.wire.records import RecordError

    from .targets import TARGETS

    if target == "update":
        from protocol.wire.update import decode_update
        from protocol.wire.updatecost import UpdateCaps

        t = TARGETS["update"]()
        t.setup()
        t.warm_up()
        return (lambda d: decode_update(d, UpdateCaps())), (ProtocolError,), list(t.seeds)
    t = TARGETS["record"]()
    t.setup()
    if target == "record":
        from protocol.wire.records import decode_record

        return (lambda d: decode_record(d, now=NOW + 10)), (RecordError,), list(t.seeds)
    import msgpack

    from protocol.p2p.dhtvalidator import check_dht_record

    def check(d: bytes) -> Any:
        return check_dht_record(_dht_input(d), chain_id=CHAIN, now=NOW + 10)

    seeds = []
    for s in t.seeds:
        addr = json.loads(s)["address"]
        seeds.append(msgpack.packb([msgpack.packb(addr), msgpack.packb(s, use_bin_type=True), 600.0, 1]))
    return check, (RecordError,), seeds


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the campaign in a child process (libFuzzer ends its process without running
    ``atexit``), then prints the child's summary with libFuzzer's final coverage line."""
    args = sys.argv[1:] if argv is None else argv
    if "--child" in args:
        return _child([a for a in args if a != "--child"])
    import re
    import subprocess

    out = Path(tempfile.mkdtemp(prefix="atheris-summary-")) / "summary.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.coverage", *args, "--child", "--summary", str(out)],
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    )
    done = [ln for ln in proc.stderr.splitlines() if re.search(r"#\d+\s+DONE\s+cov:", ln)]
    summary = json.loads(out.read_text()) if out.exists() else {"error": proc.stderr[-2000:]}
    summary["libfuzzer_final"] = done[-1] if done else None
    summary["exit_status"] = proc.returncode
    text = json.dumps(summary, indent=1)
    print(text)
    for i, a in enumerate(args):
        if a == "--out" and i + 1 < len(args):
            Path(args[i + 1]).write_text(text)
    return 0 if summary.get("untyped_exceptions") == 0 else 1


def _child(argv: list[str]) -> int:
    """The campaign itself (libFuzzer exits the process when done)."""
    p = argparse.ArgumentParser(prog="python -m tests.fuzz.coverage", description=__doc__)
    p.add_argument("--target", choices=["update", "record", "dhtrecord"], required=True)
    p.add_argument("--runs", type=int, default=100_000)
    p.add_argument("--max-time", type=int, default=300, help="seconds")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-len", type=int, default=8192)
    p.add_argument("--out", type=Path)
    p.add_argument("--summary", type=Path, required=True)
    args = p.parse_args(argv)
    import atheris

    check, allowed, seeds = _setup(args.target)
    corpus = Path(tempfile.mkdtemp(prefix=f"atheris-{args.target}-"))
    for i, s in enumerate(seeds):
        (corpus / f"seed{i}").write_bytes(s)
    stats = _Stats(args.target)
    crashes = Path(tempfile.mkdtemp(prefix=f"atheris-{args.target}-untyped-"))

    def report() -> None:
        args.summary.write_text(json.dumps(stats.summary(), indent=1))

    def one(data: bytes) -> None:
        stats.inputs += 1
        t0 = time.perf_counter()
        try:
            check(data)
            stats.accepted += 1
        except allowed as exc:
            stats.refused[type(exc).__name__] += 1
        except Exception as exc:  # a finding: counted and saved, the campaign goes on
            key = f"{type(exc).__name__} at {_where(exc)}"
            if key not in stats.untyped:
                path = crashes / f"{len(stats.untyped)}.bin"
                path.write_bytes(data)
                stats.saved[key] = str(path)
            stats.untyped[key] += 1
        stats.worst_s = max(stats.worst_s, time.perf_counter() - t0)
        if stats.inputs % 100 == 0 or stats.inputs >= args.runs:
            report()

    atheris.Setup(
        [
            sys.argv[0],
            f"-runs={args.runs}",
            f"-max_total_time={args.max_time}",
            f"-seed={args.seed}",
            f"-max_len={args.max_len}",
            "-print_final_stats=1",
            str(corpus),
        ],
        one,
    )
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main())
