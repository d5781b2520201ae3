"""The devnet's shape (:class:`DevnetConfig`) and its error (:class:`DevnetError`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from protocol.rounds.deployment import NetworkParams
from tessera.errors import TesseraError


class DevnetError(TesseraError):
    """The devnet could not start or lost a component."""


@dataclass
class DevnetConfig:
    """Shape of a devnet."""

    workdir: Path = Path(".devnet")
    miners: int = 4
    validators: int = 2
    mode: str = "moe"
    """``moe`` or ``dipaco``."""
    inner_steps: int | None = None
    """H: inner steps per round (None: the recipe's, ``training.config.InnerConfig.recipe``)."""
    batch_size: int | None = None
    """Sequences per inner step (None: the preset's)."""
    preset: str = "tiny"
    """The model preset (``training.presets``: tiny, 1m, 10m, 50m, 125m); its shape and learning rate."""
    corpus: str = "bundled"
    """``bundled`` or a ``.txt``/``.jsonl`` file or a folder of them (``training.corpus.load_corpus_path``):
    the run file names it by absolute path and pins its content digest, so every node derives the same
    token streams."""
    bpe_vocab: int | None = None
    """Train a BPE tokenizer of this many tokens on :attr:`corpus` (``DIR/tokenizer.json``, pinned in the
    run file); None: byte-level tokens."""
    samples: int = 2
    """Continuations of :attr:`sample_prompt` generated from each round's certified checkpoint (0: none)."""
    sample_prompt: str = "The "
    """The prompt the samples continue."""
    miner_stake: int | None = None
    """The run's minimum miner stake in tokens, which every miner bonds (None: ``NetworkParams``' default,
    350,000, where the deterrence formula audits 0.39% of pairs). A small stake (e.g. 100) gives q = 1:
    demos and tests that need a lazy miner audited every round set it."""
    segments_per_miner: int = 2
    commit_blocks: int = 60
    """Least blocks of the commit phase at 1-s blocks: when phases are sized, a floor of that many seconds
    (the sized window is never shorter); not sized, the window as it is."""
    reveal_blocks: int = 10
    """Least blocks of the reveal phase."""
    score_commit_blocks: int = 30
    """Least blocks of the score-commit phase."""
    score_reveal_blocks: int = 10
    """Least blocks of the score-reveal phase."""
    size_phases: bool = True
    """Size each phase from the work measured on this machine (:mod:`tessera.devnet.sizing`); False: the
    ``*_blocks`` above as they are."""
    phase_safety: float = 4.0
    """Safety factor on the measured work (``tessera.devnet.sizing.LOAD_SAFETY``)."""
    block_time: float = 1.0
    fast_forward: bool = True
    tee: str = "simulated"
    """Miners serve evidence from the development enclave; validators trust its root (devnet only)."""
    merge_method: str = "mean"
    fresh: bool = True
    """Start from an empty workdir (False: resume the persisted chain and node state)."""
    threads: int = 1
    state_interval: float | None = None
    """Seconds between anvil's periodic state dumps (None: only on a clean exit). ``tessera faults`` sets
    it so that a ``kill -9`` of the chain restarts from the last dump."""
    extra_args: dict[str, list[str]] = field(default_factory=dict)
    """Extra command-line flags per node name (appended: they win over the defaults)."""
    node_env: dict[str, dict[str, str]] = field(default_factory=dict)
    """Extra environment variables per node name (e.g. ``{"miner1": {"ATEN_CPU_CAPABILITY": "default"}}``);
    they win over the devnet's own."""
    miner_devices: dict[str, str] = field(default_factory=dict)
    """Where chosen miners train, by node name (e.g. ``{"miner0": "cuda"}``: its ``--device``); every other
    node computes on the CPU, so the validators replay those miners' segments on the CPU."""

    def miner_stake_wei(self) -> int:
        """The minimum miner stake the devnet deploys with and its miners bond (wei)."""
        if self.miner_stake is None:
            return NetworkParams().min_miner_stake
        if (
            isinstance(self.miner_stake, bool)
            or not isinstance(self.miner_stake, int)
            or self.miner_stake < 1
        ):
            raise DevnetError(f"miner stake must be a whole number of tokens >= 1, not {self.miner_stake!r}")
        return self.miner_stake * 10**18

    def node_names(self) -> list[str]:
        """Every node's name: ``validator0..``, then ``miner0..``."""
        return [f"validator{i}" for i in range(self.validators)] + [f"miner{i}" for i in range(self.miners)]
