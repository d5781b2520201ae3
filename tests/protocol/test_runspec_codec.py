"""The run file names the codec's index coding only when it is not the default."""

from __future__ import annotations

from dataclasses import replace

from protocol.runspec import RunSpec
from training.config import CodecConfig


def test_default_coding_is_left_out_and_other_codings_round_trip() -> None:
    spec = RunSpec(codec=CodecConfig())  # the plain codec of run files written before the recipe
    assert "index" not in spec.to_json()["codec"]  # run files written before the field keep their digest
    assert RunSpec.from_json(spec.to_json()) == spec
    ef = replace(spec, codec=CodecConfig(topk=56, bits=2, transform="shaped", index="elias-fano"))
    doc = ef.to_json()
    assert doc["codec"]["index"] == "elias-fano"
    assert RunSpec.from_json(doc) == ef
    assert ef.digest() != spec.digest()
    assert RunSpec().to_json()["codec"]["index"] == "elias-fano"  # the recipe's, written out
