"""The network's recipe: the one function that builds a run, for the launcher and the devnet alike.

``tessera runspec init`` and ``tessera devnet`` both write ``run_recipe(...)``, so the network an operator
launches from the guides is the one every benchmark and devnet figure describes (docs/decisions/
one-network.md). A run is a model preset in a mode (``training.presets``: shape, batch, learning rate), the
recipe's inner loop, outer step and codec (``InnerConfig.recipe``, ``OuterConfig.recipe``,
``CodecConfig.recipe``: docs/decisions/training-recipe.md), DiPaCo epochs, the validators' merge, and an
audit section of committees of one (``protocol.rounds.auditspec``), from which ``tessera contracts deploy``
derives q at the run's stake. ``RunSpec()``'s defaults equal ``run_recipe()``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from protocol.rounds.auditspec import AuditSpec
from protocol.runspec import RunSpec, TokenizerSpec, recipe_epoch_rounds
from training.config import CodecConfig, InnerConfig, OuterConfig
from training.merge import MergePolicy
from training.presets import get_preset


def run_recipe(
    preset: str = "tiny",
    mode: str = "moe",
    *,
    tokenizer: TokenizerSpec | None = None,
    inner_steps: int | None = None,
    batch_size: int | None = None,
    miners: int | None = None,
    validators: int | None = None,
    merge_method: str = "mean",
    epoch_rounds: int | None = None,
    corpus: str = "bundled",
    corpus_digest: str | None = None,
    genesis_seed: int = 0,
    base_dir: Path | None = None,
) -> RunSpec:
    """The run of ``preset`` in ``mode``: the preset's model (vocabulary: the tokenizer's, else bytes), its
    batch and learning rate in the recipe's inner loop (H and the batch overridable), the recipe's outer
    step and codec, ``merge_method``, the mode's epochs (overridable), and ``AuditSpec``'s audits
    (committees of one) planned for ``miners`` and ``validators`` (default: ``AuditSpec``'s). Raises
    ``training.errors.ConfigError`` for an unknown preset or mode, ``RunSpecError`` for a bad combination."""
    p = get_preset(preset)
    model = p.model(mode, 256 if tokenizer is None else tokenizer.vocab_size)
    inner = InnerConfig.recipe(batch_size=p.batch_size, lr=p.lr)
    if inner_steps is not None:
        inner = replace(inner, steps=inner_steps)
    if batch_size is not None:
        inner = replace(inner, batch_size=batch_size)
    plan = AuditSpec()
    audits = replace(
        plan,
        miners=plan.miners if miners is None else miners,
        validators=plan.validators if validators is None else validators,
    )
    return RunSpec(
        model=model,
        inner=inner,
        outer=OuterConfig.recipe(),
        codec=CodecConfig.recipe(),
        corpus=corpus,
        genesis_seed=genesis_seed,
        corpus_digest=corpus_digest,
        tokenizer=tokenizer,
        merge=MergePolicy(merge_method),  # the validators' merge, which miners rebuild theta_{r+1} with
        epoch_rounds=recipe_epoch_rounds(mode) if epoch_rounds is None else epoch_rounds,
        audits=audits,
        base_dir=base_dir,
    )
