"""Issue 27's fault scenarios, the parts that run without a devnet: the drip proxy against a real node
API, the ground sybil keys, and the scenarios' shapes (the devnet runs are ``tessera faults NAME``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from eth_account import Account

from protocol.node.api import NodeMetrics, NodeServer, create_node_app
from protocol.p2p.blobs import BlobStore, FetchTimeoutError
from protocol.p2p.transfer import FetchPolicy, fetch_blob
from protocol.wire.tensorblob import encode_tensors
from tessera.devnet.faults import SCENARIOS, table
from tessera.devnet.faults.figures import slowest_honest
from tessera.devnet.faults.slowpeers import LOW_PREFIX, grind_key, seed_sybil_keys
from tessera.devnet.proxy import FaultProxy, ProxyMode


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[FaultProxy, str, str]]:
    """A node API behind a proxy, serving a transcript state and an update-like blob."""
    store = BlobStore(tmp_path)
    app = create_node_app(role="miner", status=dict, store=store, metrics=NodeMetrics.create("miner"))
    server = NodeServer(app).start()
    proxy = FaultProxy("drip").start()
    proxy.set_target(int(server.url.rsplit(":", 1)[1]))
    state = store.put(encode_tensors({"exp_avg/w": torch.ones(64)}))
    other = store.put(b"TSRUPD" + bytes(4000))
    yield proxy, state, other
    proxy.stop()
    server.stop()


def test_drip_holds_back_states_only(served: tuple[FaultProxy, str, str]) -> None:
    proxy, state, other = served
    proxy.drip_s = 4.0
    proxy.set_mode(ProxyMode.DRIP)
    policy = FetchPolicy(timeout=5.0, attempts=1)
    t0 = time.monotonic()
    assert fetch_blob(proxy.url, other, policy=policy).startswith(b"TSRUPD")
    assert time.monotonic() - t0 < 3.0  # an update goes straight through (a loaded machine: seconds)
    t0 = time.monotonic()
    assert len(fetch_blob(proxy.url, state, policy=policy)) > 64
    assert time.monotonic() - t0 >= 3.9 and proxy.stats.dripped == 1
    with pytest.raises(FetchTimeoutError):  # a fetch bounded below the delay gives up
        fetch_blob(proxy.url, state, policy=FetchPolicy(timeout=0.5, attempts=1))


def test_sybil_keys_are_low_and_kept(tmp_path: Path) -> None:
    key = grind_key(7, "miner4")
    assert str(Account.from_key(key).address).lower().startswith(LOW_PREFIX)
    assert grind_key(7, "miner4") == key  # the seed names the same identities
    (tmp_path / "old").mkdir()
    seed_sybil_keys(tmp_path, ["miner4", "miner5"], 7)
    assert not (tmp_path / "old").exists() and (tmp_path / "devnet-keys.json").exists()


def test_issue_27_scenarios_shape(tmp_path: Path) -> None:
    for name in ("drip-sybils", "freeze-after-announce", "validator-rpc-outage", "same-key-twice"):
        sc = SCENARIOS[name]
        assert (sc.validators, sc.honest_miners, sc.block_time, sc.fast_forward) == (3, 4, 2.0, False)
    drip = SCENARIOS["drip-sybils"].fresh()
    cfg = drip.devnet_config(tmp_path, miners=3, inner_steps=8)
    assert drip.cheats == ["miner4", "miner5"] and cfg.miners == 6
    assert SCENARIOS["drip-sybils"].cheats == []  # per-run state lives on the copy


def test_drip_sybils_audits_every_miner() -> None:
    """The sybils' dripped transcript states are fetched only from audited miners (issue 26): at the
    default stake almost none are audited and the sybils, training honestly, were paid (seed 107); the
    scenario's stake makes the deterrence formula audit every miner."""
    from protocol.rounds.auditspec import AuditSpec
    from protocol.rounds.deployment import NetworkParams

    p, sc = NetworkParams(), SCENARIOS["drip-sybils"]
    assert sc.miner_stake is not None
    audits = AuditSpec(committee_size=1, miners=(sc.honest_miners or 0) + sc.sybils, validators=sc.validators)
    rate = audits.network_params(sc.miner_stake * 10**18, p.emission_per_round, p.validator_share_bps)
    assert rate["audit_rate_bps"] == 10_000
    default = audits.network_params(p.min_miner_stake, p.emission_per_round, p.validator_share_bps)
    assert default["audit_rate_bps"] < 10_000


def test_slowest_honest_and_the_table() -> None:
    times = {
        2: {
            "validator0/miner0": {"stage": "ok", "seconds": 9.5, "budget_s": 40.0},
            "validator0/miner4": {"stage": "budget", "seconds": 40.0, "budget_s": 40.0},
        },
        3: {"validator1/miner2": {"stage": "ok", "seconds": 12.0, "budget_s": 60.0}},
    }
    slow = slowest_honest(times, {"miner4"})
    assert slow == {"round": 3, "who": "validator1/miner2", "stage": "ok", "seconds": 12.0, "budget_s": 60.0}
    report = {
        "scenarios": [
            {"scenario": "drip-sybils", "ok": True, "checks": [], "wall_seconds": 1.0,
             "figures": {"rounds_lost": [], "slowest_honest_verification": slow}}
        ]
    }  # fmt: skip
    assert "rounds lost none; slowest honest verification 12.0s of a 60.0s budget" in table(report)
