"""The certified model as a Hugging Face ``transformers`` directory (``tessera model export --format hf``).

Writing needs no ``transformers``: the directory is JSON, safetensors and the tokenizer's JSON.

**Dense model and each DiPaCo path: GPT-2** (``GPT2LMHeadModel``). A Tessera block is GPT-2's block
without biases: pre-norm LayerNorm (eps 1e-5, with bias), fused QKV (q, k, v in that order, then heads),
a ``d_ff`` GELU MLP, learned positions, a final LayerNorm and an output projection. The tensors map
exactly; GPT-2's ``Conv1D`` stores ``[in, out]``, the transpose of ``nn.Linear``'s ``[out, in]``:

====================================  ==========================================  =================
Tessera                               GPT-2                                       how
====================================  ==========================================  =================
``embed.tok.weight``                  ``transformer.wte.weight``                  as is
``embed.pos.weight``                  ``transformer.wpe.weight``                  as is
``B.ln1.weight`` / ``.bias``          ``transformer.h.i.ln_1.weight`` / ``.bias``  as is
``B.attn.qkv.weight``                 ``transformer.h.i.attn.c_attn.weight``      transposed
(none)                                ``transformer.h.i.attn.c_attn.bias``        zeros
``B.attn.proj.weight``                ``transformer.h.i.attn.c_proj.weight``      transposed
(none)                                ``transformer.h.i.attn.c_proj.bias``        zeros
``B.ln2.weight`` / ``.bias``          ``transformer.h.i.ln_2.weight`` / ``.bias``  as is
``B.mlp.fc.weight``                   ``transformer.h.i.mlp.c_fc.weight``         transposed
(none)                                ``transformer.h.i.mlp.c_fc.bias``           zeros
``B.mlp.proj.weight``                 ``transformer.h.i.mlp.c_proj.weight``       transposed
(none)                                ``transformer.h.i.mlp.c_proj.bias``         zeros
``head.ln.weight`` / ``.bias``        ``transformer.ln_f.weight`` / ``.bias``     as is
``head.out.weight``                   ``lm_head.weight``                          as is (untied)
====================================  ==========================================  =================

``B`` is ``trunk.{i}`` (dense) or ``path.{i}.{choice i}`` (a DiPaCo path). The config sets what GPT-2's
defaults would change: ``activation_function`` ``gelu`` (exact erf GELU, as ``F.gelu``; GPT-2's default
``gelu_new`` is the tanh approximation), ``tie_word_embeddings`` false (Tessera's head is its own
module), ``n_inner`` = ``d_ff``, ``n_positions`` = ``seq_len``, ``layer_norm_epsilon`` 1e-5, dropouts 0,
no layer-index attention scaling.

**MoE model: a custom model in the directory** (``modeling_tessera_moe.py``, ``auto_map``, loaded with
``trust_remote_code=True``; :mod:`tessera.hfmoe` is the file, which imports torch and transformers only).
No architecture transformers ships computes Tessera's MoE block: its MoE models (Mixtral, Qwen2-MoE,
OLMoE, ...) use RMSNorm, rotary positions and gated SiLU experts, where Tessera has LayerNorm, learned
positions and two-layer GELU experts; mapping onto one would change the maths. The custom model keeps
Tessera's parameter names, so its ``model.safetensors`` holds theta under the names the chain certified.

**Tokenizer** (:mod:`tessera.hftokenizer`): the run's BPE ``tokenizer.json`` as is, or for byte-level
runs one whose 256 tokens are the bytes; both loaded by ``PreTrainedTokenizerFast``.

**Layout**: dense and MoE write the files at the top of the directory; DiPaCo writes one GPT-2 directory
per path, ``path-{n}/`` (``n`` the index into ``training.model.all_paths``, as ``tessera model sample
--path``): every path up to :data:`MAX_DEFAULT_PATHS`, else the ones ``--path`` names (embeddings and
head are copied into each; ``tessera model eval``/``sample`` read only a complete export). ``tessera.json`` holds what the native ``config.json`` holds (the model config, digests, where
the checkpoint was certified) and the SHA-256 of every file written; :func:`read_hf` refuses a directory
with a file missing or altered, and checks the theta rebuilt from the GPT-2 weights against the digest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save
from torch import Tensor

from tessera.errors import TesseraError
from tessera.hftokenizer import byte_tokenizer_json, tokenizer_config
from training.config import ModelConfig
from training.model import all_paths

#: The provenance and manifest file of a ``--format hf`` export.
MANIFEST_FILE = "tessera.json"
#: The ``format`` its ``tessera.json`` names.
HF_FORMAT = "tessera-hf-v1"
#: The custom MoE model's file in the export (``auto_map`` names it).
MOE_MODELING_FILE = "modeling_tessera_moe.py"
#: transformers' files of one model directory.
HF_CONFIG_FILE = "config.json"
HF_WEIGHTS_FILE = "model.safetensors"
HF_TOKENIZER_FILE = "tokenizer.json"
HF_TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
HF_GENERATION_FILE = "generation_config.json"
#: DiPaCo paths an export writes unless told which (``--path``): 16, the ``1m`` preset's.
MAX_DEFAULT_PATHS = 16

_LINEAR = (
    ("attn.qkv", "attn.c_attn"),
    ("attn.proj", "attn.c_proj"),
    ("mlp.fc", "mlp.c_fc"),
    ("mlp.proj", "mlp.c_proj"),
)
_NORMS = (("ln1", "ln_1"), ("ln2", "ln_2"))


class HFExportError(TesseraError):
    """A Hugging Face export could not be written, or a directory is not one (missing or altered file)."""


def path_dir(index: int) -> str:
    """The sub-directory of DiPaCo path ``index`` in an export."""
    return f"path-{index}"


def gpt2_state(params: Mapping[str, Tensor], blocks: Sequence[str]) -> dict[str, Tensor]:
    """GPT-2 (``GPT2LMHeadModel``) weights of theta whose blocks are ``blocks`` (``trunk.{i}`` or a DiPaCo
    path's ``path.{level}.{choice}``), by the module docstring's table."""
    out = {
        "transformer.wte.weight": params["embed.tok.weight"],
        "transformer.wpe.weight": params["embed.pos.weight"],
        "transformer.ln_f.weight": params["head.ln.weight"],
        "transformer.ln_f.bias": params["head.ln.bias"],
        "lm_head.weight": params["head.out.weight"],
    }
    for i, blk in enumerate(blocks):
        h = f"transformer.h.{i}"
        for ours, theirs in _NORMS:
            for p in ("weight", "bias"):
                out[f"{h}.{theirs}.{p}"] = params[f"{blk}.{ours}.{p}"]
        for ours, theirs in _LINEAR:
            w = params[f"{blk}.{ours}.weight"]
            out[f"{h}.{theirs}.weight"] = w.t()
            out[f"{h}.{theirs}.bias"] = w.new_zeros(w.shape[0])
    return {k: v.detach().contiguous().cpu() for k, v in out.items()}


def theta_of_gpt2(hf: Mapping[str, Tensor], blocks: Sequence[str]) -> dict[str, Tensor]:
    """The inverse of :func:`gpt2_state`: Tessera's parameters of ``blocks`` (and embed and head) from GPT-2
    weights; refuses a nonzero bias (Tessera has none) or a missing tensor."""
    try:
        out = {
            "embed.tok.weight": hf["transformer.wte.weight"],
            "embed.pos.weight": hf["transformer.wpe.weight"],
            "head.ln.weight": hf["transformer.ln_f.weight"],
            "head.ln.bias": hf["transformer.ln_f.bias"],
            "head.out.weight": hf["lm_head.weight"],
        }
        for i, blk in enumerate(blocks):
            h = f"transformer.h.{i}"
            for ours, theirs in _NORMS:
                for p in ("weight", "bias"):
                    out[f"{blk}.{ours}.{p}"] = hf[f"{h}.{theirs}.{p}"]
            for ours, theirs in _LINEAR:
                if bool(hf[f"{h}.{theirs}.bias"].any()):
                    raise HFExportError(f"{h}.{theirs}.bias is not zero: not a Tessera model")
                out[f"{blk}.{ours}.weight"] = hf[f"{h}.{theirs}.weight"].t().contiguous()
    except KeyError as exc:
        raise HFExportError(f"GPT-2 weights lack {exc}") from exc
    return out


def gpt2_config(cfg: ModelConfig, extra: Mapping[str, Any]) -> dict[str, Any]:
    """``config.json`` of a GPT-2 holding a dense model or one DiPaCo path of ``cfg`` (``extra`` added)."""
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": cfg.vocab_size,
        "n_positions": cfg.seq_len,
        "n_embd": cfg.d_model,
        "n_layer": cfg.n_layers,
        "n_head": cfg.n_heads,
        "n_inner": cfg.d_ff,
        "activation_function": "gelu",
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": False,
        "use_cache": True,
        **_token_ids(),
        "dtype": "float32",
        **extra,
    }


def moe_config(cfg: ModelConfig, extra: Mapping[str, Any]) -> dict[str, Any]:
    """``config.json`` of the custom MoE model (:mod:`tessera.hfmoe`) holding ``cfg``."""
    module = MOE_MODELING_FILE.removesuffix(".py")
    return {
        "architectures": ["TesseraMoeForCausalLM"],
        "model_type": "tessera_moe",
        "auto_map": {
            "AutoConfig": f"{module}.TesseraMoeConfig",
            "AutoModelForCausalLM": f"{module}.TesseraMoeForCausalLM",
        },
        "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.seq_len,
        "hidden_size": cfg.d_model,
        "num_attention_heads": cfg.n_heads,
        "num_hidden_layers": cfg.n_layers,
        "intermediate_size": cfg.d_ff,
        "num_experts": cfg.n_experts,
        "num_experts_per_tok": cfg.top_k,
        "router_aux_loss_coef": cfg.aux_loss_coef,
        "layer_norm_eps": 1e-5,
        "tie_word_embeddings": False,
        "use_cache": False,
        **_token_ids(),
        "dtype": "float32",
        **extra,
    }


def _token_ids() -> dict[str, int]:
    # id 0 ends a document (byte 0, or BPE's <|doc|>): generation stops there, as a document does
    return {"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}


def _model_files(
    cfg: ModelConfig, config: dict[str, Any], weights: dict[str, Tensor], tok: bytes, bpe: bool
) -> dict[str, bytes]:
    gen = {"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0, "use_cache": config["use_cache"]}
    weights_bytes = _safetensors_bytes(weights)
    return {
        HF_CONFIG_FILE: _json(config),
        HF_GENERATION_FILE: _json(gen),
        HF_WEIGHTS_FILE: weights_bytes,
        HF_TOKENIZER_FILE: tok,
        HF_TOKENIZER_CONFIG_FILE: _json(tokenizer_config(cfg, bpe)),
    }


def chosen_paths(cfg: ModelConfig, paths: Sequence[int] | None) -> list[int]:
    """The DiPaCo path indices an export writes: ``paths``, or every path when there are at most
    :data:`MAX_DEFAULT_PATHS` (each is a whole GPT-2: embeddings and head are copied into each)."""
    n = len(all_paths(cfg))
    if paths is None:
        if n > MAX_DEFAULT_PATHS:
            raise HFExportError(
                f"the model has {n} DiPaCo paths, each a whole GPT-2 in the export: choose them with --path"
            )
        return list(range(n))
    bad = [i for i in paths if not 0 <= i < n]
    if bad or not paths:
        raise HFExportError(f"DiPaCo paths are numbered 0..{n - 1}, not {bad or 'none'}")
    return sorted(set(paths))


def hf_files(
    params: Mapping[str, Tensor],
    cfg: ModelConfig,
    tokenizer_bytes: bytes | None,
    paths: Sequence[int] | None = None,
) -> Iterator[tuple[str, bytes]]:
    """Every file of the export but ``tessera.json`` as (relative path, bytes), one model at a time (the
    module docstring's layout); ``paths``: the DiPaCo paths to write (:func:`chosen_paths`)."""
    tok = tokenizer_bytes if tokenizer_bytes is not None else byte_tokenizer_json()
    bpe = tokenizer_bytes is not None
    if cfg.mode == "dense":
        blocks = [f"trunk.{i}" for i in range(cfg.n_layers)]
        yield from _model_files(cfg, gpt2_config(cfg, {}), gpt2_state(params, blocks), tok, bpe).items()
    elif cfg.mode == "moe":
        weights = {k: params[k].detach().contiguous().cpu() for k in sorted(params)}
        yield from _model_files(cfg, moe_config(cfg, {}), weights, tok, bpe).items()
        yield MOE_MODELING_FILE, (Path(__file__).parent / "hfmoe.py").read_bytes()
    else:
        every = all_paths(cfg)
        for n in chosen_paths(cfg, paths):
            blocks = [f"path.{lv}.{c}" for lv, c in enumerate(every[n])]
            config = gpt2_config(cfg, {"tessera_path": list(every[n])})
            for name, data in _model_files(cfg, config, gpt2_state(params, blocks), tok, bpe).items():
                yield f"{path_dir(n)}/{name}", data


def write_hf(
    params: Mapping[str, Tensor],
    cfg: ModelConfig,
    out: Path,
    doc: Mapping[str, Any],
    tokenizer_bytes: bytes | None,
    paths: Sequence[int] | None = None,
) -> Path:
    """Write the export of theta ``params`` into ``out``: :func:`hf_files` and ``tessera.json`` (``doc``,
    the native config document, with the format, each file's SHA-256 and, DiPaCo, each written path's
    choices); returns ``out``."""
    manifest = dict(doc) | {"format": HF_FORMAT}
    if cfg.mode == "dipaco":
        every = all_paths(cfg)
        manifest["paths"] = {path_dir(n): list(every[n]) for n in chosen_paths(cfg, paths)}
    out.mkdir(parents=True, exist_ok=True)
    sums = {}
    for name, data in hf_files(params, cfg, tokenizer_bytes, paths):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
        sums[name] = hashlib.sha256(data).hexdigest()
    manifest["files"] = dict(sorted(sums.items()))
    (out / MANIFEST_FILE).write_bytes(_json(manifest))
    return out


def is_hf_export(directory: Path) -> bool:
    """Whether ``directory`` holds a ``--format hf`` export (its ``tessera.json``)."""
    return (directory / MANIFEST_FILE).is_file()


def check_files(directory: Path, manifest: Mapping[str, Any]) -> None:
    """Refuse an export one of whose files is missing or not the one ``tessera.json`` names."""
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise HFExportError(f"{directory}/{MANIFEST_FILE} names no files")
    for name, sha in sorted(files.items()):
        try:
            data = (directory / name).read_bytes()
        except OSError:
            raise HFExportError(f"{directory}/{name} is missing (named by {MANIFEST_FILE})") from None
        if hashlib.sha256(data).hexdigest() != sha:
            raise HFExportError(f"{directory}/{name} was altered (not the SHA-256 {MANIFEST_FILE} names)")


def read_hf(directory: Path, cfg: ModelConfig, manifest: Mapping[str, Any]) -> dict[str, Tensor]:
    """Theta of the export in ``directory`` (model config ``cfg``, ``tessera.json`` ``manifest``), its files
    checked first; the caller checks theta's digest."""
    check_files(directory, manifest)
    try:
        if cfg.mode == "moe":
            return load_file(str(directory / HF_WEIGHTS_FILE))
        if cfg.mode == "dense":
            hf = load_file(str(directory / HF_WEIGHTS_FILE))
            return theta_of_gpt2(hf, [f"trunk.{i}" for i in range(cfg.n_layers)])
        theta: dict[str, Tensor] = {}
        every = all_paths(cfg)
        held = manifest.get("paths") or {}
        if sorted(held) != sorted(path_dir(n) for n in range(len(every))):
            raise HFExportError(
                f"{directory} holds {len(held)} of the model's {len(every)} DiPaCo paths (exported with "
                "--path): tessera model eval/sample need them all; transformers loads each"
            )
        for n, path in enumerate(every):
            hf = load_file(str(directory / path_dir(n) / HF_WEIGHTS_FILE))
            part = theta_of_gpt2(hf, [f"path.{lv}.{c}" for lv, c in enumerate(path)])
            for k, v in part.items():
                if k in theta and not torch.equal(theta[k], v):
                    raise HFExportError(f"{directory}: the paths hold different values of {k}")
                theta.setdefault(k, v)
        return theta
    except (OSError, SafetensorError) as exc:
        raise HFExportError(f"{directory}: cannot read its weights: {exc}") from exc


def _json(doc: Any) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def _safetensors_bytes(tensors: dict[str, Tensor]) -> bytes:
    return bytes(save(tensors, metadata={"format": "pt"}))
