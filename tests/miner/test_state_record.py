"""The miner's per-round record is typed (``miner.state.MinerRoundRecord``) and reads the ``state.json``
that miners wrote before it, keeping every key (issue 15)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from miner.errors import MinerStateError
from miner.state import ABANDONED, COMMITTED, SERVED, MinerRoundRecord, MinerState

# state.json as miners before the typed record wrote it: a served round that started from no residual
# (ef_source null), one from round 2's, a skipped round, all under sort_keys and indent 1
_BUILT = {
    "assign_seed": "00" * 32,
    "checkpoint": "11" * 32,
    "ef_after": "22" * 32,
    "inner_steps": 60,
    "loss_first": 5.5,
    "loss_last": 4.25,
    "modules": ["embed", "trunk.0", "head"],
    "registry": ["0xaa", "0xbb"],
    "round": 2,
    "snapshots": {"0": "0x" + "33" * 32, "30": "0x" + "44" * 32},
    "tokens": 7680,
    "train_cpu_seconds": 3.5,
    "train_seconds": 3.25,
    "trained_params": 12345,
    "transcript_parts": [["55" * 32, "66" * 32], ["77" * 32, "88" * 32]],
    "transcript_steps": [0, 60],
    "update_bytes": 2978,
    "update_digest": "99" * 32,
}
OLD_MINER_STATE = {
    "rounds": {
        "1": {"reason": "not in the round's registry", "skipped": True, "status": ABANDONED},
        "2": {
            **_BUILT,
            "consensus_score": 7000,
            "ef_source": None,
            "reward": str(10**20),
            "served_at": 1764100000.5,
            "status": SERVED,
        },
        "3": {
            **_BUILT,
            "committed_at": 1764100100.25,
            "ef_source": [2, "99" * 32],
            "reconciled": True,
            "round": 3,
            "status": COMMITTED,
        },
    },
    "version": 1,
}


def test_a_state_file_of_an_existing_miner_loads_and_is_kept_byte_for_byte(tmp_path: Path) -> None:
    raw = json.dumps(OLD_MINER_STATE, sort_keys=True, indent=1).encode()
    (tmp_path / "state.json").write_bytes(raw)
    st = MinerState(tmp_path)
    two, three = st.record(2), st.record(3)
    assert two is not None and three is not None
    assert two.status == SERVED and two.ef_source is None and two.reward == str(10**20)
    assert three.ef_source == [2, "99" * 32] and three.transcript_parts == _BUILT["transcript_parts"]
    assert st.record(1) == MinerRoundRecord(
        status=ABANDONED, skipped=True, reason="not in the round's registry"
    )
    st.set_status(3, COMMITTED)  # a write with nothing changed
    assert (tmp_path / "state.json").read_bytes() == raw


def test_a_misspelt_field_is_an_error_and_a_failed_edit_writes_nothing(tmp_path: Path) -> None:
    st = MinerState(tmp_path)
    st.prepare(1, MinerRoundRecord(update_digest="aa"), {})
    rec = st.record(1)
    assert rec is not None and rec.status == "prepared"
    with pytest.raises(AttributeError):
        rec.updat_digest = "bb"  # type: ignore[attr-defined]
    with pytest.raises(MinerStateError, match="unknown status"), st.edit(1) as stored:
        stored.status, stored.reason = "comitted", "typo"
    assert st.record(1) == MinerRoundRecord(update_digest="aa")
    rec.reason = "a copy"  # record() hands out copies: the stored one is unchanged
    assert MinerState(tmp_path).record(1) == MinerRoundRecord(update_digest="aa")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"update_digst": "aa"}, "unknown keys \\['update_digst'\\]"),
        ({"transcript_steps": ["0"]}, "'transcript_steps' must be list\\[int\\]"),
        ({"status": "comitted"}, "unknown status 'comitted'"),
        ({"ef_source": [2, None]}, "'ef_source' must be list\\[int \\| str\\]"),
    ],
)
def test_a_record_it_cannot_read_is_refused_naming_the_key(
    tmp_path: Path, change: dict, message: str
) -> None:
    doc = copy.deepcopy(OLD_MINER_STATE)
    doc["rounds"]["3"].update(change)  # type: ignore[index]
    (tmp_path / "state.json").write_text(json.dumps(doc))
    with pytest.raises(MinerStateError, match=f"round 3: {message}"):
        MinerState(tmp_path)


def test_a_record_written_before_epochs_draws_its_assignment_from_its_assign_seed(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text(json.dumps(OLD_MINER_STATE))
    st = MinerState(tmp_path)
    two = st.record(2)
    assert two is not None and two.epoch_seed is None and two.epoch_registry is None
    assert two.assignment_inputs() == (bytes(32), ["0xaa", "0xbb"], ["0xaa", "0xbb"])
    one = st.record(1)
    assert one is not None and one.assignment_inputs() is None  # skipped: nothing was drawn
    # a record of an epoch keeps both seeds and both registries
    st.prepare(
        4, MinerRoundRecord(**{**_BUILT, "round": 4}, epoch_seed="ab" * 32, epoch_registry=["0xaa"]), {}
    )
    four = MinerState(tmp_path).record(4)
    assert four is not None and four.assign_seed == "00" * 32
    assert four.assignment_inputs() == (b"\xab" * 32, ["0xaa", "0xbb"], ["0xaa"])
