"""Tessera's mixture-of-experts transformer for Hugging Face ``transformers`` (``trust_remote_code=True``).

``tessera model export --format hf`` copies this file into an MoE export as ``modeling_tessera_moe.py``;
the export's ``config.json`` names its classes in ``auto_map``. It is self-contained: it imports torch
and transformers only, nothing of Tessera's, so the directory works where Tessera is not installed.

The maths is ``training.model``'s in ``moe`` mode: learned positions; per block, pre-norm LayerNorm,
causal multi-head attention from a fused QKV projection without biases, then a second LayerNorm and a
mixture: a softmax router over the experts, each token sent to its ``num_experts_per_tok`` likeliest with
the gates renormalised over those, each expert a two-layer exact-GELU MLP without biases; a final
LayerNorm and an untied output projection. Parameter names are Tessera's (``embed.tok.weight``,
``trunk.{i}.attn.qkv.weight``, ``moe.{i}.expert.{e}.fc.weight``, ``head.out.weight``, ...), so the
weights file holds theta under the names the chain certified.

``loss`` (given ``labels``) is the next-token cross-entropy; with ``output_router_logits=True`` the
Switch-style load-balancing loss Tessera trains with is added (weight ``router_aux_loss_coef``) and is
returned as ``aux_loss``. There is no key/value cache: each generation step reruns the context (at most
``max_position_embeddings`` tokens).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import MoeCausalLMOutputWithPast


class TesseraMoeConfig(PretrainedConfig):
    """Shape of the MoE model (Tessera's ``ModelConfig`` under transformers' usual names)."""

    model_type = "tessera_moe"

    def __init__(
        self,
        vocab_size: int = 256,
        max_position_embeddings: int = 64,
        hidden_size: int = 64,
        num_attention_heads: int = 4,
        num_hidden_layers: int = 2,
        intermediate_size: int = 128,
        num_experts: int = 4,
        num_experts_per_tok: int = 2,
        router_aux_loss_coef: float = 0.01,
        layer_norm_eps: float = 1e-5,
        **kwargs: Any,
    ) -> None:
        self.vocab_size = vocab_size
        self.max_position_embeddings = max_position_embeddings
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.num_hidden_layers = num_hidden_layers
        self.intermediate_size = intermediate_size
        self.num_experts = num_experts
        self.num_experts_per_tok = num_experts_per_tok
        self.router_aux_loss_coef = router_aux_loss_coef
        self.layer_norm_eps = layer_norm_eps
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(**kwargs)


class Attention(nn.Module):
    """Causal multi-head self-attention (fused QKV: q, k, v, each split into heads)."""

    def __init__(self, cfg: TesseraMoeConfig) -> None:
        super().__init__()
        self.n_heads = cfg.num_attention_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size, bias=False)
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)

    def forward(self, x: Tensor, keep: Tensor | None) -> Tensor:
        """``keep``: None (every token), or ``[B, 1, T, T]`` booleans (causal and not padding)."""
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        if keep is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    """One expert: two-layer exact-GELU MLP."""

    def __init__(self, cfg: TesseraMoeConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        """``proj(gelu(fc(x)))``."""
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    """A block's norms, attention and router (its experts live in ``moe.{i}``)."""

    def __init__(self, cfg: TesseraMoeConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.attn = Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.router = nn.Linear(cfg.hidden_size, cfg.num_experts, bias=False)


class Experts(nn.Module):
    """The experts of one layer."""

    def __init__(self, cfg: TesseraMoeConfig) -> None:
        super().__init__()
        self.expert = nn.ModuleList(MLP(cfg) for _ in range(cfg.num_experts))


class Embed(nn.Module):
    """Token and learned position embeddings."""

    def __init__(self, cfg: TesseraMoeConfig) -> None:
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.pos = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)


class Head(nn.Module):
    """Final norm and output projection."""

    def __init__(self, cfg: TesseraMoeConfig) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.out = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)


class TesseraMoePreTrainedModel(PreTrainedModel):
    """transformers' plumbing for the MoE model (config class, weight initialisation)."""

    config_class = TesseraMoeConfig
    base_model_prefix = "tessera"
    _no_split_modules = ["Block"]

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            module.weight.normal_(0.0, 0.02)
        elif isinstance(module, nn.LayerNorm):
            module.weight.fill_(1.0)
            module.bias.zero_()


class TesseraMoeForCausalLM(TesseraMoePreTrainedModel, GenerationMixin):
    """The MoE language model; ``forward`` returns logits (and the loss given ``labels``)."""

    def __init__(self, config: TesseraMoeConfig) -> None:
        super().__init__(config)
        self.embed = Embed(config)
        self.trunk = nn.ModuleList(Block(config) for _ in range(config.num_hidden_layers))
        self.moe = nn.ModuleList(Experts(config) for _ in range(config.num_hidden_layers))
        self.head = Head(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        """The token embedding."""
        return self.embed.tok

    def get_output_embeddings(self) -> nn.Module:
        """The output projection."""
        return self.head.out

    def mixture(self, layer: int, router: nn.Linear, x: Tensor) -> tuple[Tensor, Tensor]:
        """Layer ``layer``'s mixture of ``x`` ``[B, T, d]`` and its load-balancing loss."""
        cfg = self.config
        flat = x.reshape(-1, x.shape[-1])
        probs = F.softmax(router(flat), dim=-1)
        gate, idx = probs.topk(cfg.num_experts_per_tok, dim=-1)
        gate = gate / gate.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(flat)
        experts = self.moe[layer]
        assert isinstance(experts, Experts)
        for e in range(cfg.num_experts):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            y = experts.expert[e](flat[tok]) * gate[tok, slot].unsqueeze(-1)
            out = out.index_add(0, tok, y.to(out.dtype))
        frac = F.one_hot(idx, cfg.num_experts).sum(dim=1).float().mean(dim=0) / cfg.num_experts_per_tok
        aux = cfg.num_experts * (frac * probs.mean(dim=0)).sum()
        return out.view_as(x), aux

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        labels: Tensor | None = None,
        output_router_logits: bool | None = None,
        **kwargs: Any,
    ) -> MoeCausalLMOutputWithPast:
        """Logits ``[B, T, vocab]``; ``loss`` given ``labels`` (shifted inside, -100 ignored)."""
        t = input_ids.shape[1]
        if position_ids is None and attention_mask is not None:  # left padding: positions from the text
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        elif position_ids is None:
            position_ids = torch.arange(t, device=input_ids.device).unsqueeze(0)
        x = self.embed.tok(input_ids) + self.embed.pos(position_ids)
        keep = None
        if attention_mask is not None and not bool(attention_mask.all()):
            causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            keep = causal & attention_mask.bool()[:, None, None, :]
            keep = keep | torch.eye(t, dtype=torch.bool, device=x.device)  # a padding row sees itself
        aux = x.new_zeros(())
        for i, blk in enumerate(self.trunk):
            assert isinstance(blk, Block)
            x = x + blk.attn(blk.ln1(x), keep)
            y, a = self.mixture(i, blk.router, blk.ln2(x))
            aux = aux + a / len(self.trunk)
            x = x + y
        logits = self.head.out(self.head.ln(x))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100
            )
            if output_router_logits:
                loss = loss + self.config.router_aux_loss_coef * aux
        return MoeCausalLMOutputWithPast(loss=loss, aux_loss=aux, logits=logits)

    def prepare_inputs_for_generation(  # type: ignore[override]
        self, input_ids: Tensor, attention_mask: Tensor | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """The whole context at every step (no key/value cache), cut to the last ``max_position_embeddings``
        tokens as ``tessera model sample`` does (the other arguments, a cache among them, are not used:
        the signature holds for transformers 4 and 5)."""
        n = self.config.max_position_embeddings
        if attention_mask is not None:
            attention_mask = attention_mask[:, -n:]
        return {"input_ids": input_ids[:, -n:], "attention_mask": attention_mask}
