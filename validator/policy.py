"""The validator's verification thresholds and budgets: one typed policy, defined once.

``VerifyPolicy`` is what ``validator.pipeline`` runs with; it is the ``verify`` section of
``validator.config.ValidatorConfig``, so every threshold here is also a validator setting (TOML key of the
``[validator.verify]`` table, ``TESSERA_VALIDATOR_VERIFY_*`` variable, ``--verify.*`` flag) with this
default and this documentation; ``device`` is the node's. No torch here: the config must load without it.
"""

from __future__ import annotations

from dataclasses import dataclass

# The replay tolerances (relative L2 per tensor). Calibrated across CPU instruction
# sets and thread counts with ``tessera bench crossplatform`` (docs/benchmarks.md, "Cross-platform replay
# tolerances"): the largest honest differences measured were 2.9e-6 (parameters), 1.4e-5 (AdamW moments,
# 10-step segments) and 0 (the recompressed update and residual).
PARAM_REL_TOL = 1e-4
"""Replayed parameters (35x the largest honest difference measured)."""
REPLAY_REL_TOL = 1e-3
"""Replayed AdamW moments and step counters: 1e-4 left a 7x margin over honest 10-step replays across
instruction sets, so it is 1e-3 (73x); a 10-step segment with one batch swapped is off by 0.5-0.7."""
EF_REL_TOL = 1e-4
"""The recompressed update and the committed residual (honest differences measured 0 across instruction
sets: the codec is elementwise and selection arithmetic)."""


@dataclass(frozen=True)
class VerifyPolicy:
    """Named thresholds and budgets of verification."""

    max_update_bytes: int = 16 * 1024 * 1024
    """Size cap of an update."""
    max_rel_norm: float = 4.0
    """Per-module bound: ||pseudo-gradient|| <= max_rel_norm * ||theta||: a cheap early refusal of a huge
    update (a scaled one is refused exactly by the error-feedback recompute, F12). Calibrated on the devnet's
    run (H = 60, the recipe's shaped-DCT codec): honest updates reach 0.88-1.09 of the head's weights in the
    first training round from theta_0 and 0.55-0.80 later (``tests/validator/test_bounds_calibration.py``
    measures the first round); 1.0 refused, and slashed, honest miners once the codec
    sent most of the delta's energy. 4.0 is about 4x the largest honest figure; x1e6 (``poisoner-huge``)
    stays far above it."""
    segments_per_miner: int = 2
    """Transcript segments each validator replays per miner when the chain draws no audits (q = 1, every
    validator: see ``validator.sampling``)."""
    audit_segments: int = 1
    """Seed-chosen segments a committee member replays per audited miner: one step exposes a
    miner faking a fraction f of its steps with probability about f, the model's ``p = f``; the members
    of a committee replay different segments (their windows of the round's order)."""
    replay_rel_tol: float = REPLAY_REL_TOL
    """Relative L2 tolerance, per tensor, of the replayed AdamW moments and counters against the served
    end state (one platform gives 0). The moments are a pure function of the served start state and the
    batch, so they prove the forward/backward work was done. 1e-3 (``validator.policy.REPLAY_REL_TOL``):
    honest replays across CPU instruction sets and thread counts differ by up to 1.4e-5 over a 10-step
    segment (1.6e-6 over one step), a segment with one of its 10 batches swapped by 0.5-0.7
    (``tessera bench crossplatform``, docs/benchmarks.md)."""
    param_rel_tol: float = PARAM_REL_TOL
    """Relative L2 tolerance of the replayed *parameters* (one platform gives 0; across CPU instruction sets
    honest replays differ by up to 2.9e-6, one swapped batch by 0.03). Kept separate from the
    moments' so an operator can loosen it for cross-platform replays without loosening the moments; it
    was once 5e-2 to paper over idle MoE experts drifting off the shared AdamW clock, which the inner loop
    now prevents by giving them a zero gradient."""
    ef_rel_tol: float = EF_REL_TOL
    """Relative L2 tolerance, over the whole update, of the decoded update against the validator's own
    compression of (theta_r - final state) plus the miner's error-feedback residual, and of the residual the
    miner commits to against the recomputed one. The codec runs in fp32 on the CPU on both sides, so one
    platform gives 0 (and so did every pair of CPU instruction sets measured); a scaled update (x3) is off
    by 2."""
    min_final_cosine: float = -1.0
    """Least cosine, on the update's non-zero coordinates, between the decoded update and theta_r minus the
    final transcript params; -1 (default) refuses nothing. The exact recompute (``ef_rel_tol``) supersedes
    it, and an honest cosine falls as the error-feedback residual grows (0.72-0.80 by round 12 in
    ``python -m benchmarks.ef_norms``), so a fixed floor would in time refuse, and slash, honest miners."""
    attested_check_probability: float = 0.1
    """Share of rounds in which an attested miner is recomputed with ``segments_per_miner`` segments."""
    attested_segments: int = 1
    """Segments replayed for an attested miner in the other rounds. Not 0: the anchor and error-feedback
    checks tie the update only to a final state the miner itself serves, and a quote only to the update's
    digest, so without a replay an attested miner could invent its transcript (a development
    quote and an invented transcript took 88% of the emission). The segment is drawn with the seed fixed
    after the commits close, which the miner cannot know when it commits."""
    eval_own_batches: int = 1
    """Of the miner's own batches, how many to evaluate before/after."""
    heldout_windows: int = 8
    """Held-out windows evaluated before/after."""
    min_own_gain: float = 0.0
    """Relative own-data loss drop an update must exceed to score above 0."""
    max_heldout_excess: float = 0.0
    """If the held-out gain exceeds the own gain by more than this, the score is scaled by own/held."""
    device: str = "cpu"
    """Where replays and loss evaluations compute (``cpu``, ``cuda``, ``cuda:N``; ``training.device``). The
    comparisons, the codec and everything fetched or served stay on the CPU in fp32."""
    usefulness_rel_norm: float = 0.01
    """Usefulness is scored on the update rescaled to this norm relative to the assigned modules' weights
    (``||delta'|| = usefulness_rel_norm * ||theta_assigned||``), so the score depends on the update's
    direction only and multiplying an update never raises it (docs/security.md F9). 0.01 is of the order
    of an honest update's relative norm (measured 0.003 to 0.016 per module after 6 inner steps)."""
