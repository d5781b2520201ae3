"""Typed configs (file < env < flags, secrets never from files) and restart-safe node state; the miner's own
config and state tests are in ``tests/miner/test_config_state.py``."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest
import torch

from miner.config import MinerConfig, load_miner_config
from miner.errors import MinerConfigError
from protocol.node.settings import SettingsError, load_settings
from validator.config import ValidatorConfig, load_validator_config
from validator.context import Verdict
from validator.errors import ValidatorConfigError, ValidatorStateError
from validator.policy import VerifyPolicy
from validator.state import ValidatorState


def test_bad_values(tmp_path: Path) -> None:
    f = tmp_path / "m.toml"
    f.write_text("[miner]\nnope = 1\n")
    with pytest.raises(MinerConfigError, match="unknown keys"):
        load_miner_config(f, env={})
    with pytest.raises(MinerConfigError, match="port"):
        load_miner_config(None, {"port": "eighty"}, env={})
    with pytest.raises(MinerConfigError):
        load_miner_config(None, {"tee": "sgx-please"}, env={})
    with pytest.raises(ValidatorConfigError, match="merge_method"):
        load_validator_config(None, {"merge_method": "max"}, env={})
    f.write_text("[miner\n")
    with pytest.raises(MinerConfigError, match="TOML"):
        load_miner_config(f, env={})


def test_settings_that_would_be_silently_ignored_are_refused(tmp_path: Path) -> None:
    """Issue 16: a typo in a TESSERA_MINER_* variable and a validator's config given to a miner were ignored."""
    with pytest.raises(MinerConfigError, match=r"TESSERA_MINER_PROT \(did you mean TESSERA_MINER_PORT\?\)"):
        load_miner_config(None, {}, env={"TESSERA_MINER_PROT": "7001"})
    # the variable a *_env setting points at is not a setting: the key, and a renamed key variable
    assert load_miner_config(None, {}, env={"TESSERA_MINER_KEY": "0x01"}).port == 0
    assert load_miner_config(None, {"key_env": "TESSERA_MINER_KEY2"}, env={"TESSERA_MINER_KEY2": "0x1"})
    assert load_validator_config(None, {}, env={"TESSERA_MINER_PROT": "x", "TESSERA_VALIDATOR_KEY": "k"})
    f = tmp_path / "v.toml"
    f.write_text("[validator]\nport = 7000\n")
    with pytest.raises(MinerConfigError, match=r"has no \[miner\] table \(it has \[validator\]\)"):
        load_miner_config(f, env={})
    f.write_text("[validator]\nport = 7000\n[miner]\nport = 7100\n")  # one file for both roles: fine
    assert load_miner_config(f, env={}).port == 7100


def test_secrets_only_from_env(tmp_path: Path) -> None:
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class C:
        key: str = ""

    f = tmp_path / "c.toml"
    f.write_text('key = "0x11"\n')
    with pytest.raises(SettingsError, match="environment"):
        load_settings(C, toml_path=f, secret_fields=("key",), env={})


def test_validator_state_resume(tmp_path: Path) -> None:
    st = ValidatorState(tmp_path)
    st.put_verdict(3, "0xabc", Verdict("0xabc", 3, True, "ok", "", score=5))
    with st.edit(3) as rec:
        rec.scores, rec.salt, rec.score_committed = [5], "00" * 32, True
    back = ValidatorState(tmp_path)
    assert back.verdict(3, "0xabc") == Verdict("0xabc", 3, True, "ok", "", score=5)
    assert back.round(3).scores == [5] and back.round(3).score_committed


def test_roles_share_the_node_fields_and_help_shows_their_docs() -> None:
    """Both roles extend ``NodeConfig`` (one definition of the shared fields) with their own defaults,
    and ``--help`` shows each field's docstring, a role's over the base's."""
    import argparse

    from protocol.node.settings import NodeConfig, field_docs
    from tessera.nodes import add_config_flags, overrides_from_args

    shared = {f.name for f in dataclasses.fields(NodeConfig)}
    for cls in (MinerConfig, ValidatorConfig):
        assert issubclass(cls, NodeConfig) and shared <= {f.name for f in dataclasses.fields(cls)}
    assert (
        MinerConfig().key_env == "TESSERA_MINER_KEY" and ValidatorConfig().key_env == "TESSERA_VALIDATOR_KEY"
    )
    assert "miner's private key" in field_docs(MinerConfig)["key_env"]
    assert field_docs(ValidatorConfig)["poll_interval"] == "Seconds between looks at the chain."
    p = argparse.ArgumentParser()
    add_config_flags(p, ValidatorConfig)
    text = " ".join(p.format_help().split())
    # every verification threshold is a setting of the verify section, documented once (VerifyPolicy)
    assert "of the decoded update against the validator's own compression" in text
    for flag in ("--heldout-windows", "--max-heldout-excess", "--eval-own-batches", "--attested-segments"):
        assert "--verify." + flag[2:] in text
        assert f"{flag} " not in text  # the old top-level spelling is hidden (still read, with a warning)
    assert "--verify.device" not in text and "--merge-method" not in text
    args = p.parse_args(["--verify.heldout-windows", "4", "--segments-per-miner", "3"])
    assert overrides_from_args(args, ValidatorConfig) == {
        "verify.heldout_windows": "4",
        "segments_per_miner": "3",
    }
    cfg = load_validator_config(
        None,
        overrides_from_args(args, ValidatorConfig),
        env={"TESSERA_VALIDATOR_VERIFY_ATTESTED_SEGMENTS": "2"},
    )
    policy = cfg.verify
    assert (policy.heldout_windows, policy.attested_segments, policy.segments_per_miner) == (4, 2, 3)
    assert type(policy).__name__ == "VerifyPolicy" and policy.replay_rel_tol == VerifyPolicy().replay_rel_tol
    assert "(default: ~/.tessera/validator)" in text


def test_device_setting() -> None:
    """``device`` is shared by both roles (flag, env, file), validated when the config loads."""
    assert load_miner_config(None, {}, env={}).device == "cpu"
    assert load_miner_config(None, {"device": "cpu"}, env={"TESSERA_MINER_DEVICE": "gpu"}).device == "cpu"
    with pytest.raises(MinerConfigError, match="cpu, cuda or cuda:N"):
        load_miner_config(None, {}, env={"TESSERA_MINER_DEVICE": "gpu"})
    with pytest.raises(ValidatorConfigError, match="cpu, cuda or cuda:N"):
        load_validator_config(None, {"device": "cuda:x"}, env={})
    if not torch.cuda.is_available():
        with pytest.raises(MinerConfigError, match="CUDA is not available"):
            load_miner_config(None, {"device": "cuda"}, env={})
        with pytest.raises(ValidatorConfigError, match="CUDA is not available"):
            load_validator_config(None, {}, env={"TESSERA_VALIDATOR_DEVICE": "cuda:0"})
    import argparse

    from tessera.commands import miner, validator

    for mod in (miner, validator):
        parser = argparse.ArgumentParser()
        mod.register(parser.add_subparsers())
        role = mod.__name__.rsplit(".", 1)[1]
        args = parser.parse_args([role, "run", "--device", "cuda:1"])
        assert args.cfg_device == "cuda:1"


# a verdict as Verdict.to_json has always written it
OLD_VERDICT = {
    "accepted": True,
    "attested": False,
    "digest": "dd" * 32,
    "evidence": {"segments": [[0, 30]]},
    "metrics": {"final_cosine": 0.99, "replayed_steps": 30, "verify_cpu_seconds": 1.25},
    "miner": "0xaa",
    "provable": False,
    "reason": "",
    "round": 3,
    "score": 7000,
    "stage": "ok",
    "timings": {"format": 0.01, "recompute": 1.5},
}

# state.json as nodes before the typed record wrote it (every key of the old TypedDict, sort_keys, indent 1)
OLD_VALIDATOR_STATE = {
    "checkpoints": {"3": "0x" + "11" * 32, "4": "0x" + "22" * 32},
    "rounds": {
        "3": {
            "certified": True,
            "certify_wait_since": 1764100000.25,
            "consensus": {"0xaa": 7000, "0xbb": 0},
            "heldout_after": 5.25,
            "heldout_before": 5.5,
            "merge_seconds": 0.125,
            "merged": "0x" + "22" * 32,
            "merged_from": ["0xaa"],
            "miners": ["0xaa", "0xbb"],
            "rechecked": {"0xbb:" + "cc" * 32: True},
            "rewards": {"0xaa": str(10**20)},
            "salt": "00" * 32,
            "score_committed": True,
            "score_revealed": True,
            "scores": [7000, 0],
            "seed_secret": "ab" * 32,
            "signature": "0x" + "ef" * 65,
            "updates": {"0xaa": "0x" + "dd" * 32},
            "verdicts": {"0xaa": OLD_VERDICT},
            "verify_seconds": 1,
        },
        "4": {"verdicts": {}},
    },
    "version": 1,
}


def test_validator_state_of_an_existing_node_loads_and_is_kept_byte_for_byte(tmp_path: Path) -> None:
    """An existing node's state.json loads into typed records, and the next write keeps every key (issue 15)."""
    raw = json.dumps(OLD_VALIDATOR_STATE, sort_keys=True, indent=1).encode()
    (tmp_path / "state.json").write_bytes(raw)
    st = ValidatorState(tmp_path)
    rec = st.round(3)
    assert rec.scores == [7000, 0] and rec.salt == "00" * 32 and rec.score_revealed is True
    assert rec.merged == st.checkpoint(4) and rec.verdicts["0xaa"].score == 7000
    assert st.round(4).scores is None and st.round(4).certified is None
    st.put_checkpoint(4, "0x" + "22" * 32)  # a write with nothing changed
    assert (tmp_path / "state.json").read_bytes() == raw


def test_validator_round_record_is_typed(tmp_path: Path) -> None:
    """A misspelt field is an error at once, never a silent None (issue 15); an edit that raises writes
    nothing and puts the fields back."""
    st = ValidatorState(tmp_path)
    with st.edit(3) as rec:
        rec.scores, rec.salt = [1, 2], "00"
    with pytest.raises(AttributeError):
        rec.score_commited = True  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        _ = rec.seed_secrt  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError), st.edit(3) as rec:
        rec.salt = "ff"
        raise RuntimeError("cut off")
    assert st.round(3).salt == "00"
    assert ValidatorState(tmp_path).round(3).to_json() == {"verdicts": {}, "scores": [1, 2], "salt": "00"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"score_commited": True}, "unknown keys \\['score_commited'\\]"),
        ({"scores": ["7000"]}, "'scores' must be list\\[int\\]"),
        ({"certified": 1}, "'certified' must be bool"),
        ({"updates": {"0xaa": 5}}, "'updates' must be dict\\[str, str\\]"),
        (
            {"verdicts": {"0xaa": {**OLD_VERDICT, "score": "7000"}}},
            "'verdicts' must be dict\\[str, .*Verdict\\]",
        ),
        (
            {"verdicts": {"0xaa": {k: v for k, v in OLD_VERDICT.items() if k != "miner"}}},
            "'verdicts' must be",
        ),
    ],
)
def test_validator_state_refuses_a_record_it_cannot_read(tmp_path: Path, change: dict, message: str) -> None:
    """An unknown key or a value of the wrong type in state.json is a one-line error naming the file, the
    round and the key, not a field nobody reads (issue 15)."""
    doc = copy.deepcopy(OLD_VALIDATOR_STATE)
    doc["rounds"]["3"].update(change)  # type: ignore[index]
    (tmp_path / "state.json").write_text(json.dumps(doc))
    with pytest.raises(ValidatorStateError, match=f"round 3: {message}"):
        ValidatorState(tmp_path)


def test_validator_sections_and_settings_that_moved(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """One ``VerifyPolicy``, the ``verify`` section (file, env, flag); the merge policy is the run file's.
    An older config's top-level threshold is read with a warning; its merge settings load only where they
    say what the run file says, else one typed line."""
    from protocol.runspec import RunSpec
    from training.merge import MergePolicy

    f = tmp_path / "v.toml"
    f.write_text("[validator]\nport = 7000\n[validator.verify]\nsegments_per_miner = 3\nmax_rel_norm = 2.5\n")
    cfg = load_validator_config(f, {"device": "cpu"}, env={"TESSERA_VALIDATOR_VERIFY_MAX_REL_NORM": "3.5"})
    assert (cfg.port, cfg.verify.segments_per_miner, cfg.verify.max_rel_norm) == (7000, 3, 3.5)
    assert cfg.verify.device == cfg.device == "cpu"
    f.write_text("[validator.verify]\nsegments_per_mienr = 3\n")
    with pytest.raises(ValidatorConfigError, match=r"unknown keys .*verify.segments_per_mienr"):
        load_validator_config(f, env={})
    f.write_text("[validator]\nverify = 3\n")
    with pytest.raises(ValidatorConfigError, match=r"must be a table"):
        load_validator_config(f, env={})
    with pytest.raises(ValidatorConfigError, match="VERIFY_SEGMENTS_PER_MINR"):
        load_validator_config(None, env={"TESSERA_VALIDATOR_VERIFY_SEGMENTS_PER_MINR": "3"})
    with pytest.raises(ValueError, match="verify.device"):
        ValidatorConfig(verify=VerifyPolicy(device="cuda"))
    # an older config: top-level thresholds are read into the section, with a warning
    f.write_text("[validator]\nsegments_per_miner = 4\n")
    with caplog.at_level("WARNING"):
        cfg = load_validator_config(
            f, {"min_own_gain": "0.5"}, env={"TESSERA_VALIDATOR_ATTESTED_SEGMENTS": "2"}
        )
    assert (cfg.verify.segments_per_miner, cfg.verify.min_own_gain, cfg.verify.attested_segments) == (
        4,
        0.5,
        2,
    )
    assert "segments_per_miner" in caplog.text and "verify.segments_per_miner" in caplog.text
    # the merge policy: the run file's; an old merge setting that agrees with it is a warning, else an error
    run = tmp_path / "run.json"
    RunSpec(merge=MergePolicy("trimmed_mean", trim=0.25)).save(run)
    caplog.clear()
    # at the logger itself: `tessera attack`, run in-process by other tests, quiets the "validator" loggers
    with caplog.at_level("WARNING", logger="validator.config"):
        load_validator_config(
            None, {"run_file": str(run), "merge_method": "trimmed_mean", "trim": "0.25"}, env={}
        )
    assert "deprecated and ignored" in caplog.text
    with pytest.raises(
        ValidatorConfigError, match=r"merge_method = 'mean' differs from the run file's merge.method"
    ):
        load_validator_config(None, {"run_file": str(run), "merge_method": "mean"}, env={})
    with pytest.raises(ValidatorConfigError, match=r"clip_factor .* differs"):
        load_validator_config(None, {"run_file": str(run)}, env={"TESSERA_VALIDATOR_CLIP_FACTOR": "3"})
    f.write_text('[validator]\nmerge_method = "mean"\n')
    with pytest.raises(ValidatorConfigError, match=r"merge_method: not a validator setting any more"):
        load_validator_config(f, {"run_file": str(tmp_path / "none.json")}, env={})
    # without a judge for them, a retired setting is refused by the loader itself
    with pytest.raises(SettingsError, match="trim .* is no longer a setting"):
        load_settings(ValidatorConfig, overrides={"trim": "0.1"}, env={})


def test_an_ignored_setting_loads_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``withhold_grace_seconds`` does nothing since the deadline schedule (issue 27): an older config that
    sets it still loads, with one warning naming it, and the field is gone."""
    f = tmp_path / "v.toml"
    f.write_text("[validator]\nwithhold_grace_seconds = 45\nslash = false\n")
    with caplog.at_level("WARNING"):
        cfg = load_validator_config(f, env={})
    assert cfg.slash is False and not hasattr(cfg, "withhold_grace_seconds")
    assert any("withhold_grace_seconds: deprecated and ignored" in m for m in caplog.messages)
