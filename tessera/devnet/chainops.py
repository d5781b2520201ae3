"""The devnet's chain operations: JSON-RPC calls to anvil, the contracts' deployment through ``tessera
contracts deploy``, and mining the rest of a phase whose work is done (shared with the attack harness,
``tessera.attack.chainnet``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tessera.devnet.config import DevnetError


def anvil_rpc(rpc_url: str, method: str, params: list[Any]) -> Any:
    """One JSON-RPC call to anvil (``anvil_mine``, ``anvil_setBalance``...); raises :class:`DevnetError`."""
    r = httpx.post(rpc_url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, timeout=30)
    doc = r.json()
    if "error" in doc:
        raise DevnetError(f"anvil {method}: {doc['error']}")
    return doc.get("result")


def deploy_contracts(
    rpc_url: str,
    deployer_key: str,
    out: Path,
    params: dict[str, Any],
    fund: dict[str, int],
    run_file: Path | None = None,
) -> None:
    """Deploy through ``tessera contracts deploy`` (``params``: NetworkParams fields) and fund accounts;
    with ``run_file``, its audit section sets the audit parameters ``params`` leaves out."""
    cmd = [sys.executable, "-m", "tessera", "contracts", "deploy", "--rpc-url", rpc_url,
           "--key-env", "TESSERA_DEVNET_DEPLOYER_KEY", "--out", str(out)]  # fmt: skip
    if run_file is not None:
        cmd += ["--run-file", str(run_file)]
    for name, value in params.items():
        cmd += ["--" + name.replace("_", "-"), str(value)]
    for addr, wei in fund.items():
        cmd += ["--fund", f"{addr}={wei}"]
    env = {**os.environ, "TESSERA_DEVNET_DEPLOYER_KEY": deployer_key}
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, timeout=300)
    if r.returncode != 0:
        raise DevnetError(f"deploy failed: {r.stderr.strip()[-2000:]}")


def fast_forward_phase(chain: Any, rpc_url: str, nv: int, miners: set[str], miners_served: Any) -> bool:
    """Mine the rest of the phase when ``nv`` validators and the live ``miners`` (addresses) have done
    their part; ``miners_served(round)`` counts miners serving their update. True if blocks were mined."""
    from protocol.rounds.phases import Phase

    st = chain.round_state()
    block = chain.block_number()
    if st.phase == Phase.FINALIZE or block > st.deadline:
        return False
    r = st.round
    opened = min(
        (e.block_number for e in chain.events("PhaseAdvanced", round=r) if int(e.phase) == 0),
        default=0,
    )
    joined = {str(e.account) for e in chain.events("Registered") if e.block_number < opened}
    nm = len(set(miners) & joined)
    done = False
    if st.phase == Phase.COMMIT:
        seeds = len(chain.events("SeedCommitted", round=r))
        done = st.commits >= nm and seeds >= nv and chain.checkpoint(r) != b"\0" * 32
    elif st.phase == Phase.REVEAL:
        done = st.seed_reveals >= nv and miners_served(r) >= st.commits
    elif st.phase == Phase.SCORE_COMMIT:
        done = len(chain.events("ScoresCommitted", round=r)) >= nv
    elif st.phase == Phase.SCORE_REVEAL:
        done = st.score_reveals >= nv
    if done:
        # re-check that the phase did not move meanwhile (someone advanced it): never eat the next one
        again = chain.round_state()
        block = chain.block_number()
        if (again.round, again.phase) == (st.round, st.phase) and block <= again.deadline:
            anvil_rpc(rpc_url, "anvil_mine", [hex(again.deadline - block + 1)])
            return True
    return False
