"""Typed configurations of the training core: model, inner loop, outer step and codec.

Every field has a docstring; every config is a frozen dataclass so that it can be hashed, compared and
written into a run's record. ``to_dict``/``from_dict`` give a JSON-safe form for the wire and reports.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from training.codecregistry import CODECS, codecs_allowing
from training.errors import ConfigError

Mode = Literal["dense", "moe", "dipaco"]

T = TypeVar("T")


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the modular byte-level transformer (see ``training.model``)."""

    mode: Mode = "moe"
    """``dense`` (one trunk), ``moe`` (each trunk layer's MLP is a routed mixture of experts) or
    ``dipaco`` (each level is a choice between alternative blocks; a path picks one per level)."""
    vocab_size: int = 256
    """Token vocabulary; 256 for the byte-level tokenizer of ``training.data``."""
    seq_len: int = 64
    """Context length in tokens (positions are learned, so this is also the maximum)."""
    d_model: int = 64
    """Width of the residual stream."""
    n_heads: int = 4
    """Attention heads per block (``d_model`` must be divisible by it)."""
    n_layers: int = 2
    """Trunk blocks (``dense``/``moe``) or DiPaCo levels (``dipaco``)."""
    d_ff: int = 128
    """Hidden width of each MLP (of each expert in ``moe`` mode)."""
    n_experts: int = 4
    """Experts per MoE layer (``moe`` mode only)."""
    top_k: int = 2
    """Experts each token is routed to (``moe`` mode only)."""
    aux_loss_coef: float = 0.01
    """Weight of the Switch-style load-balancing loss (``moe`` mode only)."""
    n_choices: int = 2
    """Alternative blocks per DiPaCo level (``dipaco`` mode only); there are ``n_choices ** n_layers``
    paths."""

    def __post_init__(self) -> None:
        if self.mode not in ("dense", "moe", "dipaco"):
            raise ConfigError(f"unknown model mode {self.mode!r}")
        if self.n_heads < 1:
            raise ConfigError("n_heads must be positive")
        if self.d_model % self.n_heads:
            raise ConfigError("d_model must be divisible by n_heads")
        if self.mode == "moe" and not 1 <= self.top_k <= self.n_experts:
            raise ConfigError("top_k must lie in [1, n_experts]")
        if min(self.vocab_size, self.seq_len, self.d_model, self.n_layers, self.d_ff) < 1:
            raise ConfigError("model dimensions must be positive")
        if self.mode == "dipaco" and self.n_choices < 1:
            raise ConfigError("n_choices must be positive")


@dataclass(frozen=True)
class InnerConfig:
    """The miner's inner loop: H AdamW steps on its assigned modules (see ``training.inner``)."""

    steps: int = 30
    """H: inner steps per outer round."""
    batch_size: int = 8
    """Sequences per inner step."""
    lr: float = 3e-3
    """Peak AdamW learning rate."""
    warmup_steps: int = 100
    """Linear warm-up, counted in global inner steps (round * H + step)."""
    total_steps: int = 3000
    """Global inner steps of the run; the learning rate decays with a cosine to ``min_lr_ratio * lr``."""
    min_lr_ratio: float = 0.1
    """Floor of the cosine schedule as a fraction of ``lr``."""
    weight_decay: float = 0.1
    """AdamW decoupled weight decay."""
    beta1: float = 0.9
    """AdamW first-moment decay."""
    beta2: float = 0.95
    """AdamW second-moment decay."""
    eps: float = 1e-8
    """AdamW epsilon."""
    grad_clip: float = 1.0
    """Global gradient-norm clip (0 disables)."""
    transcript_interval: int = 10
    """k: the transcript records the state digest (and a snapshot) every k inner steps."""
    carry_optimizer: bool = True
    """Miners carry AdamW's moments (of the parameters they train again) from round to round, as DiLoCo
    and every reference implementation do (docs/decisions/training-recipe.md). A devnet miner always
    carries them (``miner.work``); the step-0 state it serves holds them, and a validator checks that its
    parameters are theta_r and replays from it."""

    @classmethod
    def recipe(cls, batch_size: int = 8, lr: float = 3e-3) -> InnerConfig:
        """The network's inner loop (``protocol.recipe.run_recipe`` writes it into every run file): H = 60
        and a transcript state after every step, at a preset's batch and learning rate. H = 60 halves the
        wire bits per parameter and inner step of H = 30 (docs/decisions/training-recipe.md), and a state
        every step makes an audit replay one step from one state (docs/decisions/traffic-budget.md). The
        field defaults above are what a run file written before the recipe means where it omits a field."""
        return cls(steps=60, batch_size=batch_size, lr=lr, transcript_interval=1)

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.transcript_interval < 1:
            raise ConfigError("steps, batch_size and transcript_interval must be positive")
        if self.lr <= 0:
            raise ConfigError("lr must be positive")


@dataclass(frozen=True)
class OuterConfig:
    """The DiLoCo outer step applied per module to the merged pseudo-gradients (see ``training.diloco``).

    A run takes :meth:`recipe` (``protocol.recipe.run_recipe``); the field defaults are DiLoCo's, the
    benchmarks' uncompressed reference arm."""

    lr: float = 0.7
    """Outer learning rate (DiLoCo default 0.7)."""
    momentum: float = 0.9
    """Outer momentum (DiLoCo default 0.9); 0 with lr 1 is plain averaging."""
    nesterov: bool = True
    """Nesterov momentum (DiLoCo default) rather than heavy-ball."""
    merge: Literal["mean", "sender_mean"] = "mean"
    """How contributions combine per value: ``mean`` divides by the weight of every miner that trained
    the parameter; ``sender_mean`` divides by the weight of the miners whose decoded value is non-zero
    there (for sparse codecs: a value one miner sent is not shrunk by the miners that sent nothing)."""

    @classmethod
    def plain_average(cls) -> OuterConfig:
        """theta_{r+1} = mean of the miners' local models (FedAvg)."""
        return cls(lr=1.0, momentum=0.0, nesterov=False)

    @classmethod
    def recipe(cls) -> OuterConfig:
        """The network's outer step (the devnet runs it; docs/decisions/training-recipe.md): lr 1 with a
        light Nesterov momentum of 0.5. The error-feedback memory already acts as a momentum (SparseLoCo),
        so DiLoCo's own 0.7 / 0.9 on top of it overshoots; 0.5 measured better than plain averaging
        in both modes at protocol."""
        return cls(lr=1.0, momentum=0.5, nesterov=True)


def _codecs_with(part: str, value: str) -> str:
    """The codecs whose declaration's ``part`` (``transforms``, ``indexes``) allows ``value``, for errors."""
    return " or ".join(codecs_allowing(part, value))


@dataclass(frozen=True)
class CodecConfig:
    """How a miner compresses each pseudo-gradient tensor (see ``training.codecs``).

    A run takes :meth:`recipe` (``protocol.recipe.run_recipe``); the field defaults are the plain top-k
    codec, which run files written before the recipe mean where they omit a field."""

    name: str = "topk"
    """A codec of ``training.codecregistry.CODECS``: ``dense`` sends every value (quantised to ``bits``);
    ``topk`` sends k values per chunk."""
    chunk: int = 4096
    """Values per chunk (a 64x64 tile when ``transform='dct'``; must then be 4096). With ``shaped`` or
    ``tiles`` the tiles follow the tensor and ``topk / chunk`` is the share of each tile that is kept."""
    topk: int = 32
    """Values kept per chunk (``topk`` codec)."""
    bits: int = 2
    """Bits per kept value: 2, 4, 8 (uniform, one fp16 scale per chunk) or 32 (raw fp32)."""
    transform: Literal["none", "dct", "shaped", "tiles"] = "none"
    """``dct``: select and quantise in the 2-D DCT-II basis of 64x64 tiles of the flattened tensor (DeMo);
    ``shaped``: the same in tiles that follow the tensor's rows and columns (each side the largest divisor
    of the tensor's side up to 64, so nothing is padded; a vector is one row), keeping
    ``ceil(topk * tile area / chunk)`` coefficients per tile; ``tiles``: those tiles without the DCT (values
    selected as they are, as SparseLoCo does); ``none``: chunks of the flattened tensor as they are.
    The network's recipe (:meth:`recipe`) uses ``tiles``."""
    ef_beta: float = 1.0
    """Error-feedback decay: the miner accumulates ``e = ef_beta * e + delta`` and sends C(e) (the
    recipe: 0.95, as in SparseLoCo, so a residual too old to fit the current checkpoint fades)."""
    index: Literal["packed", "elias-fano"] = "packed"
    """How a ``topk`` chunk's sorted indices are written: ``packed`` at ``ceil(log2(width))`` bits each, or
    ``elias-fano``: ``floor(log2(width / k))`` low bits each plus the high parts in unary, ``k * (L + 1) +
    ((width - 1) >> L) + 1`` bits per chunk (about 8.1 bits per index for top-56 of 4,096 instead of 12), so the
    same bits carry more values (docs/decisions/training-recipe.md)."""
    feedback: Literal["sent", "applied"] = "sent"
    """What the miner subtracts from its error-feedback memory: what it ``sent`` (classic error feedback)
    or what the merge ``applied`` to those values (read from the next checkpoint), so the part of its
    update that averaging with miners who sent nothing there shrank away stays in memory."""

    def __post_init__(self) -> None:
        codec = CODECS.get(self.name) if isinstance(self.name, str) else None  # a list is unhashable
        if codec is None:
            raise ConfigError(f"unknown codec {self.name!r}")
        if self.bits not in (2, 4, 8, 32):
            raise ConfigError("bits must be 2, 4, 8 or 32")
        if self.chunk < 1 or not 1 <= self.topk <= self.chunk:
            raise ConfigError("need 1 <= topk <= chunk")
        if not codecs_allowing("transforms", self.transform):  # declared nowhere
            raise ConfigError(f"unknown transform {self.transform!r}")
        if self.transform not in codec.transforms:
            raise ConfigError(
                f"the {self.transform} transform needs the {_codecs_with('transforms', self.transform)} codec"
            )
        if self.transform == "dct" and self.chunk != 4096:
            raise ConfigError("the dct transform works on 64x64 tiles: chunk must be 4096")
        if not codecs_allowing("indexes", self.index):
            raise ConfigError(f"unknown index coding {self.index!r}")
        if self.index not in codec.indexes:
            raise ConfigError(
                f"the {self.index} index coding needs the {_codecs_with('indexes', self.index)} codec"
            )
        if self.feedback not in ("sent", "applied"):
            raise ConfigError(f"unknown feedback {self.feedback!r}")
        if not 0.0 <= self.ef_beta <= 1.0:
            raise ConfigError("ef_beta must lie in [0, 1]")

    @classmethod
    def recipe(cls) -> CodecConfig:
        """The network's codec (the devnet runs it; docs/decisions/training-recipe.md): top-110 of every
        4,096 values in tiles that follow the tensor's shape, as they are (no DCT: the
        DCT cost 8% of held-out loss in MoE and 3% in DiPaCo at this budget), their indices in the
        Elias-Fano code, 2-bit values, error feedback with decay 0.95: 0.0086 payload bits (0.0095 on the
        wire, header included) per parameter per inner step at H = 30 on the benchmark's models, within the
        budget of 0.01."""
        return cls(
            name="topk", chunk=4096, topk=110, bits=2, transform="tiles", ef_beta=0.95, index="elias-fano"
        )


def to_dict(cfg: Any) -> dict[str, Any]:
    """A JSON-safe dict of a config dataclass."""
    return dataclasses.asdict(cfg)


def from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """Build ``cls`` from a dict, rejecting unknown fields with :class:`ConfigError`."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = set(data) - names
    if unknown:
        raise ConfigError(f"unknown {cls.__name__} fields: {sorted(unknown)}")
    return cls(**data)


@dataclass(frozen=True)
class RunConfig:
    """Everything that fixes a training run's math (handy for simulate/bench)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    """The model."""
    inner: InnerConfig = field(default_factory=InnerConfig)
    """The miners' inner loop."""
    outer: OuterConfig = field(default_factory=OuterConfig)
    """The outer step."""
    codec: CodecConfig = field(default_factory=CodecConfig)
    """The pseudo-gradient codec."""
