"""``tessera attest``: verify TEE evidence, and make development evidence with the simulated enclave."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    """Add ``attest verify`` and ``attest simulate``."""
    parser = subparsers.add_parser("attest", help="verify TEE evidence / make simulated evidence")
    sub = parser.add_subparsers(dest="attest_command", metavar="ACTION")

    v = sub.add_parser("verify", help="verify a quote or report; exit 0 accepted, 1 refused")
    v.add_argument("file", help="evidence: raw quote/report bytes, or hex text (NVIDIA reports)")
    v.add_argument(
        "--collateral",
        help="collateral JSON (see docs/attestation.md); without it an Intel quote's signatures, QE report "
        "and PCK chain are checked and its TCB status is unknown (refused unless --accept-unknown-tcb)",
    )
    v.add_argument(
        "--accept-unknown-tcb",
        action="store_true",
        help="accept an Intel quote checked without collateral (TCB status and revocation unknown)",
    )
    v.add_argument("--at", help="verification time, ISO 8601 or Unix seconds (default: now)")
    v.add_argument("--policy", help="policy JSON (default: the production policy)")
    v.add_argument("--report-data", help="expected raw report data (hex; NVIDIA: the 32-byte nonce)")
    v.add_argument("--chain-id", type=int, help="expected binding: chain id")
    v.add_argument("--round", type=int, help="expected binding: round")
    v.add_argument("--miner", help="expected binding: miner address (0x...)")
    v.add_argument("--digest", help="expected binding: update digest (hex, 32 bytes)")
    v.add_argument("--json", action="store_true", help="print one JSON object")
    v.set_defaults(handler=_guarded(_verify))

    s = sub.add_parser("simulate", help="write development evidence + collateral + policy for an update")
    s.add_argument("--digest", required=True, help="update digest (hex, 32 bytes)")
    s.add_argument("--chain-id", type=int, default=31337)
    s.add_argument("--round", type=int, default=0)
    s.add_argument("--miner", default="0x" + "00" * 20)
    s.add_argument("--seed", default="tessera-devnet", help="development root seed (same seed, same root)")
    s.add_argument("--out", default="attestation-sim", help="output directory")
    s.add_argument("--at", help="collateral issue time, ISO 8601 or Unix seconds (default: now)")
    s.add_argument("--debug", action="store_true", help="mark the simulated TD as debug (to test refusal)")
    s.set_defaults(handler=_guarded(_simulate))
    parser.set_defaults(handler=lambda args: (parser.print_help(), 1)[1])


def _guarded(fn: Any) -> Any:
    """Turn bad arguments and unreadable files into one line and exit status 2."""

    def run(args: argparse.Namespace) -> int:
        try:
            return int(fn(args))
        except (ValueError, OSError) as exc:
            print(f"tessera: error: {exc}", file=sys.stderr)
            return 2

    return run


def _time(text: str | None) -> dt.datetime:
    if text is None:
        return dt.datetime.now(dt.UTC)
    try:
        return dt.datetime.fromtimestamp(float(text), dt.UTC)
    except ValueError:
        pass
    t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def _read_evidence(path: str, cap: int) -> bytes:
    with Path(path).open("rb") as f:
        raw = f.read(2 * cap + 65)  # hex text is twice the bytes
    if len(raw) > 2 * cap + 64:
        return raw  # over the cap whatever its form: verify refuses it as too large, unparsed
    stripped = b"".join(raw.split())
    if stripped and len(stripped) % 2 == 0 and all(c in b"0123456789abcdefABCDEF" for c in stripped):
        return bytes.fromhex(stripped.decode())
    return raw


def _verify(args: argparse.Namespace) -> int:
    from attestation import Binding, Policy, describe_evidence_safe, load_collateral, load_policy, verify
    from attestation.errors import AttestationError

    now = _time(args.at)
    policy = load_policy(args.policy) if args.policy else Policy()
    if args.accept_unknown_tcb:
        policy = dataclasses.replace(policy, accept_unknown_tcb=True)
    evidence = _read_evidence(args.file, policy.limits.max_evidence_bytes)
    expected: Binding | bytes | None = None
    if args.digest is not None:
        if args.chain_id is None or args.round is None or args.miner is None:
            print("tessera: error: --digest needs --chain-id, --round and --miner", file=sys.stderr)
            return 2
        expected = Binding(
            args.chain_id, args.round, args.miner, bytes.fromhex(args.digest.removeprefix("0x"))
        )
    elif args.report_data is not None:
        expected = bytes.fromhex(args.report_data.removeprefix("0x"))
    fields = describe_evidence_safe(evidence)
    out: dict[str, Any] = {"file": args.file, "at": now.isoformat(), "policy": policy.name, "parsed": fields}
    if args.collateral is None:
        out["collateral"] = "none: TCB status and revocation unknown"
    try:
        collateral = None if args.collateral is None else load_collateral(args.collateral, policy.limits)
        verdict = verify(evidence, collateral, policy, now, expected)
    except AttestationError as exc:
        out.update(accepted=False, error=type(exc).__name__, reason=str(exc))
        _print(out, args.json)
        return 1
    out.update(accepted=True, verdict=verdict.to_dict())
    _print(out, args.json)
    return 0


def _print(out: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(out, indent=1, default=str))
        return
    print(f"verdict:  {'ACCEPTED' if out['accepted'] else 'REFUSED'}")
    if not out["accepted"]:
        print(f"reason:   {out['error']}: {out['reason']}")
    print(f"at:       {out['at']}   policy: {out['policy']}")
    if "collateral" in out:
        print(f"collateral: {out['collateral']}")
    fields = out["verdict"] if out["accepted"] else out["parsed"]
    for key, value in fields.items():
        if isinstance(value, dict):
            for k2, v2 in value.items():
                print(f"  {key}.{k2}: {v2}")
        else:
            print(f"  {key}: {value}")


def _simulate(args: argparse.Namespace) -> int:
    from attestation import Binding
    from attestation.collateral import dumps_collateral
    from attestation.simulated import SimulatedEnclave

    digest = bytes.fromhex(args.digest.removeprefix("0x"))
    binding = Binding(args.chain_id, args.round, args.miner, digest)
    enclave = SimulatedEnclave.from_seed(args.seed.encode())
    now = _time(args.at)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "evidence.bin").write_bytes(enclave.quote(binding.report_data(), debug=args.debug))
    (out / "collateral.json").write_text(dumps_collateral(enclave.collateral(now)))
    (out / "policy.json").write_text(json.dumps(enclave.policy().to_dict(), indent=1))
    print(f"wrote {out}/evidence.bin (TDX quote v4, development root), collateral.json, policy.json")
    print(
        f"verify: tessera attest verify {out}/evidence.bin --collateral {out}/collateral.json "
        f"--policy {out}/policy.json --chain-id {args.chain_id} --round {args.round} --miner {args.miner} "
        f"--digest {digest.hex()}"
    )
    return 0
