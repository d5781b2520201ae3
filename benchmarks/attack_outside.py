"""What each miner of a finished devnet earned, lost and was audited for, read from the chain with ``cast``
only, as an outsider would (no project code reads the chain here).

    python -m benchmarks.attack_outside --dir DEVNET_DIR --adversary miner3 [--saved 1.0] [--out out.json]

The devnet's anvil stops with it; its state is in ``DIR/anvil-state.json``, so this starts a fresh anvil on
that state (``anvil --load-state``) and reads: ``MinerRewarded``, ``PayFrozen``, ``Slashed``, ``Forfeited``,
``SlashProposed``, ``ReportExpired`` logs and ``auditDraw(round, miner)`` for every paid round. Each miner's
profit against the honest miners' mean per round is ``(credited - forfeited - held - stake burned) / rounds
- honest mean``, plus ``saved x`` the honest mean for compute an adversary did not spend (``C = R``, the
model's assumption; 1 for a free rider, f for a lazy miner, 0 for a miner that only dodges audits).
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

WEI = 10**18
FOUNDRY = Path(__file__).resolve().parents[1] / "contracts" / "node_modules" / "@foundry-rs"
EVENTS = {
    "MinerRewarded": "MinerRewarded(uint256 indexed,address indexed,uint256,uint256)",
    "PayFrozen": "PayFrozen(bytes32 indexed,address indexed,uint256 indexed,uint256)",
    "Slashed": "Slashed(bytes32 indexed,address indexed,uint256)",
    "Forfeited": "Forfeited(bytes32 indexed,address indexed,uint256)",
    "SlashProposed": "SlashProposed(bytes32 indexed,address indexed,address indexed,uint256)",
    "ReportExpired": "ReportExpired(bytes32 indexed,address indexed,uint256 indexed,uint256)",
}


def tool(name: str) -> str:
    """``cast`` or ``anvil``: on PATH, else the copy ``make setup`` installs under contracts/node_modules."""
    found = shutil.which(name)
    if found:
        return found
    local = FOUNDRY / f"{name}-linux-amd64" / "bin" / name
    if local.exists():
        return str(local)
    raise SystemExit(f"{name} not found: install foundry or run make setup")


def cast(*args: str) -> str:
    return subprocess.run([tool("cast"), *args], check=True, capture_output=True, text=True).stdout.strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def word(hexdata: str, i: int) -> int:
    h = hexdata[2:] if hexdata.startswith("0x") else hexdata
    return int(h[64 * i : 64 * (i + 1)], 16)


def addr(topic: str) -> str:
    return "0x" + topic[-40:].lower()


def logs(rpc: str, network: str, event: str) -> list[dict[str, Any]]:
    out = cast("logs", "--json", "--from-block", "0", "--address", network, EVENTS[event], "--rpc-url", rpc)
    return list(json.loads(out or "[]"))


def start_anvil(dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A fresh anvil on ``dir``'s saved chain state, answering; (the process, its RPC URL)."""
    port = free_port()
    anvil = subprocess.Popen(
        [tool("anvil"), "--port", str(port), "--load-state", str(dir / "anvil-state.json"), "--silent"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    rpc = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            cast("block-number", "--rpc-url", rpc)
            break
        except subprocess.CalledProcessError:
            time.sleep(0.2)
    return anvil, rpc


def ledger(rpc: str, network: str, miners: list[str]) -> dict[str, Any]:
    """Per miner address (lower case): pay by round, stake burned and slashes, forfeits, pay held by a
    proposal still open, the rounds proposals named, the rounds audited; and the paid rounds."""
    ev = {name: logs(rpc, network, name) for name in EVENTS}
    out: dict[str, Any] = {k: defaultdict(int) for k in ("slashed", "slashes", "forfeited", "held")}
    out["paid"], out["proposals"] = defaultdict(dict), defaultdict(list)
    for x in ev["MinerRewarded"]:
        out["paid"][addr(x["topics"][2])][int(x["topics"][1], 16)] = word(x["data"], 1)
    for x in ev["Slashed"]:
        out["slashed"][addr(x["topics"][2])] += word(x["data"], 0)
        out["slashes"][addr(x["topics"][2])] += 1
    for x in ev["Forfeited"]:
        out["forfeited"][addr(x["topics"][2])] += word(x["data"], 0)
    decided = {x["topics"][1] for x in ev["Slashed"]} | {x["topics"][1] for x in ev["ReportExpired"]}
    for x in ev["PayFrozen"]:  # held by a proposal still open
        if x["topics"][1] not in decided:
            out["held"][addr(x["topics"][2])] += word(x["data"], 0)
    for x in ev["SlashProposed"]:
        out["proposals"][addr(x["topics"][2])].append(word(x["data"], 0))
    out["rounds"] = sorted({r for by in out["paid"].values() for r in by})
    sig = "auditDraw(uint256,address)(bool,uint256)"
    out["audited"] = {
        a: [
            r
            for r in out["rounds"]
            if cast("call", network, sig, str(r), a, "--rpc-url", rpc).split()[0] == "true"
        ]
        for a in miners
    }
    return out


def read(dir: Path, adversaries: dict[str, float]) -> dict[str, Any]:
    """Start anvil on ``dir``'s saved state, read the ledger with cast, stop anvil; the per-miner table."""
    dep = json.loads((dir / "deployment.json").read_text())
    keys = json.loads((dir / "devnet-keys.json").read_text())
    network, params = dep["network"], dep["params"]
    miners = {
        name: cast("wallet", "address", "--private-key", key).lower()
        for name, key in keys.items()
        if name.startswith("miner")
    }
    anvil, rpc = start_anvil(dir)
    try:
        led = ledger(rpc, network, list(miners.values()))
    finally:
        anvil.terminate()
        anvil.wait(10)
    paid, n = led["paid"], len(led["rounds"])
    honest = [a for name, a in miners.items() if name not in adversaries]
    mean = sum(sum(paid[a].values()) for a in honest) / max(1, len(honest) * n) / WEI
    rows = []
    for name, a in sorted(miners.items()):
        credited = sum(paid[a].values()) / WEI
        kept = credited - (led["forfeited"][a] + led["held"][a] + led["slashed"][a]) / WEI
        rows.append({
            "node": name, "address": a, "adversary": name in adversaries,
            "rounds_paid_nonzero": sum(v > 0 for v in paid[a].values()), "credited": round(credited, 3),
            "audited_rounds": led["audited"][a], "proposals_rounds": led["proposals"][a],
            "slashes": led["slashes"][a], "stake_burned": round(led["slashed"][a] / WEI, 3),
            "forfeited": round(led["forfeited"][a] / WEI, 3), "held_open": round(led["held"][a] / WEI, 3),
            "profit_vs_honest_per_round": round(kept / max(1, n) - mean + adversaries.get(name, 0.0) * mean, 3),
        })  # fmt: skip
    return {
        "read_with": "cast (logs and auditDraw) on anvil --load-state DIR/anvil-state.json",
        "network": network, "rounds": led["rounds"], "audit_rate_bps": params.get("audit_rate_bps"),
        "committee_size": params.get("committee_size"), "vesting_rounds": params.get("vesting_rounds"),
        "min_miner_stake": int(params["min_miner_stake"]) / WEI, "slash_bps": params.get("slash_bps"),
        "honest_mean_pay_per_round": round(mean, 3), "miners": rows,
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, required=True, help="a finished devnet's --dir")
    ap.add_argument(
        "--adversary",
        action="append",
        default=[],
        metavar="NODE[=SAVED]",
        help="an adversarial node and the share of an honest round's compute it saves (default 0)",
    )
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    args = ap.parse_args()
    adversaries = {}
    for spec in args.adversary:
        node, _, saved = spec.partition("=")
        adversaries[node] = float(saved or 0.0)
    doc = read(args.dir, adversaries)
    text = json.dumps(doc, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
