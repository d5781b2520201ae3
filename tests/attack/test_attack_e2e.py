"""The quick attack suite (``tessera attack --quick`` in miniature): real nodes, 2 rounds, a few attacks.

Liveness is not asserted here: with the current inner loop an honest MoE miner can fail replay
(docs/security.md F2), and a validator that refused an update the consensus accepted cannot merge
(F11), which can leave a checkpoint uncertified. The run then ends early and is judged on the rounds
that settled.
"""

from __future__ import annotations

import pytest

from tessera.attack.runner import run_suite, table


@pytest.mark.e2e
@pytest.mark.timeout(900)
def test_quick_attack_suite() -> None:
    results = run_suite(["free-rider-random", "poisoner-nan", "colluding-validators"], rounds=2)
    print(table(results))
    by = {r.name: r for r in results}
    base = by["baseline"]
    assert all(r.reward > 0 for r in base.rows if r.role == "miner")
    for name in ("free-rider-random", "poisoner-nan"):
        res = by[name]
        cheaters = [r for r in res.rows if r.role == "miner" and r.label != "honest"]
        assert cheaters and all(r.reward_cheating == 0 for r in cheaters), table([res])
        assert all(r.detected_rounds >= 1 for r in cheaters)
        assert res.honest_share >= 0.99
        assert abs(res.heldout_rel_diff) <= 0.02
    coll = by["colluding-validators"]
    assert coll.checks["consensus_within_honest_range"], coll.validator
    assert all(r.reward_cheating == 0 for r in coll.rows if r.role == "miner" and r.label != "honest")
