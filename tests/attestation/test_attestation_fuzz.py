"""Hypothesis fuzzing: parsers and verify on random bytes and mutated real evidence raise only
AttestationError subclasses. The quick suite runs a modest count; ``TESSERA_FUZZ_EXAMPLES`` raises it
(the 100,000-input campaign is ``python -m tests.attestation.fuzz_campaign``)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.attestation import fuzz_campaign
from tests.attestation.attest_fuzz import (
    Seed,
    check_collateral,
    check_parsers,
    check_policy,
    check_verify,
    mutate_bytes,
    mutate_collateral,
    oversized_case,
    seeds,
)

EXAMPLES = int(os.environ.get("TESSERA_FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
    derandomize=os.environ.get("TESSERA_FUZZ_RANDOM") is None,
)
SEEDS: list[Seed] = seeds()


@FUZZ
@given(st.binary(max_size=6000))
def test_parsers_on_random_bytes(data: bytes) -> None:
    check_parsers(data)


@FUZZ
@given(st.sampled_from([s.evidence for s in SEEDS]), st.integers(0, 2**32))
def test_parsers_on_mutated_evidence(evidence: bytes, rng_seed: int) -> None:
    check_parsers(mutate_bytes(random.Random(rng_seed), evidence))


@FUZZ
@given(st.sampled_from(range(len(SEEDS))), st.integers(0, 2**32))
def test_verify_on_mutated_evidence(index: int, rng_seed: int) -> None:
    seed = SEEDS[index]
    check_verify(seed, mutate_bytes(random.Random(rng_seed), seed.evidence))


@FUZZ
@given(st.sampled_from(range(len(SEEDS))), st.binary(max_size=2000))
def test_verify_on_random_bytes(index: int, data: bytes) -> None:
    check_verify(SEEDS[index], data)


@FUZZ
@given(st.sampled_from([s for s in SEEDS if s.collateral_json is not None]), st.integers(0, 2**32))
def test_verify_with_mutated_collateral(seed: Seed, rng_seed: int) -> None:
    assert seed.collateral_json is not None
    check_collateral(seed, mutate_collateral(random.Random(rng_seed), seed.collateral_json))


@FUZZ
@given(st.integers(0, 2**32))
def test_policy_documents(rng_seed: int) -> None:
    check_policy(random.Random(rng_seed))


@pytest.mark.parametrize("seed", SEEDS, ids=[s.name for s in SEEDS])
def test_unmutated_seeds_are_accepted(seed: Seed) -> None:
    assert check_verify(seed, seed.evidence) == "accept"


@FUZZ
@given(st.integers(0, 2**32))
def test_inputs_at_and_over_the_caps(rng_seed: int) -> None:
    case = oversized_case(random.Random(rng_seed), SEEDS)
    case.run()


def test_campaign_measures_every_format(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    assert fuzz_campaign.main(["--inputs", "400", "--seed", "3", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["unexpected_exceptions"] == 0 and figures["memory_measured"]
    formats = set(figures["per_format"])
    assert {"intel-sgx", "intel-tdx", "amd-sev-snp", "nvidia-h100"} <= formats
    for fig in figures["per_format"].values():
        assert fig["untyped_exceptions"] == 0
        assert fig["worst_peak_mb_per_input"] < 50  # issue 11's target (tracemalloc's view)
